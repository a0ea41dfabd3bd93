"""Composition root: wires the upstream `Client`, the publish pipeline, the state file, the server.

`run_app` owns everything it creates: the server, the client (which owns the sources) and,
with ``--state``, the persistence backend and its worker. The app only uses the client's public
API (`Client.watch`). What happens to a snapshot is `rtr_server.publishing.Publishing`'s
(publisher in a worker thread, swapped into the server in one assignment); what happens to the
state file is `rtr_server.state_keeping.StateKeeping`'s (open, recover, offer, close). With
persisted state the recovery runs before any network. With ``--state-reader`` the app follows
another process's SQLite state (`rtr_server.follower.StateFollower`) instead of running sources.

`App.stop` closes in order: commits are held, the client closes (no new snapshot; its tasks
end), the snapshot in hand is published and handed over, its commit waited for within
``flush_timeout`` (`App.abort_stop` cuts that short), then the store and the listeners close;
`App.shutdown` and one log line say what was persisted. A failure of the client's close (its
final build) is the close result ``persistence_failed`` (`ClientRun`) and goes to the host.
Cancelling `run` stops at once.
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
    final_not_built,
    persist_last,
)
from rtr_server.state_keeping import StateKeeping
from snapshot.publisher import PublishedState, Publisher, SessionIds
from snapshot.snapshot import Snapshot
from upstream.client import (
    Client,
    ClientSnapshot,
    ClientState,
    ResyncRequiredError,
    SnapshotEvent,
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
            None if config.state_reader else Client(config.client_config(), clock=clock)
        )
        self.follower: StateFollower | None = None
        #: Prometheus collectors of this app (served on /metrics); never the global registry.
        self.registry = CollectorRegistry()
        self.http = None if config.http is None else HttpApi(self, config.http, self.registry)
        #: How the last orderly stop ended (None until `stop` made `run` close in order).
        self.shutdown: ShutdownReport | None = None
        self._stop = StopRequest()
        self._client_run = ClientRun(self._stop)
        self._handover = self.keeping.handover

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

    async def _on_snapshot(self, snapshot: Snapshot) -> None:
        await self.publishing.publish(snapshot)

    async def _follow(self, scope: anyio.CancelScope, done: anyio.Event) -> None:
        """Publish every snapshot the client makes; resynchronise when a watch says so.

        After `stop` no new snapshot is taken; the one in hand is published and handed over
        (``scope`` is cancelled only while idle, or when the close runs out of time).
        """
        client = self._client()
        stop = self._stop
        try:
            with scope:
                while client.state is ClientState.RUNNING and not stop.requested():
                    with client.watch() as events:
                        try:
                            async for event in events:
                                if stop.requested():
                                    break
                                if isinstance(event, SnapshotEvent):
                                    await self._take(event.snapshot)
                                if stop.requested():
                                    break
                        except ResyncRequiredError as exc:
                            if not stop.requested():
                                log.info("resynchronising with the client: %s", exc)
        finally:
            done.set()

    async def _take(self, current: ClientSnapshot) -> None:
        """Publish ``current`` and hand it to the persister, noting what was handed over."""
        with self._handover.taking(current):
            await self._on_snapshot(current.snapshot)
            await self._offer_now(current)

    async def _offer_now(self, current: ClientSnapshot) -> None:
        """Offer ``current``'s state (also the final hand-over, when `_take` was cut short)."""
        if self.persister is not None and self.server.state is not None:
            await self.keeping.offer(current, self.server.state, self._client())

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
                    self._on_snapshot,
                    self.publishing.avoid_session_ids,
                    self.clock.monotonic,
                )
            client = await stack.enter_async_context(self._client())
            listeners = await stack.enter_async_context(anyio.create_task_group())
            await listeners.start(self.server.serve)
            if self.http is not None:
                await listeners.start(self.http.serve)
            follow_scope, followed = anyio.CancelScope(), anyio.Event()
            try:
                async with anyio.create_task_group() as work:
                    if self.persister is not None:
                        await work.start(self.persister.run)
                    await work.start(self._client_run.run, client.run, self.persister)
                    work.start_soon(self._follow, follow_scope, followed, name="client snapshots")
                    task_status.started(self)
                    await self._stop.wait()
                    report = await self._close_in_order(client, follow_scope, followed)
                    work.cancel_scope.cancel()  # a commit in its thread ends before the close
            except Exception:  # the client's close failed: say so; the host gets the error
                if self._client_run.failure is not None and self.persister is not None:
                    held = self._handover.held(self.persister.persisted)
                    await self._report(close_failed(self._client_run.failure, held))
                raise
            await self._report(report, wait=0.0)  # the flush deadline is over
            listeners.cancel_scope.cancel()  # routers are told goodbye and the listeners close

    async def _close_in_order(
        self, client: Client, follow_scope: anyio.CancelScope, followed: anyio.Event
    ) -> ShutdownReport:
        """Take no new snapshot, finish and hand over the one in hand, wait for its commit."""
        started = anyio.current_time()
        deadline = started + self.config.flush_timeout
        if self.persister is not None:
            self.persister.hold()  # no commit starts until the final state is known
        if not self._handover.busy:
            follow_scope.cancel()  # idle: waiting for the next snapshot
        with self._stop.bounded(deadline):
            await client.aclose()  # the sources stop; a decided withdrawal is built first
        with self._stop.bounded(deadline):
            await client.wait_final_view()  # every source task ended (a late revocation too)
        with self._stop.bounded(deadline):
            await followed.wait()
        if not followed.is_set():
            follow_scope.cancel()  # out of time: the snapshot in hand is dropped
            await followed.wait()  # (a publish or conversion thread cannot be abandoned)
        with self._stop.bounded(deadline):
            await self._client_run.wait_ended()  # every client task ended (or failed)
        final = client.get_snapshot()
        taken = self._handover.taken
        if final is not None and (taken is None or final.generation > taken.generation):
            # The client committed a decided withdrawal while it closed (no event is sent for
            # it): necessary cleanup, published and handed over within the same deadline.
            with self._stop.bounded(deadline, shield=True):
                await self._take(final)
        serial = None if self.server.state is None else self.server.state.serial.value
        if self.persister is None:
            return ShutdownReport(persisted=None, message="")  # memory only: nothing to persist
        if self._client_run.ended_cleanly:
            self.persister.release()  # else the older acknowledged state stays on disk
        report = await persist_last(
            self._handover,
            self.persister,
            self._stop,
            published_serial=serial,
            offer=self._offer_now,
            deadline=deadline,
            flush_timeout=self.config.flush_timeout,
            started=started,
        )
        if not client.final_view_committed:
            return final_not_built(self._handover, self.persister)
        return report

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
            self._on_snapshot,
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
