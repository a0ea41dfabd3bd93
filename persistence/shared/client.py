"""`SharedSnapshotClient`: the read-only follower of an owner's SQLite state, as a library.

Contract (persistence contract, shared reading): the constructor does no I/O; entering the
context opens the file read-only (``mode=ro``, no schema created, no writer lock) and recovers
one complete state (with ``wait_for_file``, it retries until the file can be opened and read);
``await task_group.start(reader.run)`` polls the header (short read transactions) and reloads on
a new state id, and re-judges the held state on its own timer: at the next usable-until time
and at least every ``recheck`` seconds, also during a read failure (the last view serves only
until its entries expire; the status reports it unavailable once the view held when the
failure began ran out). Time and trust are `persistence.shared.judging`'s: a state written too
far ahead of the wall clock is refused (an empty, unusable snapshot, one warning) until the
clock is within the tolerance or a newer state passes. The optional SLURM policy of the config
is applied to every view (`policy_changed` re-judges).

Builds: every judging runs in the reader's own bounded build slots (`BuildSlots`): a header
build (a new state, and its sources' digests) and a calibration (the held state judged again:
expiry, trust, policy), at most one of each in flight. Each takes a sequence number when it
starts and only a view newer than the current one replaces it: a calibration overtaken by a
new header (or a later view) is dropped (a dropped policy judging is due again); a header
build overtaken by a calibration that started later is judged again, at least that late, so it
never brings back what that calibration withdrew. Events always diff against the view
published last. One fixed owner thread serialises open, reads and close. `get_snapshot`,
`get_status` and `get_metrics` run no SQL. `aclose` ends the subscriptions, cancels polling,
waits for the reads and builds, closes the connection on the owner thread; beyond
`CLOSE_DEADLINE` it reports ``cleanup_overdue`` and stays ``closing`` (another `aclose`
retries).

What a snapshot holds: the writer's stored source payloads of the kinds each source was
selected for, judged at the reader's time, under a SLURM policy: the reader's own when its
config has one, otherwise the owner's, stored with the state (`PersistedState.policy_json`,
read once per state; a state that stores none is served as it is; one whose stored policy
cannot be read is not adopted: a read failure). Each ASPA family is judged on its own, with
the writer's per-family active groups (`persistence.shared.convert.judge_families`).
"""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from collections.abc import Set as AbstractSet
from typing import Self

import anyio
from anyio.abc import TaskStatus

from persistence.clock import Clock
from persistence.errors import CorruptStateError, PersistenceError
from persistence.shared import announce
from persistence.shared.build_slots import BuildPurpose, BuildSlots
from persistence.shared.convert import active_groups, uncovered
from persistence.shared.judging import ReaderTime, WallClock, prepare
from persistence.shared.samples import (
    COUNTERS,
    ReaderFacts,
    metrics_of,
    readiness_request,
    ready_for,
    status_of,
    timer_delay,
)
from persistence.shared.types import (
    CLOSE_DEADLINE,
    Afi,
    ReaderState,
    SharedMetrics,
    SharedReaderConfig,
    SharedSnapshot,
    SharedStatus,
    SharedWatch,
)
from persistence.sqlite_backend import SQLiteStore
from persistence.state import PersistedState, StateHeader, seconds_to_us
from persistence.worker_thread import WorkerThread
from snapshot.kinds import PayloadKind
from snapshot.slurm import SlurmError, SlurmPolicy
from snapshot.snapshot import EMPTY

__all__ = ["SharedSnapshotClient"]

log = logging.getLogger(__name__)

#: A state read, its sources' representations and the owner's stored SLURM policy (read only
#: for a reader without a policy of its own).
Held = tuple[StateHeader, PersistedState, dict[str, bytes], SlurmPolicy | None]
#: Why a view is due: the build's purpose and the event kind it publishes.
Due = tuple[BuildPurpose, str]


