"""`Client`: the embeddable async face of the upstream half (sources, groups, expiry, snapshots).

Lifecycle: created → open → running → closing → closed::

    async with Client(config) as client:
        async with anyio.create_task_group() as tg:
            await tg.start(client.run)
            snapshot = await client.wait_ready()
            with client.watch() as events:
                async for event in events: ...

Entering binds the client to the current event loop and thread (any other refuses it),
prepares the sources (a CA file is read in a worker thread; one that can never work raises
`SourceSetupError` before any network activity) and, with `ClientConfig.state`, opens its
state file (owner lock, schema check) and recovers it (`upstream.state_keeping`): a refusal
raises with the file untouched and the client CREATED. Every snapshot the client commits then
goes to the host's ``publish`` hook and to the state file (`upstream.delivery`), fed by the same
commit record as the watches; `flush` waits for a commit and returns its receipt, and the close
(`aclose`, `close_report`; `upstream.client_closing`) makes the bounded final commit. `run` may
be started once, in a task group the caller owns; there is no ``anyio.run`` inside.
`aclose` is idempotent: it stops the sources, lets the aggregator publish a withdrawal that was
already decided (no events are sent for it; `get_snapshot` has it), and waits at most
``cleanup_timeout``; if work is still busy (e.g. a parse in a worker thread) it says so in
``cleanup_overdue`` and the state stays CLOSING instead of pretending to be closed. `watch`
gives an atomic initial snapshot and then a bounded queue of `SnapshotEvent`/`StatusEvent`; on
overflow the watch raises a sticky `ResyncRequiredError`, at close it ends normally, and
``watch(after=event_id)`` resumes from the bounded `event_log`. `apply_config` changes groups and
sources in place with a higher revision: unchanged sources keep running with their data, the
group selection keeps its started groups, windows and fail-back clocks, removed sources are
cancelled and their late results are never accepted; the next snapshot carries the revision.

Every snapshot is judged in the effective time of one shared `TimeKeeper` (never moving back);
`ClientSnapshot.view` gives a `SnapshotView` whose queries refuse a kind past its usable-until
time, and `ClientSnapshot.check` does the same against the client's own clock.
"""

from __future__ import annotations

import copy
import logging
import secrets
from collections.abc import Iterable, Mapping
from typing import Self

import anyio
from anyio.abc import TaskGroup, TaskStatus

from snapshot.kinds import PayloadKind
from snapshot.queries import SnapshotExpiredError
from upstream.aggregate import Aggregator, Build, Recovered
from upstream.client_closing import ClientClosing
from upstream.client_events import EventHub
from upstream.client_setup import (
    RecoveryTarget,
    check_home,
    cleanup_pending,
    groups_of,
    loop_identity,
    make_sources,
    prepare_sources,
)
from upstream.clock import Clock, FixedWallClock, SystemClock
from upstream.config import ClientConfig, SourceConfig
from upstream.delivery import Delivery, PublishHook, configured_state
from upstream.event_diff import (
    EVERYTHING,
    OFF_LOOP_RECORDS,
    Changes,
    diff_snapshots,
)
from upstream.events import (
    ClientSnapshot,
    ClientState,
    ClientStatus,
    Event,
    EventId,
    ResyncRequiredError,
    SnapshotEvent,
    StatusEvent,
    Watch,
    WatchClosed,
)
from upstream.http_budget import DEFAULT_SHARED_BYTES, ByteBudget
from upstream.slurm_files import SlurmFiles
from upstream.source import Source
from upstream.state_keeping import StateKeeping
from upstream.timekeeper import TimeKeeper

__all__ = [
    "Client",
    "ClientSnapshot",
    "ClientState",
    "ClientStatus",
    "Event",
    "ResyncRequiredError",
    "SnapshotEvent",
    "SnapshotExpiredError",
    "StatusEvent",
    "Watch",
    "WatchClosed",
]

log = logging.getLogger(__name__)

CLOSED_WHILE_OPENING = "the client was closed while it was being opened"


