"""Read-only views of the running process (`AppView`): /status, /healthz, /metrics, dashboard.

Every function reads the view at one moment (in the event loop thread, so
the picture is consistent within a call) and returns plain frozen values; nothing here changes
the app. Time comes from the caller (``now``, Unix seconds from the app's clock).

**Health** (`health`), checked in this order; the first that applies decides:

1. ``no_data``: nothing was published yet (routers get No Data Available).
2. ``expired``: the served set holds an entry whose ``expires`` has passed; the rebuild
   without it is pending (normally for well under a second).
3. ``empty``: the served set is empty (every entry expired, or every group lost its data).
4. ``sources_failing``: no source is in state ``ok`` and the newest successful load of any
   source is older than the staleness bound (``--health-stale-after``, default 3600 s), or
   there never was one.

Otherwise the app is ``ok`` (HTTP 200).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from rtr_server.http.view import (
    AppView,
    GroupView,
    SourceView,
)
from rtr_server.serving import SSH_REFUSALS, TRANSPORTS
from snapshot.serial import Serial


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """The served state."""

    serial: int
    session_ids: dict[str, int]
    counts: dict[str, int]
    #: When this serial was published (None if it was not published by this process).
    published_wall: float | None
    #: When the first served entry expires (None: none does).
    next_expiry_wall: float | None
    publishes: int


@dataclass(frozen=True, slots=True)
class RouterView:
    """One connected router."""

    peer: str
    version: int | None
    state: str
    session_id: int | None
    serial: int | None
    #: Serials behind the current one (RFC 1982); None before its first response.
    lag: int | None
    bytes_sent: int
    reset_queries: int
    serial_queries: int
    notifies: int


@dataclass(frozen=True, slots=True)
class SessionsView:
    """Connected routers and the server's counters."""

    #: Connected routers by negotiated version ("0", "1", "2"; "none" before the first query).
    by_version: dict[str, int]
    routers: tuple[RouterView, ...]
    accepted: int
    #: Sessions by transport (tcp, tls, ssh).
    accepted_by_transport: dict[str, int]
    rejected: dict[str, int]
    #: Connections closed before their first query to admit a newcomer, by cap.
    evicted: dict[str, int]
    #: Admission under pressure now (pre-query timeout shrunk), and episodes so far.
    admission_pressure: bool
    pressure_episodes: int
    #: Connections that have not sent a valid query yet.
    silent: int
    #: Connections from outside the allowed networks, by listener address.
    rejected_not_allowed_by_listener: dict[str, int]
    #: The configured connection limits (counts and seconds).
    limits: dict[str, float]
    accept_errors: int
    reset_queries: int
    serial_queries: int
    cache_resets: int
    notifies: int
    notify_rounds: int
    bytes_sent: int
    errors_sent: dict[int, int]
    disconnects: dict[str, int]
    #: Queries held for the first data now, held since start, and answered No Data after the
    #: arrival hold ran out.
    held_now: int = 0
    held_queries: int = 0
    hold_timeouts: int = 0


@dataclass(frozen=True, slots=True)
class PersistenceView:
    """The persister's status (see `PersisterStatus`)."""

    backend: str
    path: str
    last_persisted_id: str | None
    last_commit_wall: float | None
    commits: int
    failures: int
    last_error: str | None
    #: Committing stopped for good (a permanent error, or a failed close).
    stopped: bool = False
    #: The code of the error that stopped it (``persistence_failed``, ...) and where it happened,
    #: e.g. ``{"phase": "close", "cause": "revocation_failed"}``.
    error_code: str | None = None
    error_details: dict[str, str] | None = None
    #: Why closing the store failed (the persistence close phase); None: it did not fail.
    close_error: str | None = None


@dataclass(frozen=True, slots=True)
class Health:
    """The /healthz verdict; ``reason`` is one of the codes in the module docstring."""

    healthy: bool
    reason: str
    detail: str


# ------------------------------------------------------------------ sources and groups


def sources(app: AppView) -> tuple[SourceView, ...]:
    """Every configured source with its status (none for a state follower)."""
    return app.source_views()


def active_groups(app: AppView) -> dict[str, str | None]:
    """The active group per payload kind (None: no group is ready for it)."""
    return app.active_groups()


def groups(app: AppView) -> tuple[GroupView, ...]:
    """Every group in priority order (none for a state follower)."""
    return app.group_views()


# ------------------------------------------------------------------ the served state


def snapshot(app: AppView) -> SnapshotInfo | None:
    """The served state, or None before the first publish."""
    state = app.state
    if state is None:
        return None
    last = app.publishes.last
    published = last.wall if last is not None and last.serial == state.serial.value else None
    ids = state.session_ids
    return SnapshotInfo(
        serial=state.serial.value,
        session_ids={"v0": ids.v0, "v1": ids.v1, "v2": ids.v2},
        counts=state.snapshot.counts(),
        published_wall=published,
        next_expiry_wall=app.usable_until(),
        publishes=app.publishes.total,
    )


# ------------------------------------------------------------------ router sessions


def _lag(serial: Serial | None, current: Serial | None) -> int | None:
    if serial is None or current is None:
        return None
    return serial.distance_to(current)


