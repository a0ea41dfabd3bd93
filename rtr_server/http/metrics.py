"""Prometheus collectors over a running `App`, registered on a registry the caller owns.

Nothing is registered at import time and the default ``REGISTRY`` is never used:
`register_collectors` adds one collector per area (sources and groups, the served snapshot,
router sessions, persistence) to the registry it is given. Each collector reads the app when
scraped (`rtr_server.http.observe`), so values are never stale and nothing is updated on the
serving path. Names follow StayRTR where one exists (``rpki_vrps``, ``rtr_clients``,
``rtr_serial``); the README lists every family.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import CollectorRegistry

from rtr_protocol import ErrorCode
from rtr_server import __version__
from rtr_server.http import observe
from rtr_server.http.view import KINDS, SOURCE_STATES, AppView

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric


Families = Iterable["Metric"]


def _gauge(name: str, doc: str, labels: Sequence[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


def _counter(name: str, doc: str, labels: Sequence[str] = ()) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, labels=list(labels))


def _flag(value: bool) -> float:
    return 1.0 if value else 0.0


class SourceCollector:
    """Per source: state, last success, records, bytes, errors; per group: started, active."""

    def __init__(self, app: AppView) -> None:
        """Read ``app`` on every scrape."""
        self.app = app

    def collect(self) -> Families:
        """The source and group families."""
        now = self.app.clock.wall()
        state = _gauge(
            "rpki_source_state",
            "1 for the state the source is in (starting, waiting, ok, error, expired)",
            ["source", "kind", "state"],
        )
        connected = _gauge(
            "rpki_source_connected", "RTR sources: 1 while the connection is up", ["source"]
        )
        success = _gauge(
            "rpki_source_last_success_timestamp_seconds",
            "Unix time of the source's last successful load with new content",
            ["source"],
        )
        age = _gauge(
            "rpki_source_last_success_age_seconds",
            "Seconds since the source's last successful load with new content",
            ["source"],
        )
        records = _gauge(
            "rpki_source_records", "Records in the source's current payload", ["source", "kind"]
        )
        read = _counter("rpki_source_read_bytes_total", "Bytes read from the source", ["source"])
        errors = _counter(
            "rpki_source_errors_total", "Failed attempts by error class", ["source", "class"]
        )
        syncs = _counter(
            "rpki_source_syncs_total",
            "Successful contacts with the upstream (unchanged answers included)",
            ["source"],
        )
        for src in observe.sources(self.app):
            for name in SOURCE_STATES:
                state.add_metric([src.name, src.kind, name], _flag(src.state == name))
            if src.connected is not None:
                connected.add_metric([src.name], _flag(src.connected))
            if src.last_success_wall is not None:
                success.add_metric([src.name], src.last_success_wall)
                age.add_metric([src.name], max(0.0, now - src.last_success_wall))
            for kind, count in sorted(src.records.items()):
                records.add_metric([src.name, kind], count)
            read.add_metric([src.name], src.bytes_read)
            for error_class, count in sorted(src.errors.items()):
                errors.add_metric([src.name, error_class], count)
            syncs.add_metric([src.name], src.syncs)
        active = _gauge(
            "rpki_group_active",
            "1 when the group is the active one for the payload kind",
            ["group", "kind"],
        )
        started = _gauge("rpki_group_started", "1 once the group's sources run", ["group"])
        for group in observe.groups(self.app):
            started.add_metric([group.name], _flag(group.started))
            for kind in KINDS:
                active.add_metric([group.name, kind], _flag(kind in group.active_for))
        yield from (state, connected, success, age, records, read, errors, syncs, active, started)


class SnapshotCollector:
    """The served state: serial, session ids, records by kind, age, expiry, health."""

    def __init__(self, app: AppView, stale_after: float) -> None:
        """Read ``app`` on every scrape; ``stale_after`` is the /healthz staleness bound."""
        self.app = app
        self.stale_after = stale_after

    def collect(self) -> Families:
        """The snapshot families (most are absent before the first publish)."""
        app = self.app
        now = app.clock.wall()
        info = InfoMetricFamily("rtr_serve_build", "rtr-serve version")
        info.add_metric([], {"version": __version__})
        yield info
        verdict = observe.health(app, now, self.stale_after)
        healthy = _gauge(
            "rtr_healthy", "1 while /healthz answers 200; the label says why", ["reason"]
        )
        healthy.add_metric([verdict.reason], _flag(verdict.healthy))
        yield healthy
        publishes = _counter("rtr_publishes_total", "Serials published since the start")
        publishes.add_metric([], app.publishes.total)
        yield publishes
        snap = observe.snapshot(app)
        if snap is None:
            return
        serial = _gauge("rtr_serial", "Serial number of the served state")
        serial.add_metric([], snap.serial)
        session = _gauge("rtr_session_id", "Session id per RTR version", ["version"])
        for version, value in snap.session_ids.items():
            session.add_metric([version.removeprefix("v")], value)
        vrps = _gauge("rpki_vrps", "VRPs served", ["ip_version"])
        vrps.add_metric(["4"], snap.counts["vrp_v4"])
        vrps.add_metric(["6"], snap.counts["vrp_v6"])
        aspas = _gauge("rpki_aspas", "ASPA records served (one per customer)")
        aspas.add_metric([], snap.counts["aspa"])
        keys = _gauge("rpki_router_keys", "BGPsec router keys served")
        keys.add_metric([], snap.counts["router_key"])
        yield from (serial, session, vrps, aspas, keys)
        if snap.published_wall is not None:
            published = _gauge(
                "rtr_last_publish_timestamp_seconds", "Unix time the served serial was published"
            )
            published.add_metric([], snap.published_wall)
            age = _gauge(
                "rtr_snapshot_age_seconds", "Seconds since the served serial was published"
            )
            age.add_metric([], max(0.0, now - snap.published_wall))
            yield from (published, age)
        if snap.next_expiry_wall is not None:
            expiry = _gauge(
                "rpki_next_expiry_seconds",
                "Seconds until the first served entry expires (negative: overdue)",
            )
            expiry.add_metric([], snap.next_expiry_wall - now)
            yield expiry


class SessionCollector:
    """Router sessions: clients by version, queries, notifies, bytes, errors, disconnects."""

    def __init__(self, app: AppView, *, router_lag: bool) -> None:
        """Read ``app`` on every scrape; ``router_lag`` adds one lag series per router."""
        self.app = app
        self.router_lag = router_lag

    def collect(self) -> Families:
        """The session families."""
        view = observe.sessions(self.app)
        clients = _gauge(
            "rtr_clients",
            "Connected routers by negotiated RTR version (none: no query yet)",
            ["version"],
        )
        for version, count in view.by_version.items():
            clients.add_metric([version], count)
        accepted = _counter("rtr_connections_total", "Router connections accepted")
        accepted.add_metric([], view.accepted)
        by_transport = _counter(
            "rtr_transport_connections_total", "Router sessions by transport", ["transport"]
        )
        for transport, count in view.accepted_by_transport.items():
            by_transport.add_metric([transport], count)
        rejected = _counter(
            "rtr_rejected_connections_total", "Connections closed at accept", ["reason"]
        )
        for reason, count in view.rejected.items():
            rejected.add_metric([reason], count)
        evicted = _counter(
            "rtr_evicted_connections_total",
            "Connections closed before their first query to admit a newcomer, by cap",
            ["reason"],
        )
        for reason, count in view.evicted.items():
            evicted.add_metric([reason], count)
        pressure = _gauge(
            "rtr_admission_pressure", "1 while connections are near max-connections, else 0"
        )
        pressure.add_metric([], 1 if view.admission_pressure else 0)
        episodes = _counter(
            "rtr_admission_pressure_episodes_total", "Episodes of admission under pressure"
        )
        episodes.add_metric([], view.pressure_episodes)
        silent = _gauge("rtr_silent_connections", "Connections that have sent no valid query yet")
        silent.add_metric([], view.silent)
        not_allowed = _counter(
            "rtr_not_allowed_connections_total",
            "Connections from outside the allowed networks, by listener",
            ["listener"],
        )
        for listener, count in sorted(view.rejected_not_allowed_by_listener.items()):
            not_allowed.add_metric([listener], count)
        limits = _gauge("rtr_limit", "Configured connection limits (counts, seconds)", ["name"])
        for name, value in view.limits.items():
            limits.add_metric([name], value)
        accept_errors = _counter("rtr_accept_errors_total", "Failed accept calls")
        accept_errors.add_metric([], view.accept_errors)
        queries = _counter("rtr_queries_total", "Queries answered with data", ["type"])
        queries.add_metric(["reset"], view.reset_queries)
        queries.add_metric(["serial"], view.serial_queries)
        resets = _counter("rtr_cache_resets_total", "Serial Queries answered with Cache Reset")
        resets.add_metric([], view.cache_resets)
        notifies = _counter("rtr_notifies_total", "Serial Notify PDUs sent")
        notifies.add_metric([], view.notifies)
        rounds = _counter("rtr_notify_rounds_total", "Serial Notify rounds")
        rounds.add_metric([], view.notify_rounds)
        held = _gauge("rtr_held_queries", "Queries held now for the first data")
        held.add_metric([], view.held_now)
        held_total = _counter(
            "rtr_held_queries_total", "Queries that arrived before the first data and were held"
        )
        held_total.add_metric([], view.held_queries)
        hold_timeouts = _counter(
            "rtr_hold_timeouts_total",
            "Held queries answered with No Data Available when the arrival hold ran out",
        )
        hold_timeouts.add_metric([], view.hold_timeouts)
        sent = _counter("rtr_sent_bytes_total", "Bytes sent to routers")
        sent.add_metric([], view.bytes_sent)
        errors = _counter("rtr_errors_sent_total", "Error Reports sent", ["code", "name"])
        for code, count in sorted(view.errors_sent.items()):
            errors.add_metric([str(code), _error_name(code)], count)
        disconnects = _counter(
            "rtr_disconnects_total", "Closed router connections by reason class", ["reason"]
        )
        for reason, count in sorted(view.disconnects.items()):
            disconnects.add_metric([reason], count)
        yield from (clients, accepted, by_transport, rejected, accept_errors, queries, resets)
        yield from (notifies, rounds, sent, errors, disconnects, not_allowed, limits)
        yield from (evicted, pressure, episodes, silent)
        yield from (held, held_total, hold_timeouts)
        if self.router_lag:
            lag = _gauge(
                "rtr_router_serial_lag",
                "Serials a router is behind the served one (routers after their first answer)",
                ["peer", "version"],
            )
            for router in view.routers:
                if router.lag is not None:
                    lag.add_metric([router.peer, str(router.version)], router.lag)
            yield lag


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.lower()
    except ValueError:
        return "unknown"


class PersistenceCollector:
    """The persister's status; nothing when state is kept in memory only."""

    def __init__(self, app: AppView) -> None:
        """Read ``app`` on every scrape."""
        self.app = app

    def collect(self) -> Families:
        """The persistence families."""
        view = observe.persistence(self.app)
        if view is None:
            return
        info = InfoMetricFamily("rtr_persistence", "Where state is saved and the last saved id")
        info.add_metric(
            [],
            {
                "backend": view.backend,
                "path": view.path,
                "last_persisted_id": view.last_persisted_id or "",
            },
        )
        commits = _counter("rtr_persistence_commits_total", "Successful saves")
        commits.add_metric([], view.commits)
        failures = _counter("rtr_persistence_failures_total", "Failed saves")
        failures.add_metric([], view.failures)
        yield from (info, commits, failures)
        if view.last_commit_wall is not None:
            last = _gauge(
                "rtr_persistence_last_commit_timestamp_seconds", "Unix time of the last save"
            )
            last.add_metric([], view.last_commit_wall)
            age = _gauge("rtr_persistence_last_commit_age_seconds", "Seconds since the last save")
            age.add_metric([], max(0.0, self.app.clock.wall() - view.last_commit_wall))
            yield from (last, age)


class FunctionCollector:
    """Families produced by a callable (the HTTP layer's own counters)."""

    def __init__(self, produce: Callable[[], Families]) -> None:
        """Call ``produce`` on every scrape."""
        self.produce = produce

    def collect(self) -> Families:
        """Whatever ``produce`` yields."""
        return self.produce()


class _Collector(Protocol):
    def collect(self) -> Families: ...


class NonEmpty:
    """Drops the families of ``collector`` that have no sample (no HELP/TYPE lines for them)."""

    def __init__(self, collector: _Collector) -> None:
        """Wrap ``collector``."""
        self.collector = collector

    def collect(self) -> Families:
        """The wrapped collector's families that have samples."""
        return [family for family in self.collector.collect() if family.samples]


def register_collectors(
    registry: CollectorRegistry, app: AppView, *, router_lag: bool, stale_after: float
) -> None:
    """Register the snapshot, session, source and persistence collectors for ``app``."""
    registry.register(NonEmpty(SnapshotCollector(app, stale_after)))
    registry.register(NonEmpty(SessionCollector(app, router_lag=router_lag)))
    registry.register(NonEmpty(SourceCollector(app)))
    registry.register(NonEmpty(PersistenceCollector(app)))
