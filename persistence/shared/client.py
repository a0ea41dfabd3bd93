"""`SharedSnapshotClient`: the read-only follower of an owner's SQLite state, as a library.

Contract (persistence contract, shared reading): the constructor does no I/O; entering the
context opens the file read-only (``mode=ro``, no schema created, no writer lock) and recovers
one complete state (with ``wait_for_file``, it retries until the file can be opened and read);
``await task_group.start(reader.run)`` polls the header (short read transactions) and reloads on
a new state id, and re-judges the held state on its own expiry timer: at the next usable-until
time and at least every ``recheck`` seconds (a wall clock jumped forward is acted upon within
that), so neither a slow or blocked read nor a writer that is gone delays it. A read failure
keeps the last view only until its entries expire (they are dropped as they do; the status
reports it unavailable once the view held when the failure began ran out). Time and trust are
`persistence.shared.judging`'s: a state written too far ahead of the wall clock is refused (an
empty, unusable snapshot, one warning) until the clock is within the tolerance or a newer state
passes. The optional SLURM policy of the config is applied to every view. Re-judgings (new
state, timer, policy) may overlap: each takes a sequence number when it starts and only a view
newer than the current one replaces it, so watchers see views in order, newest last.
One fixed owner thread serialises open, reads and close. `get_snapshot` and
`get_status` run no SQL. `aclose` ends the subscriptions, cancels polling, waits for the
reads, closes the connection on the owner thread; beyond `CLOSE_DEADLINE` it reports
``cleanup_overdue`` and stays ``closing`` (another `aclose` retries).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Set as AbstractSet
from datetime import UTC, datetime
from typing import Self

import anyio
from anyio.abc import TaskStatus

from persistence.clock import Clock
from persistence.errors import PersistenceError
from persistence.shared.convert import count_diff, judge_state
from persistence.shared.judging import ReaderTime, WallClock, digests_of
from persistence.shared.types import (
    CLOSE_DEADLINE,
    ReaderState,
    SharedEvent,
    SharedReaderConfig,
    SharedSnapshot,
    SharedStatus,
    SharedWatch,
)
from persistence.sqlite_backend import SQLiteStore
from persistence.state import US_PER_SECOND, PersistedState, StateHeader, seconds_to_us
from persistence.worker_thread import WorkerThread
from snapshot.kinds import PayloadKind
from snapshot.queries import ResyncRequiredError
from snapshot.snapshot import EMPTY

__all__ = ["SharedSnapshotClient"]

log = logging.getLogger(__name__)
#: The kinds `wait_ready` may ask for.
READY_KINDS = frozenset({PayloadKind.VRP, PayloadKind.ASPA})


#: What the reader holds: the state read last and its sources' representations.
Held = tuple[StateHeader, PersistedState, dict[str, bytes]]


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


class SharedSnapshotClient:
    """Follows another process's SQLite state read-only and hands out immutable snapshots."""

    def __init__(self, config: SharedReaderConfig, *, _clock: Clock | None = None) -> None:
        """Remember ``config``; nothing is opened here.

        ``_clock`` (private, like `upstream.client.Client`'s: tests and rtr-serve's own parts)
        replaces the wall clock of ``config`` and the real monotonic clock, which carries the
        reader's effective time forward; there is no public clock API.
        """
        self.config = config
        self._store = SQLiteStore(config.path, read_only=True)
        self._worker = WorkerThread("sqlite-shared-reader")
        self._state = ReaderState.CREATED
        #: The reader's effective time, its sources' anchors, the clock tolerance.
        self.time = ReaderTime(_clock or WallClock(config.wall), config.clock_tolerance)
        self._held: Held | None = None
        self._current: SharedSnapshot | None = None
        self._error: str | None = None
        #: The usable-until time of the view held when the current read failure began.
        self._failed_until: float | None = None
        self._reads = 0
        self._read_errors = 0
        #: Re-judgings started / the sequence number of the current view.
        self._started = 0
        self._current_seq = 0
        self._policy_dirty = False
        self._watches: set[SharedWatch] = set()
        self._changed = anyio.Event()
        self._wake = anyio.Event()
        self._run_scope: anyio.CancelScope | None = None
        self._run_done: anyio.Event | None = None
        self._overdue = False
        self._closing: threading.Event | None = None
        #: Why closing the connection failed (kept for the next `aclose`).
        self.close_error: Exception | None = None

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
            self._recovered()
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

        Waits at most `CLOSE_DEADLINE` for the owner thread: beyond it the status reports
        ``cleanup_overdue`` and the reader stays ``closing`` (call again to wait on). A failed
        close raises it (`PersistenceError`) and keeps the owner thread and the connection for
        another `aclose`; the reader is ``closed`` only once the connection really is.
        """
        if self._state is ReaderState.CLOSED:
            return
        self._state = ReaderState.CLOSING
        for watch in list(self._watches):
            watch.close()
        self._signal()
        with anyio.CancelScope(shield=True):
            if self._run_scope is not None and self._run_done is not None:
                self._run_scope.cancel()
                with anyio.move_on_after(CLOSE_DEADLINE):
                    await self._run_done.wait()
            if self._closing is None:
                self._closing = threading.Event()
                self.close_error = None
                self._worker.submit(functools.partial(self._close_sync, self._closing))
            if not await anyio.to_thread.run_sync(self._closing.wait, CLOSE_DEADLINE):
                self._overdue = True
                log.error(
                    "shared reader: the connection is not closed %g s later (a read still "
                    "runs on the owner thread); still closing",
                    CLOSE_DEADLINE,
                )
                return
            self._closing = None
            if self.close_error is not None:
                raise self.close_error
            self._overdue = not await self._worker.stop(CLOSE_DEADLINE)
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
        """An I/O-free sample: the writer followed, the last read failure, availability."""
        current = self._current
        now = self.now()
        ready = frozenset(k for k in PayloadKind if current is not None and current.usable(k, now))
        until = self._failed_until
        available = (
            current is not None
            and not current.refused
            and (self._error is None or until is None or now < until)
        )
        return SharedStatus(
            state=self._state,
            store_id=None if current is None else current.store_id,
            epoch=None if current is None else current.epoch,
            generation=None if current is None else current.generation,
            config_revision=None if current is None else current.config_revision,
            persistence_error=self._error,
            available=available,
            ready_kinds=ready,
            cleanup_overdue=self._overdue,
            trusted=current is None or not current.refused,
            reads=self._reads,
            read_errors=self._read_errors,
        )

    async def wait_ready(self, required: AbstractSet[PayloadKind]) -> SharedSnapshot:
        """Wait until every kind in ``required`` (VRP, ASPA; explicit, non-empty) is usable.

        Raises:
            ValueError: ``required`` is empty or names another kind.
        """
        wanted = frozenset(required)
        if not wanted or not wanted <= READY_KINDS:
            raise ValueError("required must be a non-empty set of PayloadKind.VRP / ASPA")
        while True:  # the caller bounds the wait (anyio.fail_after)
            if self._state in {ReaderState.CLOSING, ReaderState.CLOSED}:
                raise RuntimeError("the shared reader is closed")
            current, now = self._current, self.now()
            if current is not None and all(current.usable(k, now) for k in wanted):
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
            watch.offer(SharedEvent("initial", self._current, None, self._current.version))
        self._watches.add(watch)
        return watch

    # ------------------------------------------------------------------ polling and expiry
    async def _poll(self) -> None:
        while True:
            await anyio.sleep(self.config.poll_interval)
            try:
                header = await self._worker.run(self._store.call, self._store.read_header_sync)
                held = self._held
                if header is None or (held is not None and header.state_id == held[0].state_id):
                    self._recovered()
                    continue
                stored = await self._worker.run(self._store.call, self._store.read_state_sync)
            except PersistenceError as exc:
                self._failed(exc, "retrying at the next poll")
                continue
            self._recovered()
            if stored is not None:
                await self._adopt(stored)

    def _failed(self, exc: PersistenceError, what: str) -> None:
        self._read_errors += 1
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

    def _recovered(self) -> None:
        if self._error is not None:
            log.info("shared reader: reading %s again", self._store.path)
            self._error = None
            self._signal()

    def _delay(self) -> float:
        current = self._current
        until = None if current is None or current.refused else current.usable_until
        if until is None:
            return self.config.recheck
        return min(self.config.recheck, max(0.0, until - self.now()))

    async def _expire(self) -> None:
        while True:
            with anyio.move_on_after(self._delay()):
                await self._wake.wait()
            self._wake = anyio.Event()
            why = self._due()
            if why is not None:
                await self._rejudge(why)

    def _due(self) -> str | None:
        """Why the current view is out of date (None: it is not; new states are the poll's)."""
        held, current = self._held, self._current
        if held is None:
            return None
        if self._policy_dirty:
            return "policy"
        if current is None or current.version != (
            held[0].state_id.epoch,
            held[0].state_id.generation,
        ):
            return None  # nothing judged yet (no valid policy) or the poll is judging a new state
        refused = self.time.refused(held[0])
        if refused != current.refused:
            return "refused" if refused else "trusted"
        until = current.usable_until
        if not refused and until is not None and self.now() >= until:
            return "expired"
        return None

    # ------------------------------------------------------------------ building
    def _signal(self) -> None:
        """Wake the `wait_ready` callers (each change gets a fresh event)."""
        self._changed.set()
        self._changed = anyio.Event()

    async def _adopt(self, stored: tuple[StateHeader, PersistedState]) -> None:
        header, state = stored
        digests = await anyio.to_thread.run_sync(digests_of, state)
        self._held = (header, state, digests)
        self._reads += 1
        log.info(
            "shared reader: read state %s (owner serial %d, %d VRPs, written %s)",
            header.state_id,
            state.serial,
            state.vrp_count(),
            _utc(header.written_at / US_PER_SECOND),
        )
        await self._rejudge("changed")

    async def _rejudge(self, why: str) -> None:
        """Judge the held state now; it becomes the current view unless a newer one did."""
        held = self._held
        assert held is not None
        header, state, digests = held
        policy = None if self.config.policy is None else self.config.policy()
        if self.config.policy is not None and policy is None:
            return  # the reader's SLURM policy is not valid (yet): nothing new is built
        self._policy_dirty = False
        self._started += 1
        seq = self._started
        refused = self.time.refused(header)
        until: dict[PayloadKind, float | None]
        if refused:
            now = self.now()
            snapshot, until = EMPTY, dict.fromkeys(PayloadKind, now)
        else:
            now, own = self.time.judging(header, state, digests)
            judge = functools.partial(judge_state, state, now, own=own, policy=policy)
            snapshot, until = await anyio.to_thread.run_sync(judge)
        if seq <= self._current_seq:
            return  # a judging that started later (newer state or time) came first
        self._current_seq = seq
        old = self._current
        if (
            refused
            and old is not None
            and old.refused
            and old.version
            == (
                header.state_id.epoch,
                header.state_id.generation,
            )
        ):
            return  # still refused: said once, nothing new to serve
        new = SharedSnapshot(
            snapshot=snapshot,
            store_id=state.store_id,
            epoch=header.state_id.epoch,
            generation=header.state_id.generation,
            config_revision=header.config_revision,
            usable_until_by_kind=until,
            evaluated_at=now,
            clock=self.now,
            refused=refused,
        )
        self._log_trust(old, new, header)
        self._current = new
        self._signal()
        self._wake.set()  # the timer sleeps until the new view's first end
        kind = why
        if refused:
            kind = "refused"
        elif old is not None and old.refused:
            kind = "trusted" if old.version == new.version else why
        self._notify(old, new, kind)

    def _log_trust(
        self, old: SharedSnapshot | None, new: SharedSnapshot, header: StateHeader
    ) -> None:
        written = header.written_at / US_PER_SECOND
        wall = self.time.wall()
        if new.refused:
            log.warning(
                "shared reader: the wall clock (%s) is %.0f s behind the write time (%s) of "
                "state %s, beyond the %.0f s clock tolerance: nothing of it is served%s until "
                "the clock is within the tolerance or a newer state passes",
                _utc(wall),
                written - wall,
                _utc(written),
                header.state_id,
                self.time.tolerance,
                ", what was served is withdrawn" if old is not None and not old.refused else "",
            )
        elif old is not None and old.refused:
            log.info(
                "shared reader: the wall clock (%s) is within the %.0f s tolerance of the write "
                "time (%s) of state %s: serving it",
                _utc(wall),
                self.time.tolerance,
                _utc(written),
                header.state_id,
            )

    def _notify(self, old: SharedSnapshot | None, new: SharedSnapshot, why: str) -> None:
        if old is None:
            for watch in list(self._watches):
                watch.offer(SharedEvent("initial", new, None, new.version))
            return
        if (old.store_id, old.epoch) != (new.store_id, new.epoch):
            error = ResyncRequiredError(
                f"the writer's publish identity changed ({old.store_id} epoch {old.epoch} -> "
                f"{new.store_id} epoch {new.epoch}): resynchronise"
            )
            for watch in list(self._watches):
                watch.fail(error)
            return
        kind = why
        if why == "changed" and new.generation - old.generation > 1:
            kind = "coalesced"
        added, removed = count_diff(old.snapshot, new.snapshot)
        event = SharedEvent(kind, new, old.version, new.version, added, removed)
        for watch in list(self._watches):
            watch.offer(event)