def sessions(app: AppView) -> SessionsView:
    """Connected routers (each with its serial lag) and the server's counters."""
    server = app.server
    state = server.state
    current = state.serial if state is not None else None
    by_version: Counter[str] = Counter()
    routers: list[RouterView] = []
    held_now = 0
    for conn in list(server.connections):
        session = conn.session
        held_now += session.held
        version = session.version
        by_version["none" if version is None else str(version)] += 1
        routers.append(
            RouterView(
                peer=conn.peer,
                version=version,
                state=session.state.name.lower(),
                session_id=session.session_id,
                serial=None if session.last_serial is None else session.last_serial.value,
                lag=_lag(session.last_serial, current),
                bytes_sent=conn.stats.bytes_sent,
                reset_queries=conn.stats.reset_queries,
                serial_queries=conn.stats.serial_queries,
                notifies=conn.stats.notifies,
            )
        )
    routers.sort(key=lambda r: r.peer)
    stats = server.stats
    return SessionsView(
        by_version={v: by_version.get(v, 0) for v in ("0", "1", "2", "none")},
        routers=tuple(routers),
        accepted=stats.accepted,
        accepted_by_transport={t: stats.accepted_by_transport[t] for t in TRANSPORTS},
        rejected={
            "max_connections": stats.rejected_max_connections,
            "max_per_ip": stats.rejected_max_per_ip,
            "not_allowed": stats.rejected_not_allowed,
            "tls_handshake_timeout": stats.tls_handshake_timeouts,
            "tls_handshake_failure": stats.tls_handshake_failures,
            "tls_ip_mismatch": stats.rejected_tls_ip_mismatch,
            **{f"ssh_{reason}": stats.ssh_refusals[reason] for reason in SSH_REFUSALS},
        },
        evicted={
            "max_connections": server.admission.stats.evicted["max_connections"],
            "max_per_ip": server.admission.stats.evicted["max_per_ip"],
        },
        admission_pressure=server.admission.under_pressure,
        pressure_episodes=server.admission.stats.pressure_episodes,
        silent=server.admission.silent,
        rejected_not_allowed_by_listener=dict(stats.rejected_not_allowed_by_listener),
        limits={
            "max_connections": float(server.settings.max_connections),
            "max_per_ip": float(server.settings.max_per_ip),
            "query_timeout_seconds": float(server.settings.query_timeout),
            "write_timeout_seconds": float(server.settings.effective_write_timeout),
            "tls_handshake_timeout_seconds": float(server.settings.tls_handshake_timeout),
            "arrival_hold_seconds": float(server.settings.arrival_hold),
        },
        accept_errors=stats.accept_errors,
        reset_queries=stats.reset_queries,
        serial_queries=stats.serial_queries,
        cache_resets=stats.cache_resets,
        notifies=stats.notifies,
        notify_rounds=stats.notify_rounds,
        bytes_sent=stats.bytes_sent,
        errors_sent=dict(stats.errors_sent),
        disconnects={reason.value: n for reason, n in stats.disconnects.items()},
        held_now=held_now,
        held_queries=stats.held_queries,
        hold_timeouts=stats.hold_timeouts,
    )


# ------------------------------------------------------------------ persistence


def persistence(app: AppView) -> PersistenceView | None:
    """The persister's status, or None when state is kept in memory only."""
    persister = app.persister
    if persister is None:
        return None
    st = persister.status
    return PersistenceView(
        backend=st.backend,
        path=st.path,
        last_persisted_id=st.last_persisted_id,
        last_commit_wall=st.last_commit_wall,
        commits=st.commits,
        failures=st.failures,
        last_error=st.last_error,
        stopped=st.stopped,
        error_code=st.error_code,
        error_details=st.error_details,
        close_error=app.persistence_close_error,
    )


# ------------------------------------------------------------------ health


def health(app: AppView, now: float, stale_after: float) -> Health:
    """The /healthz verdict at ``now`` (see the module docstring for the rules)."""
    state = app.state
    if state is None:
        return Health(
            healthy=False, reason="no_data", detail="no data yet: routers get No Data Available"
        )
    until = app.usable_until()
    if until is not None and now >= until:
        return Health(
            healthy=False,
            reason="expired",
            detail=f"served data holds entries that expired {now - until:.0f} s ago",
        )
    if state.snapshot.is_empty():
        return Health(
            healthy=False,
            reason="empty",
            detail=f"serial {state.serial} is empty: every entry expired or was withdrawn",
        )
    views = sources(app)
    if views and not any(s.state == "ok" for s in views):
        successes = [s.last_success_wall for s in views if s.last_success_wall is not None]
        newest = max(successes, default=None)
        if newest is None or now - newest > stale_after:
            since = "never" if newest is None else f"{now - newest:.0f} s ago"
            states = ", ".join(f"{s.name}: {s.state}" for s in views)
            return Health(
                healthy=False,
                reason="sources_failing",
                detail=f"no source is ok ({states}); newest successful load {since} "
                f"(bound {stale_after:g} s)",
            )
    counts = state.snapshot.counts()
    return Health(
        healthy=True,
        reason="ok",
        detail=f"serial {state.serial}: {counts['vrp_v4'] + counts['vrp_v6']} VRPs, "
        f"{counts['aspa']} ASPAs, {counts['router_key']} router keys",
    )
