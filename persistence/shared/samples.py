"""The shared reader's I/O-free samples: its status, its metrics and readiness for kinds.

Contract (persistence contract, shared reading): a sample reads only what the reader holds in
memory (the current snapshot, the last read failure, counters, the build slots), never the
file. ``available`` is False before a state was read, while the state read last is refused,
and once the view held when a read failure began ran out; ``ready`` means VRPs are usable and
``aspa_ready`` names each usable ASPA family (covered and not past its own end), with each
family's usable-until time and the writer's active group of each family.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from persistence.shared.build_slots import BuildSlots
from persistence.shared.types import (
    ALL_AFIS,
    Afi,
    ReaderState,
    SharedMetrics,
    SharedSnapshot,
    SharedStatus,
)
from snapshot.kinds import PayloadKind

__all__ = [
    "COUNTERS",
    "READY_KINDS",
    "ReaderFacts",
    "metrics_of",
    "readiness_request",
    "ready_for",
    "status_of",
    "timer_delay",
]

#: The kinds `wait_ready` may ask for.
READY_KINDS = frozenset({PayloadKind.VRP, PayloadKind.ASPA})

#: The reader's counters (`metrics_of` reads them; ``stale`` counts dropped calibrations).
COUNTERS = (
    "local_generation",
    "polls",
    "poll_failures",
    "states_read",
    "read_errors",
    "header_builds",
    "calibrations",
    "stale",
)


@dataclass(frozen=True, slots=True)
class ReaderFacts:
    """What the reader knows at one moment beyond its snapshot (for `status_of`)."""

    state: ReaderState
    #: The last read failure and the usable-until time of the view held when it began.
    error: str | None
    failed_until: float | None
    overdue: bool
    reads: int
    read_errors: int


def readiness_request(
    required: AbstractSet[PayloadKind], aspa_afi: Afi | None
) -> tuple[frozenset[PayloadKind], frozenset[Afi]]:
    """The kinds and ASPA families `wait_ready` waits for (both families unless one is picked).

    Raises:
        ValueError: ``required`` is empty or names another kind, or ``aspa_afi`` is no `Afi`.
    """
    wanted = frozenset(required)
    if not wanted or not wanted <= READY_KINDS:
        raise ValueError("required must be a non-empty set of PayloadKind.VRP / ASPA")
    if aspa_afi is not None and not isinstance(aspa_afi, Afi):
        raise ValueError("aspa_afi must be Afi.IPV4, Afi.IPV6 or None")
    return wanted, ALL_AFIS if aspa_afi is None else frozenset({aspa_afi})


def ready_for(
    current: SharedSnapshot, wanted: frozenset[PayloadKind], families: frozenset[Afi], now: float
) -> bool:
    """Whether ``current`` serves every kind in ``wanted`` (ASPA: each of ``families``) now."""
    if PayloadKind.VRP in wanted and not current.usable(PayloadKind.VRP, now):
        return False
    return PayloadKind.ASPA not in wanted or all(current.aspa_usable(f, now) for f in families)


def status_of(current: SharedSnapshot | None, facts: ReaderFacts, now: float) -> SharedStatus:
    """The status of a reader holding ``current`` at its effective time ``now``."""
    if current is None:
        return SharedStatus(
            state=facts.state,
            store_id=None,
            epoch=None,
            generation=None,
            config_revision=None,
            persistence_error=facts.error,
            available=False,
            ready_kinds=frozenset(),
            cleanup_overdue=facts.overdue,
            reads=facts.reads,
            read_errors=facts.read_errors,
        )
    until = facts.failed_until
    available = not current.refused and (facts.error is None or until is None or now < until)
    return SharedStatus(
        state=facts.state,
        store_id=current.store_id,
        epoch=current.epoch,
        generation=current.generation,
        config_revision=current.config_revision,
        persistence_error=facts.error,
        available=available,
        ready_kinds=frozenset(k for k in PayloadKind if current.usable(k, now)),
        cleanup_overdue=facts.overdue,
        upstream_id=current.upstream_id,
        ready=current.usable(PayloadKind.VRP, now),
        aspa_ready=frozenset(afi for afi in Afi if current.aspa_usable(afi, now)),
        usable_until_by_kind=dict(current.usable_until_by_kind),
        aspa_usable_until_by_afi=dict(current.aspa_usable_until_by_afi),
        active_groups=dict(current.active_groups),
        aspa_covered=current.aspa_covered,
        aspa_active_groups=dict(current.aspa_active_groups),
        local_generation=current.local_generation,
        reader_id=current.reader_id,
        trusted=not current.refused,
        reads=facts.reads,
        read_errors=facts.read_errors,
    )


def timer_delay(current: SharedSnapshot | None, now: float, recheck: float) -> float:
    """How long the expiry timer sleeps: until the view's next end, at most ``recheck``."""
    until = None if current is None or current.refused else current.usable_until
    if until is None:
        return recheck
    return min(recheck, max(0.0, until - now))


def metrics_of(
    current: SharedSnapshot | None,
    *,
    state: ReaderState,
    counts: Mapping[str, int],
    builds: BuildSlots,
    last_poll_at: float | None,
    watchers: int,
) -> SharedMetrics:
    """The metrics of a reader holding ``current`` with ``counts`` and ``builds``."""
    return SharedMetrics(
        state=state,
        local_generation=counts["local_generation"],
        upstream_generation=None if current is None else current.generation,
        polls=counts["polls"],
        poll_failures=counts["poll_failures"],
        states_read=counts["states_read"],
        header_builds=counts["header_builds"],
        calibrations=counts["calibrations"],
        stale_calibrations=counts["stale"],
        max_concurrent_builds=builds.total,
        builds_running=builds.running,
        builds_waiting=builds.waiting,
        last_poll_at=last_poll_at,
        vrps=0 if current is None else current.snapshot.vrp_count,
        router_keys=0 if current is None else len(current.snapshot.router_keys),
        aspas=0 if current is None else len(current.snapshot.aspas),
        watchers=watchers,
    )
