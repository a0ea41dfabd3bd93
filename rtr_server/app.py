"""Composition root: wires the upstream `Client`, the publish pipeline, the state file, the server.

`run_app` owns everything it creates: the server, the client (which owns the sources) and,
with ``--state``, the persistence backend and its worker. The parts hold the logic: what
happens to a snapshot is `rtr_server.publishing.Publishing`'s (the publisher in a worker
thread, swapped into the server in one assignment); following the client, handing each
snapshot to the state file and closing that flow in order are `rtr_server.following.Following`'s;
the state file itself (open, recover, offer, close) is `rtr_server.state_keeping.StateKeeping`'s.
The app creates them, starts them in order (recovery before any network) and stops them. With
``--state-reader`` the app follows another process's SQLite state
(`rtr_server.follower.StateFollower`) instead of running sources.

`App.stop` closes in order (`Following.close_in_order`), then the store and the listeners
close; `App.shutdown` and one log line say what was persisted. A failure of the client's close
(its final build) is the close result ``persistence_failed`` (`ClientRun`) and goes to the
host. Cancelling `run` stops at once.
"""

from __future__ import annotations

import logging
import secrets
from contextlib import AsyncExitStack
from dataclasses import replace

import anyio
from anyio.abc import TaskStatus
from prometheus_client.registry import CollectorRegistry

from persistence.backend import ThreadedBackend
from persistence.location import StateLocation
from persistence.persister import Persister
from rtr_server import app_view
from rtr_server.app_config import AppConfig, make_clock
from rtr_server.follower import StateFollower
from rtr_server.following import Following
from rtr_server.http.api import HttpApi
from rtr_server.http.view import GroupView, SourceView
from rtr_server.publish_log import PublishLog
from rtr_server.publishing import Publishing
from rtr_server.recovery import RecoveryPlan
from rtr_server.server import RtrServer
from rtr_server.shutdown import (
    ClientRun,
    ShutdownReport,
    StopRequest,
    close_failed,
)
from rtr_server.state_keeping import StateKeeping
from snapshot.publisher import PublishedState, Publisher, SessionIds
from upstream.client import (
    Client,
)
from upstream.clock import Clock
from upstream.slurm_files import SlurmFiles
from upstream.source import Source

log = logging.getLogger(__name__)


class App:
    """The running pieces, handed to whoever started `run_app` (tests, the CLI)."""

    def __init__(self, config: AppConfig, clock: Clock) -> None:
        """Create (but do not start) the server, publisher and client."""
        self.config = config
        self.clock = clock
        self.server = RtrServer(config.server)
        publisher = Publisher(
            SessionIds.from_random(secrets.token_bytes(2)),
            max_entries=config.history,
            max_bytes=config.history_bytes,
        )
        #: Snapshots to what routers are served (publisher, server, publish log).
        self.publishing = Publishing(self.server, publisher, clock)
        #: The state file (``--state``, ``--state-reader``): open, recover, commit, close.
        self.keeping = StateKeeping(clock.wall)
        #: The upstream client; None for a follower (``--state-reader``), which runs no sources.
        self.client: Client | None = (
            None if config.state_reader else Client(config.client_config(), _clock=clock)
        )
        self.follower: StateFollower | None = None
        #: Prometheus collectors of this app (served on /metrics); never the global registry.
        self.registry = CollectorRegistry()
        self.http = None if config.http is None else HttpApi(self, config.http, self.registry)
        #: How the last orderly stop ended (None until `stop` made `run` close in order).
        self.shutdown: ShutdownReport | None = None
        self._stop = StopRequest()
        self._client_run = ClientRun(self._stop)

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
    def backend(self) -> ThreadedBackend | None:
        """The persistence backend (owned: opened and closed by `run`); None when memory-only."""
        return self.keeping.backend

    @property
    def persister(self) -> Persister | None:
        """The persistence worker; None when memory-only or following."""
        return self.keeping.persister

    @property
    def recovery(self) -> RecoveryPlan | None:
        """What the last start-up recovered (None without ``--state``)."""
        return self.keeping.recovery

    @property
    def persistence_close_error(self) -> str | None:
        """Why closing the store failed (also in /status); None: it closed, or not yet."""
        return self.keeping.close_error

    def stop(self) -> None:
        """Ask for an orderly stop (see the module docstring); `run` then returns."""
        self._stop.request()

    def abort_stop(self, reason: str) -> None:
        """Stop waiting for the final commit (e.g. a second SIGTERM); the close goes on."""
        self._stop.abort(reason)

    async def run(self, *, task_status: TaskStatus[App] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until `stop` (an orderly close, then return) or until cancelled (at once)."""
        if self.config.state_reader is not None:
            await self._run_reader(self.config.state_reader, task_status)
            return
        async with AsyncExitStack() as stack:
            if self.config.state is not None:
                stack.push_async_callback(self.keeping.close)
                await self.keeping.recover(
                    self.config.state,
                    self._client(),
                    self.publishing.publish,
                    self.publishing.avoid_session_ids,
                    self.clock.monotonic,
                )
            client = await stack.enter_async_context(self._client())
            listeners = await stack.enter_async_context(anyio.create_task_group())
            await listeners.start(self.server.serve)
            if self.http is not None:
                await listeners.start(self.http.serve)
            following = Following(
                client,
                self.publishing,
                self.keeping,
                stop=self._stop,
                client_run=self._client_run,
                flush_timeout=self.config.flush_timeout,
            )
            try:
                async with anyio.create_task_group() as work:
                    if self.persister is not None:
                        await work.start(self.persister.run)
                    await work.start(self._client_run.run, client.run, self.persister)
                    work.start_soon(following.run, name="client snapshots")
                    task_status.started(self)
                    await self._stop.wait()
                    report = await following.close_in_order()
                    work.cancel_scope.cancel()  # a commit in its thread ends before the close
            except Exception:  # the client's close failed: say so; the host gets the error
                if self._client_run.failure is not None and self.persister is not None:
                    held = self.keeping.handover.held(self.persister.persisted)
                    await self._report(close_failed(self._client_run.failure, held))
                raise
            await self._report(report, wait=0.0)  # the flush deadline is over
            listeners.cancel_scope.cancel()  # routers are told goodbye and the listeners close

    async def _report(self, report: ShutdownReport, wait: float | None = None) -> None:
        """Close the store, then log how the stop ended.

        A call still running after ``wait`` s is interrupted and rolls back; the close returns
        once the worker thread ended.
        """
        await self.keeping.close(wait)  # idempotent: the exit stack closes it again
        self.shutdown = replace(report, close_error=self.persistence_close_error)
        self.shutdown.log(log)

    async def _run_reader(self, location: StateLocation, task_status: TaskStatus[App]) -> None:
        backend = self.keeping.open_reader(location)
        slurm = SlurmFiles(self.config.slurm, poll_interval=self.config.poll_interval)
        follower = StateFollower(
            backend,
            self.clock,
            self.publishing.publish,
            poll=self.config.reader_poll,
            policy=lambda: slurm.policy,
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
            await self.keeping.close()

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
