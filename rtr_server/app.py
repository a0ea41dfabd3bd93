"""Composition root: the upstream `Client`'s snapshots go through the publisher to the server.

`run_app` owns everything it creates: the server, the client (which owns the sources) and,
with ``--state``, the persistence backend and its worker. The app only uses the client's public
API (`Client.watch`). Publishing runs in a worker thread (the delta of a large table takes a
fraction of a second) and the new state is swapped into the server in one assignment.

With persisted state, start-up runs in this order: owner lock and schema check (backend open),
read with digest checks, time check, rebuild, publish, and only then the network. With
``--state-reader`` the app follows another process's SQLite state instead of running sources.

`App.stop` closes in order: commits are held, the client closes (no new snapshot; its tasks
end), the snapshot in hand is published and handed over, its commit waited for within
``flush_timeout`` (`App.abort_stop` cuts that short), then the store and the listeners close;
`App.shutdown` and one log line say what was persisted. A failure of the client's close (its
final build) is the close result ``persistence_failed`` (`ClientRun`) and goes to the host.
Cancelling `run` stops at once.
"""

from __future__ import annotations

import functools
import logging
import secrets
from contextlib import AsyncExitStack
from dataclasses import replace
from datetime import UTC, datetime

import anyio
from anyio.abc import TaskStatus
from prometheus_client.registry import CollectorRegistry

