"""`SharedSnapshotClient`: the read-only follower of an owner's SQLite state, as a library.

Contract (persistence contract, shared reading): the constructor does no I/O; entering the
context opens the file read-only (``mode=ro``, no schema created, no writer lock) and recovers
one complete state; ``await task_group.start(reader.run)`` polls the header (short read
transactions) and reloads on a new state id, and re-judges the held state on its own expiry
timer. One fixed owner thread serialises open, reads and close. `get_snapshot` and
`get_status` run no SQL. `aclose` ends the subscriptions, cancels polling, waits for the
reads, closes the connection on the owner thread; beyond `CLOSE_DEADLINE` it reports
``cleanup_overdue`` and stays ``closing`` (another `aclose` retries).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Set as AbstractSet
from typing import Self

import anyio
from anyio.abc import TaskStatus

from persistence.errors import PersistenceError
from persistence.shared.convert import floor_of, judge_state
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
from persistence.state import PersistedState, StateHeader, seconds_to_us
from persistence.worker_thread import WorkerThread
from snapshot.kinds import PayloadKind
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE, difference
from snapshot.queries import ResyncRequiredError

__all__ = ["SharedSnapshotClient"]

log = logging.getLogger(__name__)
#: The kinds `wait_ready` may ask for.
READY_KINDS = frozenset({PayloadKind.VRP, PayloadKind.ASPA})


def _diff(old: SharedSnapshot, new: SharedSnapshot) -> tuple[int, int]:
    added = removed = 0
    for a, b, width in (
        (old.snapshot.v4, new.snapshot.v4, V4_KEY_SIZE),
        (old.snapshot.v6, new.snapshot.v6, V6_KEY_SIZE),
    ):
        plus, minus = difference(a, b, width)
        added += len(plus) // width
        removed += len(minus) // width
    for was, now in (
        (set(old.snapshot.router_keys), set(new.snapshot.router_keys)),
        (set(old.snapshot.aspas), set(new.snapshot.aspas)),
    ):
        added += len(now - was)
        removed += len(was - now)
    return added, removed


class SharedSnapshotClient:
    """Follows another process's SQLite state read-only and hands out immutable snapshots."""

    def __init__(self, config: SharedReaderConfig) -> None:
        """Remember ``config``; nothing is opened here."""
        self.config = config
        self._store = SQLiteStore(config.path, read_only=True)
        self._worker = WorkerThread("sqlite-shared-reader")
        self._state = ReaderState.CREATED
        self._held: tuple[StateHeader, PersistedState] | None = None
        self._current: SharedSnapshot | None = None
        self._error: str | None = None
        self._effective = 0.0
        self._watches: set[SharedWatch] = set()
        self._changed = anyio.Event()
        self._run_scope: anyio.CancelScope | None = None
        self._run_done: anyio.Event | None = None
        self._overdue = False
        self._closing: threading.Event | None = None
        #: Why closing the connection failed (kept for the next `aclose`).
        self.close_error: Exception | None = None

    # ------------------------------------------------------------------ time
    def now(self) -> float:
        """The reader's effective time: the wall clock, never below any time it saw."""
        self._effective = max(self._effective, self.config.wall())
        return self._effective

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> Self:
        """Open read-only and recover one complete state (raises `PersistenceError`)."""
        if self._state is not ReaderState.CREATED:
            raise RuntimeError("a shared reader is entered once")
        try:
            await self._worker.run(
                self._store.call, self._store.open_sync, seconds_to_us(self.config.wall())
            )
            self._state = ReaderState.OPEN
            stored = await self._worker.run(self._store.call, self._store.read_state_sync)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.aclose()
            raise
        if stored is not None:
            await self._adopt(stored)
        return self

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
        available = current is not None and (
            self._error is None or (current.usable_until is None or now < current.usable_until)
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
                if str(exc) != self._error:
                    log.warning("shared reader: %s (retrying at the next poll)", exc)
                self._error = str(exc)
                self._signal()
                continue
            self._recovered()
            if stored is not None:
                await self._adopt(stored)

    def _recovered(self) -> None:
        if self._error is not None:
            log.info("shared reader: reading %s again", self._store.path)
            self._error = None
            self._signal()

    async def _expire(self) -> None:
        while True:
            current = self._current
            until = None if current is None else current.usable_until
            delay = self.config.recheck
            if until is not None:
                delay = min(delay, max(0.0, until - self.now()))
            await anyio.sleep(delay)
            current = self._current
            if current is None or self._held is None or self._error is not None:
                continue  # after a read failure the old view only runs out
            if current.usable_until is not None and self.now() >= current.usable_until:
                await self._rejudge("expired")

    # ------------------------------------------------------------------ building
    def _signal(self) -> None:
        """Wake the `wait_ready` callers (each change gets a fresh event)."""
        self._changed.set()
        self._changed = anyio.Event()

    async def _adopt(self, stored: tuple[StateHeader, PersistedState]) -> None:
        header, state = stored
        self._effective = max(self._effective, floor_of(header, state))
        self._held = stored
        await self._rejudge("changed")

    async def _rejudge(self, why: str) -> None:
        held = self._held
        assert held is not None
        header, state = held
        now = self.now()
        snapshot, until = await anyio.to_thread.run_sync(judge_state, state, now)
        new = SharedSnapshot(
            snapshot=snapshot,
            store_id=state.store_id,
            epoch=header.state_id.epoch,
            generation=header.state_id.generation,
            config_revision=header.config_revision,
            usable_until_by_kind=until,
            evaluated_at=now,
            clock=self.now,
        )
        old = self._current
        self._current = new
        self._signal()
        self._notify(old, new, why)

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
        added, removed = _diff(old, new)
        event = SharedEvent(kind, new, old.version, new.version, added, removed)
        for watch in list(self._watches):
            watch.offer(event)