class Client(ClientClosing):
    """Runs sources in groups and keeps the current snapshot; see the module docstring."""

    def __init__(
        self,
        config: ClientConfig,
        *,
        publish: PublishHook | None = None,
        recovered: Mapping[str, Recovered] | None = None,
        _clock: Clock | None = None,
    ) -> None:
        """Configure only: no file or socket is touched before the client is entered.

        Entering reads the sources' trust stores and opens and recovers `ClientConfig.state`;
        nothing runs before `run`. ``publish``, the host's hook, is handed every snapshot the
        client commits (latest first, see `upstream.delivery`) before its state is committed;
        it returns what the snapshot is served as. ``recovered`` seeds sources with payloads
        restored elsewhere (by name; a name not configured is an error). Time: the system's
        UTC and monotonic clocks (UTC frozen at `ClientConfig.reference_time`); ``_clock``,
        internal, shares other samplers with tests and the server's own parts.
        """
        self.config = config
        #: The effective time every judgement of this client uses (never moves back).
        if _clock is None:
            ref = config.reference_time
            _clock = SystemClock() if ref is None else FixedWallClock(ref)
        self.keeper = TimeKeeper(_clock, tolerance=config.clock_tolerance)
        self.clock: Clock = self.keeper
        self.state = ClientState.CREATED
        #: Fresh for every client (the state file's next epoch once entered with one): event
        #: and snapshot ids of another client's life, e.g. before a restart, never match.
        self.epoch = secrets.randbits(31)
        self.generation = 0
        self.cleanup_overdue = False
        self._current: ClientSnapshot | None = None
        self._changed: anyio.Event | None = None
        self._done: anyio.Event | None = None
        self._scope: anyio.CancelScope | None = None
        self._tg: TaskGroup | None = None
        self._aggregator_done: anyio.Event | None = None
        #: The watches, the event log and the event ids (`EventHub`).
        self.events = EventHub(self.epoch, self._wake)
        #: The event loop and thread the client was entered in (`_check_home`).
        self._home: tuple[object, int] | None = None
        #: The preparation of `__aenter__` while it runs (a concurrent close cancels it).
        self._entering: anyio.CancelScope | None = None
        self._prepared: anyio.Event | None = None
        #: When `aclose` began (the keeper's monotonic clock); None before.
        self._close_started: float | None = None
        #: The SLURM files and the policy in force (kept across `apply_config`).
        self.slurm = SlurmFiles(
            config.slurm, poll_interval=config.poll_interval, on_change=self._slurm_changed
        )
        self._sources: dict[str, tuple[SourceConfig, Source]] = {}
        self._sources = make_sources(config, self._sources, self.keeper)
        #: The body bytes all HTTP sources buffer, shared (`upstream.http_budget`).
        self.byte_budget = ByteBudget(DEFAULT_SHARED_BYTES)
        self.byte_budget.share(s for _, s in self._sources.values())
        self._aggregator = Aggregator(
            [],
            self._on_build,
            keeper=self.keeper,
            groups=groups_of(config, self._sources),
            slurm_policy=lambda: self.slurm.policy,
        )
        self._aggregator.on_status = self._on_status
        self._aggregator.prepare_snapshots = config.prepare_queries
        #: The state file (`ClientConfig.state`): open, recover, commit, close; None: memory.
        self.keeping = StateKeeping.configured(
            config.state, config.backend, _clock.wall, config.limits
        )
        #: Committed snapshots to the host and the state file; the bounded final commit.
        self.delivery = Delivery(
            publish, self.keeping, self.keeper, flush_timeout=config.flush_timeout
        )
        self.delivery.configured = lambda: configured_state(
            self.config, self._sources, self.slurm.policy
        )
        self._persistence_ended: anyio.Event | None = None
        for name, payload in (recovered or {}).items():
            self.seed(name, payload)

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> Self:
        """Bind the client to this loop and thread, prepare its sources, open its state file.

        Trust stores are read in a worker thread; a source that can never work raises
        `SourceSetupError` (a `ValueError`), a state file that cannot be owned a
        `persistence.PersistenceError`; either leaves the client CREATED. Entering again, also
        while this runs, is refused; a concurrent `aclose` cancels the preparation, waits for
        it to end (a thread it runs is never abandoned) and this raises `RuntimeError`.
        """
        if self.state is not ClientState.CREATED or self._entering is not None:
            what = "being opened" if self._entering is not None else self.state.value
            raise RuntimeError(f"cannot open a client that is {what}")
        self._entering = entering = anyio.CancelScope()
        self._prepared = prepared = anyio.Event()
        self._home = loop_identity()
        try:
            with entering:
                await prepare_sources(source for _, source in self._sources.values())
                if self.keeping is not None:  # lock, schema, read, checks, seeds
                    target = RecoveryTarget(
                        self.config, self._sources, self.slurm, self.keeper, self.seed
                    )
                    await self.keeping.open(target, self.keeper.monotonic)
                    self.epoch = self.events.epoch = self.keeping.epoch
        except Exception as exc:
            if self._closed_meanwhile():  # e.g. the thread's own error once it returned
                raise RuntimeError(CLOSED_WHILE_OPENING) from exc
            self._home = None
            raise
        except BaseException:
            if not self._closed_meanwhile():
                self._home = None
            raise
        finally:
            self._entering = None
            if self._closed_meanwhile() and self.keeping is not None:
                await self.keeping.close()  # nothing stays open (shielded)
            prepared.set()
        if self._closed_meanwhile():
            raise RuntimeError(CLOSED_WHILE_OPENING)
        self.state = ClientState.OPEN
        self._changed = anyio.Event()
        return self

    def _closed_meanwhile(self) -> bool:
        """A concurrent `aclose` began while `__aenter__` prepared."""
        return self.state is ClientState.CLOSING

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the sources until `aclose` or cancellation; may be started once."""
        self._check_home()
        if self.state is not ClientState.OPEN:
            raise RuntimeError(
                f"run() needs an open client that never ran; it is {self.state.value}"
            )
        self.state = ClientState.RUNNING
        self._done = anyio.Event()
        self._persistence_ended = ended = anyio.Event()
        keeping = self.keeping
        persister = None if keeping is None else keeping.persister
        try:
            async with anyio.create_task_group() as persisting:  # outlives the sources
                if persister is not None:
                    await persisting.start(persister.run)
                try:
                    await self._run_sources(task_status)
                except Exception as exc:
                    if self.state is ClientState.CLOSING:
                        self.delivery.failed(exc)  # the final build failed: stop commits now
                    raise
                if persister is not None:
                    await ended.wait()  # the close's final commit (or the run cancelled)
                persisting.cancel_scope.cancel()
        finally:
            self._tg = None
            self._done.set()
            if self.state is ClientState.RUNNING or (
                self.state is ClientState.CLOSING and self.cleanup_overdue
            ):
                self._finish_close()

    async def _run_sources(self, task_status: TaskStatus[None]) -> None:
        assert self._done is not None
        recovered = (
            None
            if self.keeping is None or self.keeping.recovery is None
            else (self.keeping.recovery.snapshot)
        )
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                async with anyio.create_task_group() as tg:
                    self._tg = tg
                    if self.delivery.active:  # the recovered state is served first
                        await tg.start(self.delivery.run, self.get_snapshot, recovered)
                    tg.start_soon(self.slurm.run, name="SLURM files")
                    await self._start_aggregator()
                    task_status.started()
                    await anyio.sleep_forever()
        finally:
            self._done.set()

    def _check_home(self) -> None:
        """Refuse use from another event loop or thread than the one it was entered in."""
        check_home(self._home)

    @property
    def sources(self) -> tuple[Source, ...]:
        """The source objects of the configuration in force (for their ``status``)."""
        return tuple(source for _, source in self._sources.values())

    def get_snapshot(self) -> ClientSnapshot | None:
        """The current snapshot (None before the first one)."""
        return self._current

    def get_status(self) -> ClientStatus:
        """Where the client and each source stand now."""
        agg, keeping = self._aggregator, self.keeping
        persister = None if keeping is None else keeping.persister
        return ClientStatus(
            state=self.state,
            epoch=self.epoch,
            revision=self.config.revision,
            generation=self.generation,
            active=dict(agg.active),
            started_groups=tuple(sorted(agg.started_groups())),
            # Copies: a report keeps what it saw (the sources go on updating their own).
            sources=tuple(copy.copy(source.status) for _, source in self._sources.values()),
            cleanup_overdue=self.cleanup_overdue,
            availability={name: a.value for name, a in agg.availability().items()},
            ready=self._current is not None
            and all(self._current.active.get(k) is not None for k in self.config.required),
            cleanup_pending=self._cleanup_pending(),
            cleanup_elapsed=(
                None
                if self._close_started is None or self.state is not ClientState.CLOSING
                else self.keeper.monotonic() - self._close_started
            ),
            persistence=None if persister is None else persister.status,
            persistence_close_error=None if keeping is None else keeping.close_error,
            persisted_revision=None if keeping is None else keeping.persisted_revision,
        )

    def _cleanup_pending(self) -> tuple[str, ...]:
        """What a close in progress still waits for (see `ClientStatus.cleanup_pending`)."""
        if self.state is not ClientState.CLOSING:
            return ()
        return cleanup_pending(self._aggregator, self._done)

    async def wait_ready(self, required: Iterable[PayloadKind] | None = None) -> ClientSnapshot:
        """Wait until a snapshot exists whose ``required`` kinds each have an active group.

        ``required`` defaults to `ClientConfig.required`; given, it constrains this wait only.
        Bound it with a cancel scope (``anyio.fail_after``) as with any wait.
        """
        self._check_home()
        kinds = self.config.required if required is None else frozenset(required)
        if not kinds:
            raise ValueError("wait_ready: name at least one payload kind")
        while True:
            current = self._current
            if current is not None and all(current.active[k] is not None for k in kinds):
                return current
            if self.state in (ClientState.CLOSING, ClientState.CLOSED):
                raise RuntimeError("the client is closing")
            changed = self._changed
            if changed is None:
                raise RuntimeError("wait_ready() needs an open client")
            await changed.wait()

    def watch(self, max_queue: int = 64, *, after: EventId | None = None) -> Watch:
        """Subscribe: ``initial``, ``initial_status`` and every later event, at one point.

        The three are taken without an await (no publish falls in between).

        Each watch has its own queue of ``max_queue`` events; overflowing it makes the watch
        raise `ResyncRequiredError` from then on; a normal end (the client closed) ends the
        iteration (`receive` raises `WatchClosed`). With ``after`` (an event id seen earlier),
        the logged events since it are queued first; a window no longer kept, another epoch or
        more than ``max_queue`` of them make the watch resync-required at once.
        """
        self._check_home()
        if max_queue < 1:
            raise ValueError("max_queue must be at least 1")
        ended = self.state in (ClientState.CLOSING, ClientState.CLOSED)
        return self.events.subscribe(
            max_queue, after, self._current, self.get_status(), ended=ended
        )

    # ------------------------------------------------------------------ runtime changes
    async def apply_config(self, config: ClientConfig) -> int:
        """Switch to ``config`` (a higher revision); returns the revision now in force.

        Sources whose configuration is unchanged keep running and keep their data; removed
        ones are cancelled and nothing they deliver later is accepted; the group selection
        keeps its state (started groups, start-up windows, fail-back clocks). A configuration
        whose sources cannot be built or prepared (their trust stores are read in a worker
        thread) raises ValueError and changes nothing.
        """
        if config.revision <= self.config.revision:
            raise ValueError(
                f"revision {config.revision} is not above the current {self.config.revision}"
            )
        self._check_home()
        if self.state in (ClientState.CLOSING, ClientState.CLOSED):
            raise RuntimeError("the client is closing")
        if config.state != self.config.state or config.backend is not self.config.backend:
            raise ValueError("state: the state file cannot change while the client runs")
        # Build and prepare first: a source that cannot be made or prepared (e.g. an
        # unreadable CA file) raises here, before anything changed, so a refused
        # configuration leaves the client as it was.
        while True:
            base = self._sources
            sources = make_sources(config, self._sources, self.keeper)
            if self.state is not ClientState.CREATED:
                await prepare_sources(s for _, s in sources.values() if s not in self.sources)
            if config.revision <= self.config.revision:
                raise ValueError(f"revision {config.revision} is no longer above the current")
            if self.state in (ClientState.CLOSING, ClientState.CLOSED):
                raise RuntimeError("the client is closing")
            if self._sources is base:
                break  # else another revision was applied while this one prepared: redo
        if self.keeping is not None and config.limits != self.keeping.limits:
            await self.keeping.set_limits(config.limits)  # the next transaction's budget
        self._sources = sources
        self.byte_budget.share(s for _, s in sources.values())
        self.config = config
        self.keeper.tolerance = config.clock_tolerance
        self.slurm.poll_interval = config.poll_interval
        self.slurm.set_paths(config.slurm)
        self._aggregator.reconfigure(groups_of(config, self._sources))
        await self.delivery.reconfigured(config.revision, current=self.get_snapshot)
        log.info("configuration revision %d applied", config.revision)
        return config.revision

    # ------------------------------------------------------------------ internals

    def seed(self, name: str, recovered: Recovered) -> None:
        """Give source ``name`` a payload restored from persisted state; only before `run`."""
        if self.state not in (ClientState.CREATED, ClientState.OPEN):
            raise RuntimeError(f"cannot seed a client that is {self.state.value}")
        self._aggregator.seed(name, recovered)

    async def _start_aggregator(self) -> None:
        assert self._tg is not None
        aggregator = self._aggregator
        done = anyio.Event()

        async def run_it(*, task_status: TaskStatus[None]) -> None:
            try:
                await aggregator.run(task_status=task_status)
            finally:
                aggregator.final_round.set()  # nothing more is built
                done.set()
                if self.state is ClientState.CLOSING:
                    self._scope_cancel()  # a close that returned overdue ends the rest now

        self._aggregator_done = done
        await self._tg.start(run_it)

    async def _on_build(self, build: Build) -> None:
        before, config = self._current, self.config  # the revision it was built under
        changes: Changes = EVERYTHING
        try:
            if self.state is not ClientState.CLOSING:  # the event log keeps it too
                old = None if before is None else before.snapshot
                size = build.snapshot.vrp_count + (0 if old is None else old.vrp_count)
                args = (old, build.snapshot, self.events.size_limit)
                if size > OFF_LOOP_RECORDS:
                    changes = await anyio.to_thread.run_sync(diff_snapshots, *args)
                else:
                    changes = diff_snapshots(*args)
        finally:
            self._commit(build, before, changes, config)  # no await: publish and events at once

    def _commit(
        self, build: Build, before: ClientSnapshot | None, changes: Changes, config: ClientConfig
    ) -> None:
        """Publish ``build`` (made under ``config``) and send its event (no await)."""
        self.generation += 1
        current = ClientSnapshot(
            build.snapshot,
            self.epoch,
            self.generation,
            dict(build.active),
            dict(build.usable_until),
            build.inputs,
            config_revision=config.revision,
            evaluated_at=build.evaluated_at,
            keeper=self.keeper,
            policy_id=config.policy_id(build.slurm_id),
        )
        self._current = current
        self.delivery.committed()  # the same step: the host and the state file get it
        if self.state is ClientState.CLOSING:
            return  # the view is committed; no events once closing began
        self.events.snapshot(before, current, changes)

    def _slurm_changed(self) -> None:
        self._aggregator.poke()

    def _on_status(self) -> None:
        sending = self.state is not ClientState.CLOSING
        self.events.status(self.get_status(), self._current, send=sending)

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = anyio.Event()