from persistence.backend import ThreadedBackend
from persistence.errors import DamagedStateError
from persistence.location import StateLocation
from persistence.persister import Persister
from persistence.state import StateId
from rtr_server import __version__, app_view
from rtr_server.app_config import AppConfig, make_clock
from rtr_server.follower import StateFollower
from rtr_server.http.api import HttpApi
from rtr_server.http.view import GroupView, SourceView
from rtr_server.publish_log import PublishLog, log_publish
from rtr_server.recovery import RecoveryPlan, SourceIdentity, build_state, plan_recovery
from rtr_server.server import RtrServer
from rtr_server.shutdown import (
    ClientRun,
    Handover,
    ShutdownReport,
    StopRequest,
    close_failed,
    close_store,
    final_not_built,
    persist_last,
)
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
        self.publisher = Publisher(
            SessionIds.from_random(secrets.token_bytes(2)),
            max_entries=config.history,
            max_bytes=config.history_bytes,
        )
        #: The upstream client; None for a follower (``--state-reader``), which runs no sources.
        self.client: Client | None = (
            None if config.state_reader else Client(config.client_config(), clock=clock)
        )
        self.published = 0
        #: The persistence backend (owned: opened and closed by `run`); None when memory-only.
        self.backend: ThreadedBackend | None = None
        self.persister: Persister | None = None
        #: What the last start-up recovered (None without ``--state``).
        self.recovery: RecoveryPlan | None = None
        self.follower: StateFollower | None = None
        self._epoch = 0
        self._generation = 0
        #: The most recent publishes (for /status and the dashboard).
        self.publishes = PublishLog()
        #: Prometheus collectors of this app (served on /metrics); never the global registry.
        self.registry = CollectorRegistry()
        self.http = None if config.http is None else HttpApi(self, config.http, self.registry)
        #: How the last orderly stop ended (None until `stop` made `run` close in order).
        self.shutdown: ShutdownReport | None = None
        self._stop = StopRequest()
        self._client_run = ClientRun(self._stop)
        #: Why closing the store failed (also in /status); None: it closed, or not yet.
        self.persistence_close_error: str | None = None
        #: What `_follow` took from the client last and what it handed to the persister.
        self._handover: Handover[ClientSnapshot] = Handover()

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

    async def _on_client_snapshot(self, current: ClientSnapshot) -> None:
        await self._on_snapshot(current.snapshot)
        if self.persister is not None and self.server.state is not None:
            await self._persist(current)

    async def _persist(self, current: ClientSnapshot) -> None:
        assert self.persister is not None
        assert self.backend is not None
        published = self.server.state
        assert published is not None
        self._generation += 1
        ids = published.session_ids
        keeper = self._client().keeper
        # The values are taken now; only the conversion of the payloads runs in the thread.
        state = await anyio.to_thread.run_sync(
            functools.partial(
                build_state,
                store_id=self.backend.store_id or "",
                state_id=StateId(self._epoch, self._generation),
                config_revision=current.config_revision,
                serial=published.serial.value,
                session_ids=(ids.v0, ids.v1, ids.v2),
                published_wall=keeper.now(),
                package_version=__version__,
                inputs=current.inputs,
                observed_wall=max(keeper.now(), current.evaluated_at),
                evaluated_wall=current.evaluated_at,
            )
        )
        self.persister.offer(state)

    async def _on_snapshot(self, snapshot: Snapshot) -> None:
        started = self.clock.monotonic()
        state = await anyio.to_thread.run_sync(self.publisher.publish, snapshot)
        if state is None:
            log.debug("rebuilt snapshot is unchanged; serial stays")
            return
        self.server.publish(state)
        self.published += 1
        self.publishes.record(
            state, wall=self.clock.wall(), duration=self.clock.monotonic() - started
        )
        log_publish(state, self.clock.monotonic() - started)

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
            await self._on_client_snapshot(current)
        if self.persister is not None and self.server.state is not None:
            self._note_offer(current)

    def _note_offer(self, current: ClientSnapshot) -> None:
        """Note the state `_persist` just offered (its id is the app's latest generation)."""
        assert self.persister is not None
        assert self.server.state is not None
        state_id = StateId(self._epoch, self._generation)
        self._handover.note(current, state_id, self.server.state, self.persister.persisted)

    async def _offer_now(self, current: ClientSnapshot) -> None:
        await self._persist(current)  # the final hand-over, when `_take` was cut short
        self._note_offer(current)

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
                await self._recover(self.config.state, stack)
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

    async def _recover(self, location: StateLocation, stack: AsyncExitStack) -> None:
        """Open the store (lock, schema), read and check it, seed the client, publish."""
        backend = location.make_backend(wall=self.clock.wall)
        self.backend = backend
        stack.push_async_callback(self._close_backend, backend)
        # A refusal ends the start here, the file untouched: another owner, a missing extra, or
        # a file that cannot be written safely (not a database, a failed integrity check, a
        # foreign or newer schema, other columns or objects, a damaged header).
        await backend.open()
        started = self.clock.monotonic()
        damaged = None
        try:
            stored = await backend.read_state()  # any other read failure ends the start too
        except DamagedStateError as exc:
            # Rows that fail a check in a sound file: not served; the first commit replaces them.
            stored, damaged = None, await backend.read_header()
            log.error(
                "state %s holds a damaged state (%s): it is not used; starting from the network, "
                "and the first commit replaces it",
                location,
                exc,
            )
        persisted: StateId | None = None
        if stored is None:
            if damaged is None:
                log.info("state %s is empty: starting from the network", location)
            persisted = None if damaged is None else damaged.state_id
            self._epoch = 1 if damaged is None else damaged.state_id.epoch + 1
        else:
            header, state = stored
            persisted = header.state_id
            self._epoch = header.state_id.epoch + 1
            client = self._client()
            tolerance = client.config.clock_tolerance
            configured = [
                SourceIdentity(s.name, s.status.kind, s.status.location) for s in client.sources
            ]
            await client.slurm.check()  # the policy every published snapshot gets
            policy = client.slurm.policy
            plan = await anyio.to_thread.run_sync(
                lambda: plan_recovery(
                    header,
                    state,
                    configured,
                    wall=self.clock.wall(),
                    clock_tolerance=tolerance,
                    policy=policy,
                )
            )
            self.recovery = plan
            if plan.trusted:
                # A time the state shows was reached: the effective time never goes below it.
                client.keeper.observe(header.written_at / 1e6)
            for note in plan.notes:
                log.info("recovery from %s: %s", location, note)
            for name, recovered in plan.recovered.items():
                client.seed(name, recovered)
            if plan.snapshot is not None:
                self._avoid_session_ids(header.session_ids)
                await self._on_snapshot(plan.snapshot)
                log.info(
                    "recovered state %s (serial %d, written %s) in %.2f s: serving %d VRPs "
                    "under a new session",
                    header.state_id,
                    header.serial,
                    datetime.fromtimestamp(header.written_at / 1e6, UTC).isoformat(),
                    self.clock.monotonic() - started,
                    plan.snapshot.vrp_count,
                )
        self.persister = Persister(
            backend, path=str(location.path), persisted=persisted, wall=self.clock.wall
        )

    def _avoid_session_ids(self, previous: tuple[int, int, int]) -> None:
        """Routers must see a new session after recovery: redraw on a (rare) collision."""
        ids = self.publisher.session_ids
        while {ids.v0, ids.v1, ids.v2} & set(previous):
            ids = SessionIds.from_random(secrets.token_bytes(2))
        self.publisher.session_ids = ids

    async def _report(self, report: ShutdownReport, wait: float | None = None) -> None:
        """Close the store, then log how the stop ended.

        A call still running after ``wait`` s is interrupted and rolls back; the close returns
        once the worker thread ended.
        """
        if self.backend is not None:
            await self._close_backend(self.backend, wait)
        self.shutdown = replace(report, close_error=self.persistence_close_error)
        self.shutdown.log(log)

    async def _close_backend(self, backend: ThreadedBackend, wait: float | None = None) -> None:
        # Idempotent: the orderly stop closes it before the listeners, the exit stack again.
        known = self.persistence_close_error
        self.persistence_close_error = await close_store(backend, known, wait)

    async def _run_reader(self, location: StateLocation, task_status: TaskStatus[App]) -> None:
        backend = location.make_backend(read_only=True, wall=self.clock.wall)
        self.backend = backend
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
            await self._close_backend(backend)

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
