"""Composition root: wires the upstream `Client`, the publish pipeline and the server.

`run_app` owns everything it creates: the server, the HTTP API and the client, which owns its
sources and, with ``--state``, its state file (`ClientConfig.state`: opened, checked and
recovered when the client is entered, before any network; see `upstream.state_keeping`). What
happens to a snapshot is `rtr_server.publishing.Publishing`'s (the publisher in a worker
thread, swapped into the server in one assignment): the client hands each snapshot it commits,
the recovered one first, to the app's publish hook (`App.publish`), then commits its state
with the serial and session ids it is served under (`upstream.delivery`). With
``--state-reader`` the app follows another process's SQLite state
(`rtr_server.follower.StateFollower`, on the public shared reader
`persistence.shared.SharedSnapshotClient`) instead of running sources.

`App.stop` makes the client close in order (`Client.close_report`: the sources stop, the final
view is served and committed within ``--flush-timeout``), then the listeners close;
`App.shutdown` and one log line say what was persisted. A failure of the client's close (its
final build) is the close result ``persistence_failed`` and goes to the host. Cancelling `run`
stops at once.
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskStatus

from persistence.backend import ThreadedBackend
from persistence.location import StateLocation
from persistence.persister import Persister
from rtr_server import app_view
from rtr_server.app_config import AppConfig, make_clock
from rtr_server.continuity import fresh_session_ids
from rtr_server.follower import StateFollower
from rtr_server.http.view import GroupView, SourceView
from rtr_server.publish_log import PublishLog
from rtr_server.publishing import Publishing
from rtr_server.server import RtrServer
from snapshot.publisher import PublishedState, Publisher
from snapshot.snapshot import Snapshot
from upstream.client import Client
from upstream.clock import Clock
from upstream.closing import Publication, ShutdownReport, StopRequest
from upstream.recovery import RecoveryPlan
from upstream.slurm_files import SlurmFiles
from upstream.source import Source
from upstream.state_keeping import StateKeeping

if TYPE_CHECKING:
    from rtr_server.http.api import HttpApi

log = logging.getLogger(__name__)


class App:
    """The running pieces, handed to whoever started `run_app` (tests, the CLI)."""

    def __init__(self, config: AppConfig, clock: Clock) -> None:
        """Create (but do not start) the server, publisher and client."""
        self.config = config
        self.clock = clock
        self.server = RtrServer(config.server)
        continued = config.server.continued
        publisher = Publisher(
            fresh_session_ids(() if continued is None else continued.session_ids.values),
            max_entries=config.history,
            max_bytes=config.history_bytes,
            continuation=continued,
        )
        #: Snapshots to what routers are served (publisher, server, publish log).
        self.publishing = Publishing(self.server, publisher, clock)
        #: The upstream client (it owns the ``--state`` file); None for a follower
        #: (``--state-reader``), which runs no sources.
        self.client: Client | None = (
            None
            if config.state_reader
            else Client(config.client_config(), publish=self.publish, _clock=clock)
        )
        self.follower: StateFollower | None = None
        self._reader_close_error: str | None = None
        #: The HTTP API, with this app's own Prometheus registry (never the global one). Without
        #: ``--http`` neither it nor prometheus_client is imported (less to load and hold).
        self.http: HttpApi | None = None
        if config.http is not None:
            from prometheus_client.registry import CollectorRegistry

            from rtr_server.http.api import HttpApi

            self.http = HttpApi(self, config.http, CollectorRegistry())
        #: How the last orderly stop ended (None until `stop` made `run` close in order).
        self.shutdown: ShutdownReport | None = None
        self._stop = StopRequest()

    def _client(self) -> Client:
        if self.client is None:
            raise RuntimeError("a state follower runs no upstream client")
        return self.client

    # ------------------------------------------------------------------ what HTTP reads
    def source_views(self) -> tuple[SourceView, ...]:
        """Every configured source with its status (see `rtr_server.http.view.AppView`)."""
        return app_view.source_views(self.client)

    def group_views(self) -> tuple[GroupView, ...]:
        """Every group in priority order."""
        return app_view.group_views(self.client)

    def active_groups(self) -> dict[str, str | None]:
        """The active group per payload kind."""
        return app_view.active_groups(self.client)

    def usable_until(self) -> float | None:
        """Until when the client's current snapshot is exact."""
        current = None if self.client is None else self.client.get_snapshot()
        return None if current is None else current.usable_until

    @property
    def sources(self) -> tuple[Source, ...]:
        """The client's sources (for their status)."""
        return () if self.client is None else self.client.sources

    @property
    def state(self) -> PublishedState | None:
        """What routers are served now."""
        return self.server.state

    # ------------------------------------------------------------------ the parts, by name
    @property
    def publisher(self) -> Publisher:
        """The publisher (serials, deltas, the diff log)."""
        return self.publishing.publisher

    @property
    def published(self) -> int:
        """Publishes so far."""
        return self.publishing.published

    @property
    def publishes(self) -> PublishLog:
        """The most recent publishes (for /status and the dashboard)."""
        return self.publishing.publishes

    @property
    def _keeping(self) -> StateKeeping | None:
        """The client's state keeping; None when memory-only, following or not yet built."""
        return None if self.client is None else self.client.keeping

    @property
    def backend(self) -> ThreadedBackend | None:
        """The client's state file backend; None when memory-only or following."""
        keeping = self._keeping
        return None if keeping is None else keeping.backend

    @property
    def persister(self) -> Persister | None:
        """The client's persistence worker; None when memory-only or following."""
        keeping = self._keeping
        return None if keeping is None else keeping.persister

    @property
    def recovery(self) -> RecoveryPlan | None:
        """What the last start-up recovered (None without ``--state``)."""
        keeping = self._keeping
        return None if keeping is None else keeping.recovery

    @property
    def persistence_close_error(self) -> str | None:
        """Why closing the store failed (also in /status); None: it closed, or not yet."""
        keeping = self._keeping
        return self._reader_close_error if keeping is None else keeping.close_error

    def stop(self) -> None:
        """Ask for an orderly stop (see the module docstring); `run` then returns."""
        self._stop.request()

    def abort_stop(self, reason: str) -> None:
        """Stop waiting for the final commit (e.g. a second SIGTERM); the close goes on."""
        self._stop.abort(reason)
        if self.client is not None:
            self.client.abort_close(reason)

    async def publish(self, snapshot: Snapshot) -> Publication | None:
        """The client's publish hook: serve ``snapshot``; say what it is served as."""
        await self.publishing.publish(snapshot)
        current = self.publishing.current
        if current is None:
            return None
        return Publication(
            current.serial.value, current.session_ids.values, current.snapshot.vrp_count
        )

    async def run(self, *, task_status: TaskStatus[App] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until `stop` (an orderly close, then return) or until cancelled (at once)."""
        if self.config.state_reader is not None:
            await self._run_reader(self.config.state_reader, task_status)
            return
        client = self._client()
        async with AsyncExitStack() as stack:
            # Entering opens, checks and recovers the state file (a refusal ends the start
            # here, before any network) and prepares the sources.
            await stack.enter_async_context(client)
            keeping = client.keeping
            header = None if keeping is None else keeping.recovered_header
            if header is not None:
                self.publishing.avoid_session_ids(header.session_ids)
            listeners = await stack.enter_async_context(anyio.create_task_group())
            try:
                async with anyio.create_task_group() as work:
                    await work.start(client.run)  # the recovered state is served first
                    await listeners.start(self.server.serve)
                    if self.http is not None:
                        await listeners.start(self.http.serve)
                    task_status.started(self)
                    await self._stop.wait()
                    report = await client.close_report()
                    work.cancel_scope.cancel()
            except Exception:  # the client's close failed: say so; the host gets the error
                failed = client.delivery.report
                if failed is not None and client.delivery.failure is not None:
                    self._report(failed)
                raise
            self._report(report)
            listeners.cancel_scope.cancel()  # routers are told goodbye and the listeners close

    def _report(self, report: ShutdownReport) -> None:
        """Log how the stop ended."""
        self.shutdown = report
        report.log(log)

    async def _run_reader(self, location: StateLocation, task_status: TaskStatus[App]) -> None:
        # With --slurm files the reader applies its own policy; without, the owner's policy
        # stored with each state (what the owning rtr-serve serves).
        slurm = SlurmFiles(self.config.slurm, poll_interval=self.config.poll_interval)
        follower = StateFollower(
            location.path,
            self.clock,
            self.publishing.publish,
            poll=self.config.reader_poll,
            policy=(lambda: slurm.policy) if self.config.slurm else None,
        )
        slurm.on_change = follower.policy_changed
        self.follower = follower
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(slurm.run, name="SLURM files")
                await tg.start(self.server.serve)
                task_status.started(self)
                tg.start_soon(self._cancel_at_stop, tg.cancel_scope, name="stop")
                await follower.run()
            # A follower persists nothing.
            self.shutdown = ShutdownReport(persisted=None, message="")
        finally:
            self._reader_close_error = follower.close_error

    async def _cancel_at_stop(self, scope: anyio.CancelScope) -> None:
        await self._stop.wait()
        scope.cancel()


async def run_app(
    config: AppConfig,
    *,
    clock: Clock | None = None,
    task_status: TaskStatus[App] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Build the app from ``config`` and serve until cancelled; reports the `App` when bound."""
    app = App(config, clock or make_clock(config.reference_time))
    await app.run(task_status=task_status)
