"""`fit_fd_limit`: at start the soft RLIMIT_NOFILE goes up to the hard one; router caps fit in it.

Every router connection holds one descriptor, and so do the listeners, HTTP connections,
sources, state files and logs (`reserved_descriptors`). When ``--max-connections`` cannot fit
in the descriptors the process may open even after raising the soft limit to the hard one, the
cap is lowered to what fits and one warning line says so (the server still starts: the
operator raises the limit, e.g. ``LimitNOFILE=`` in the unit, or lowers the option). Without
this, accept would fail with EMFILE long before the configured cap (handled, never spinning,
but the cap could never be reached). Pure planning (`plan_fd_limit`) plus one function that
applies it to this process.
"""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass, replace

from rtr_server.app_config import AppConfig

__all__ = [
    "BASE_DESCRIPTORS",
    "FdPlan",
    "fit_fd_limit",
    "fitted",
    "plan_fd_limit",
    "reserved_descriptors",
]

log = logging.getLogger(__name__)

#: Descriptors of a running server beyond its connections: stdio, logs, the event loop, thread
#: pools, state files with their WAL and lock, TLS/SSH key files, DNS lookups.
BASE_DESCRIPTORS = 64


def reserved_descriptors(listeners: int, http_connections: int, sources: int) -> int:
    """Descriptors that are not router connections (one per listener, HTTP client, source)."""
    return BASE_DESCRIPTORS + listeners + http_connections + 2 * sources


@dataclass(frozen=True)
class FdPlan:
    """The limits before and after, and the router cap that fits."""

    soft_before: int
    soft: int
    hard: int
    max_connections: int
    capped: bool


def plan_fd_limit(soft: int, hard: int, max_connections: int, reserved: int) -> FdPlan:
    """Raise ``soft`` to ``hard`` (only as far as needed when unlimited); cap what cannot fit."""
    need = max_connections + reserved
    if hard == resource.RLIM_INFINITY:
        target = max(soft, need) if soft != resource.RLIM_INFINITY else soft
    else:
        target = max(soft, hard) if soft != resource.RLIM_INFINITY else hard
    room = need if target == resource.RLIM_INFINITY else target - reserved
    effective = max(1, min(max_connections, room))
    return FdPlan(soft, target, hard, effective, effective < max_connections)


def fit_fd_limit(max_connections: int, reserved: int) -> FdPlan:
    """Apply `plan_fd_limit` to this process; logs the raise and any cap (one line each)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    plan = plan_fd_limit(soft, hard, max_connections, reserved)
    if plan.soft != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (plan.soft, hard))
        except (OSError, ValueError) as exc:
            log.warning(
                "could not raise the open-file limit from %d to %d: %s", soft, plan.soft, exc
            )
            plan = replace(plan_fd_limit(soft, soft, max_connections, reserved), hard=hard)
        else:
            log.info("open-file limit raised from %d to %d", soft, plan.soft)
    if plan.capped:
        log.warning(
            "--max-connections %d cannot be reached: this process may open %d files and needs "
            "%d besides the routers; serving at most %d routers at once (raise the hard limit, "
            "e.g. LimitNOFILE= in the systemd unit, or lower --max-connections)",
            max_connections,
            plan.soft,
            reserved,
            plan.max_connections,
        )
    return plan


def fitted(config: AppConfig) -> AppConfig:
    """``config`` with its router cap fitted to this process's open-file limit (`fit_fd_limit`)."""
    http = config.http
    reserved = reserved_descriptors(
        listeners=len(config.server.listen) + (0 if http is None else 1),
        http_connections=0 if http is None else http.max_connections,
        sources=len(config.sources) + len(config.group_sources),
    )
    plan = fit_fd_limit(config.server.max_connections, reserved)
    if not plan.capped:
        return config
    return replace(config, server=replace(config.server, max_connections=plan.max_connections))