class SharedSnapshotClient:
    """Follows another process's SQLite state read-only and hands out immutable snapshots."""

    def __init__(self, config: SharedReaderConfig, *, _clock: Clock | None = None) -> None:
        """Remember ``config``; nothing is opened here.

        ``_clock`` (private, like `upstream.client.Client`'s: tests and rtr-serve's own parts)
        replaces the wall clock of ``config`` and the real monotonic clock, which carries the
        reader's effective time forward; there is no public clock API.
        """
        self.config = config
        #: The reader's own store id (its snapshots' `ReaderId`; new for each reader).
        self.reader_store_id = uuid.uuid4().hex
        self._store = SQLiteStore(config.path, read_only=True)
        self._worker = WorkerThread("sqlite-shared-reader")
        self._state = ReaderState.CREATED
        #: The reader's effective time, its sources' anchors, the clock tolerance.
        self.time = ReaderTime(_clock or WallClock(config.wall), config.clock_tolerance)
        #: The newest state read, and the state the current view was judged from.
        self._latest: Held | None = None
        self._held: Held | None = None
        self._current: SharedSnapshot | None = None
        self._error: str | None = None
        #: The usable-until time of the view held when the current read failure began.
        self._failed_until: float | None = None
        #: Judgings started / the sequence number of the current view.
        self._started = 0
        self._current_seq = 0
        self._policy_dirty = False
        #: Header builds one at a time (the poll's and a policy's of a state not yet judged).
        self._header_lock = anyio.Lock()
        self._watches: set[SharedWatch] = set()
        self._changed = anyio.Event()
        self._wake = anyio.Event()
        self._run_scope: anyio.CancelScope | None = None
        self._run_done: anyio.Event | None = None
        self._overdue = False
        self._closing: threading.Event | None = None
        #: Why closing the connection failed (kept for the next `aclose`).
        self.close_error: Exception | None = None
        self._builds = BuildSlots(config.limits.max_concurrent_builds)
        #: How long `aclose` waits for the polling task and for the owner thread (P-72).
        self._close_deadline = CLOSE_DEADLINE
        self._counts = dict.fromkeys(COUNTERS, 0)
        self._last_poll_at: float | None = None

    # ------------------------------------------------------------------ time
    def now(self) -> float:
        """The reader's effective time: the wall clock, never below any time it saw."""
        return self.time.now()

    def policy_changed(self) -> None:
        """Judge the held state again now (the config's SLURM policy changed)."""
        self._policy_dirty = True
        self._wake.set()

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> Self:
        """Open read-only and recover one complete state (raises `PersistenceError`).

        With ``wait_for_file`` a failure is logged (once per kind) and retried every
        ``poll_interval`` instead; the caller bounds the wait (cancelling it closes the reader).
        """
        if self._state is not ReaderState.CREATED:
            raise RuntimeError("a shared reader is entered once")
        try:
            stored = await self._open()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.aclose()
            raise
        if stored is not None:
            await self._adopt(stored)
        return self

    async def _open(self) -> tuple[StateHeader, PersistedState] | None:
        while True:
            try:
                if self._state is ReaderState.CREATED:
                    now = seconds_to_us(self.time.wall())
                    await self._worker.run(self._store.call, self._store.open_sync, now)
                    self._state = ReaderState.OPEN
                stored: tuple[StateHeader, PersistedState] | None = await self._worker.run(
                    self._store.call, self._store.read_state_sync
                )
            except PersistenceError as exc:
                if not self.config.wait_for_file:
                    raise
                self._failed(exc, "waiting for it")
                await anyio.sleep(self.config.poll_interval)
                continue
            self._looked()
            return stored

    async def __aexit__(self, *exc: object) -> None:
        """`aclose`; a close failure does not replace the body's own exception."""
        try:
            await self.aclose()
        except PersistenceError:
            if exc[0] is None:
                raise
            log.exception("shared reader: closing failed after another error")

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Poll the header and run the expiry timer until cancelled or closed."""
        if self._state is not ReaderState.OPEN:
            raise RuntimeError(f"run() needs an open reader (it is {self._state.value})")
        self._state = ReaderState.RUNNING
        self._run_done = anyio.Event()
        try:
            with anyio.CancelScope() as scope:
                self._run_scope = scope
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._expire, name="shared reader expiry")
                    task_status.started()
                    await self._poll()
        finally:
            self._run_done.set()
            if self._state is ReaderState.RUNNING:
                self._state = ReaderState.OPEN

    async def aclose(self) -> None:
        """End subscriptions, stop polling, close the connection on the owner thread.

        Waits at most `CLOSE_DEADLINE` for the polling task (and a build thread it waits for)
        and for the owner thread: beyond it the status reports ``cleanup_overdue`` and the
        reader stays ``closing`` (call again to wait on). A failed close raises it
        (`PersistenceError`) and keeps the owner thread and the connection for another
        `aclose`; the reader is ``closed`` only once the connection really is.
        """
        if self._state is ReaderState.CLOSED:
            return
        self._state = ReaderState.CLOSING
        for watch in list(self._watches):
            watch.close()
        self._signal()
        with anyio.CancelScope(shield=True):
            deadline = self._close_deadline
            if self._run_scope is not None and self._run_done is not None:
                self._run_scope.cancel()
                with anyio.move_on_after(deadline):
                    await self._run_done.wait()
                if not self._run_done.is_set():
                    self._overdue = True
                    log.error(
                        "shared reader: polling has not ended %g s later (a build still runs "
                        "in its thread, holding its slot); still closing",
                        deadline,
                    )
                    return
            if self._closing is None:
                self._closing = threading.Event()
                self.close_error = None
                self._worker.submit(functools.partial(self._close_sync, self._closing))
            if not await anyio.to_thread.run_sync(self._closing.wait, deadline):
                self._overdue = True
                log.error(
                    "shared reader: the connection is not closed %g s later (a read still "
                    "runs on the owner thread); still closing",
                    deadline,
                )
                return
            self._closing = None
            if self.close_error is not None:
                raise self.close_error
            self._overdue = not await self._worker.stop(deadline)
            if self._overdue:
                return
        self._state = ReaderState.CLOSED

    def _close_sync(self, done: threading.Event) -> None:
        """On the owner thread: close the connection; record a failure for `aclose`."""
        try:
            self._store.call(self._store.close_sync)
        except PersistenceError as exc:
            self.close_error = exc
        finally:
            done.set()

    # ------------------------------------------------------------------ faces
    def get_snapshot(self) -> SharedSnapshot | None:
        """The current immutable snapshot (None before any state was read); no SQL."""
        return self._current

    def get_status(self) -> SharedStatus:
        """An I/O-free sample: the writer followed, the last read failure, availability.

        ``ready`` means VRPs are usable; ``aspa_ready`` names each usable ASPA family.
        """
        facts = ReaderFacts(
            state=self._state,
            error=self._error,
            failed_until=self._failed_until,
            overdue=self._overdue,
            reads=self._counts["states_read"],
            read_errors=self._counts["read_errors"],
        )
        return status_of(self._current, facts, self.now())

    def get_metrics(self) -> SharedMetrics:
        """An I/O-free sample of the counters, the build slots and the held snapshot's size."""
        return metrics_of(
            self._current,
            state=self._state,
            counts=self._counts,
            builds=self._builds,
            last_poll_at=self._last_poll_at,
            watchers=len(self._watches),
        )

    async def wait_ready(
        self, required: AbstractSet[PayloadKind], aspa_afi: Afi | None = None
    ) -> SharedSnapshot:
        """Wait until every kind in ``required`` (VRP, ASPA; explicit, non-empty) is usable.

        ASPA needs both families ready, each judged on its own, unless ``aspa_afi`` picks one.

        Raises:
            ValueError: ``required`` is empty or names another kind, or ``aspa_afi`` is no `Afi`.
        """
        wanted, families = readiness_request(required, aspa_afi)
        while True:  # the caller bounds the wait (anyio.fail_after)
            if self._state in {ReaderState.CLOSING, ReaderState.CLOSED}:
                raise RuntimeError("the shared reader is closed")
            current, now = self._current, self.now()
            if current is not None and ready_for(current, wanted, families, now):
                return current
            changed = self._changed
            with anyio.move_on_after(self.config.recheck):
                await changed.wait()

    def watch(self) -> SharedWatch:
        """A subscription whose first event is an atomic ``initial`` (if a state was read)."""
        if self._state in {ReaderState.CLOSING, ReaderState.CLOSED}:
            raise RuntimeError("the shared reader is closed")
        watch = SharedWatch.create(self._watches.discard, self.config.queue_size)
        if self._current is not None:
            watch.offer(announce.initial_event(self._current))
        self._watches.add(watch)
        return watch

    # ------------------------------------------------------------------ polling and expiry
    async def _poll(self) -> None:
        while True:
            await anyio.sleep(self.config.poll_interval)
            self._counts["polls"] += 1
            try:
                header = await self._worker.run(self._store.call, self._store.read_header_sync)
                latest = self._latest
                if header is None or (latest is not None and header.state_id == latest[0].state_id):
                    self._looked()
                    continue
                stored = await self._worker.run(self._store.call, self._store.read_state_sync)
            except PersistenceError as exc:
                self._counts["poll_failures"] += 1
                self._failed(exc, "retrying at the next poll")
                continue
            self._looked()
            if stored is not None:
                await self._adopt(stored)

    def _failed(self, exc: PersistenceError, what: str) -> None:
        self._counts["read_errors"] += 1
        if self._error is None:
            current = self._current
            self._failed_until = None if current is None else current.usable_until
        if str(exc) != self._error:
            log.warning(
                "shared reader: %s (%s; the last view serves only until its entries expire)",
                exc,
                what,
            )
        self._error = str(exc)
        self._signal()

    def _looked(self) -> None:
        self._last_poll_at = self.now()
        if self._error is not None:
            log.info("shared reader: reading %s again", self._store.path)
            self._error = None
            self._signal()

    async def _expire(self) -> None:
        while True:
            with anyio.move_on_after(timer_delay(self._current, self.now(), self.config.recheck)):
                await self._wake.wait()
            self._wake = anyio.Event()
            due = self._due()
            if due is not None:
                await self._publish(*due)

    def _due(self) -> Due | None:
        """Why a view is out of date (None: it is not; new states are the poll's to judge)."""
        latest, held, current = self._latest, self._held, self._current
        if self._policy_dirty:
            if latest is not held and not self._header_lock.locked():
                # A state read but never judged (no valid policy then): its header build.
                return BuildPurpose.HEADER, "changed"
            # The held view now (dropped, and due again, if a header build publishes first).
            return None if held is None else (BuildPurpose.CALIBRATION, "policy")
        if held is None or current is None:
            return None
        refused = self.time.refused(held[0])
        if refused != current.refused:
            return BuildPurpose.CALIBRATION, "refused" if refused else "trusted"
        until = current.usable_until
        if not refused and until is not None and self.now() >= until:
            return BuildPurpose.CALIBRATION, "expired"
        return None

    # ------------------------------------------------------------------ building
    def _signal(self) -> None:
        """Wake the `wait_ready` callers (each change gets a fresh event)."""
        self._changed.set()
        self._changed = anyio.Event()

    async def _adopt(self, stored: tuple[StateHeader, PersistedState]) -> None:
        header, state = stored
        self._counts["states_read"] += 1
        announce.log_read(header, state)
        async with self._header_lock:
            job = functools.partial(prepare, state, owner=self.config.policy is None)
            try:
                digests, policy = await self._builds.run(BuildPurpose.HEADER, job)
            except SlurmError as exc:
                error = CorruptStateError(f"state {header.state_id} of {self._store.path}: {exc}")
                self._failed(error, "not adopted; retrying at the next poll")
                return
            self._latest = (header, state, digests, policy)
            await self._publish(BuildPurpose.HEADER, "changed", locked=True)

    async def _publish(self, purpose: BuildPurpose, why: str, *, locked: bool = False) -> None:
        """Judge a state in a build slot; publish it unless a newer view came first.

        A header build judges the newest state read, a calibration the held one (see the
        module docstring for the ordering).
        """
        if purpose is BuildPurpose.HEADER and not locked:
            async with self._header_lock:
                await self._publish(purpose, why, locked=True)
            return
        while True:
            target = self._latest if purpose is BuildPurpose.HEADER else self._held
            if target is None:
                return
            header, state, digests, policy = target
            if self.config.policy is not None:
                policy = self.config.policy()
                if policy is None:
                    return  # the reader's SLURM policy is not valid (yet): nothing new is built
            self._policy_dirty = False
            self._started += 1
            seq = self._started
            refused = self.time.refused(header)
            until: dict[PayloadKind, float | None]
            if refused:
                now = self.now()
                snapshot, until = EMPTY, dict.fromkeys(PayloadKind, now)
                families = uncovered(state)
            else:
                now, own = self.time.judging(header, state, digests)
                snapshot, until, families = await self._builds.build(
                    purpose, state, now, own=own, policy=policy
                )
            if self._state in {ReaderState.CLOSING, ReaderState.CLOSED}:
                return  # a build that ended while the reader closes publishes nothing
            if seq > self._current_seq and (purpose is BuildPurpose.HEADER or self._held is target):
                break
            if purpose is BuildPurpose.CALIBRATION:
                self._counts["stale"] += 1
                if why == "policy":
                    self._policy_dirty = True  # judged on a state no longer held: again
                self._wake.set()
                return
            # A calibration that started later published first: judge this state again, at
            # least as late, so no entry it withdrew comes back.
        self._current_seq = seq
        old = self._current
        version = (header.state_id.epoch, header.state_id.generation)
        if refused and old is not None and old.refused and old.version == version:
            return  # still refused: said once, nothing new to serve
        self._held = target
        self._counts["local_generation"] += 1
        new = SharedSnapshot(
            snapshot=snapshot,
            store_id=state.store_id,
            epoch=header.state_id.epoch,
            generation=header.state_id.generation,
            config_revision=header.config_revision,
            usable_until_by_kind=until,
            evaluated_at=now,
            clock=self.now,
            active_groups=active_groups(state),
            local_generation=self._counts["local_generation"],
            reader_store_id=self.reader_store_id,
            local_epoch=announce.local_epoch(old, state.store_id, header.state_id.epoch),
            refused=refused,
            aspa_covered=families.covered,
            aspa_usable_until_by_afi=families.until,
            aspa_active_groups=families.groups,
        )
        self._counts["header_builds" if purpose is BuildPurpose.HEADER else "calibrations"] += 1
        announce.log_trust(self.time, old, new, header)
        self._current = new
        self._signal()
        self._wake.set()  # the timer sleeps until the new view's first end
        kind = announce.event_kind(old, new, why)
        announce.notify(self._watches, old, new, kind, self.config.event_size_limit)
