"""The `PersistenceBackend` protocol and the async adapter that runs a store on its own thread.

open, read, commit and close of one backend run serially on one dedicated worker thread; the
event loop only awaits. Constructors touch no file.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import anyio

from persistence.errors import BackendClosedError, ForkedProcessError
from persistence.limits import Limits
from persistence.sql_store import SqlStore
from persistence.state import (
    PersistedState,
    PersistReceipt,
    StateHeader,
    StateId,
    seconds_to_us,
)
from persistence.worker_thread import WorkerThread

#: Default bound on how long `close` waits for the queued calls before it interrupts one.
CLOSE_TIMEOUT = 30.0
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BackendCapabilities:
    """What a backend offers."""

    backend_name: str
    schema_version: int
    #: Other processes may read the file while the owner writes (--state-reader).
    shared_read: bool
    #: At most one writer per file, enforced.
    single_owner: bool
    #: A commit is all or nothing, also across a crash.
    atomic_commit: bool


@runtime_checkable
class PersistenceBackend(Protocol):
    """A store for one `PersistedState` at a time."""

    @property
    def capabilities(self) -> BackendCapabilities:
        """What this backend offers."""
        ...

    @property
    def store_id(self) -> str | None:
        """The store's id once open."""
        ...

    async def open(self) -> None:
        """Take ownership (or open read-only), create or check the schema."""
        ...

    async def read_header(self) -> StateHeader | None:
        """The verified header (None if nothing was committed)."""
        ...

    async def read_state(self) -> tuple[StateHeader, PersistedState] | None:
        """The whole verified state (None if nothing was committed)."""
        ...

    async def commit(self, state: PersistedState, expected: StateId | None) -> PersistReceipt:
        """Store ``state`` if the stored state is ``expected``; idempotent for a retry.

        The header's ``written_at`` is no earlier than `PersistedState.time_floor`.
        """
        ...

    async def close(self) -> bool:
        """Release the file once the running call ended; False if the worker is still busy."""
        ...


class ThreadedBackend:
    """Runs a `SqlStore` on a dedicated worker thread (implements `PersistenceBackend`)."""

    def __init__(
        self,
        store: SqlStore,
        capabilities: BackendCapabilities,
        *,
        wall: Callable[[], float] = time.time,
        close_timeout: float = CLOSE_TIMEOUT,
    ) -> None:
        """Wrap ``store``; nothing happens until `open`."""
        self._store = store
        self._capabilities = capabilities
        self._wall = wall
        self._close_timeout = close_timeout
        self._worker = WorkerThread(f"{capabilities.backend_name}-persistence")
        self._open = False
        self._closing = False
        self._closed = False
        #: Why the last `close` failed (None after one that succeeded); set when `close` returns.
        self.close_error: Exception | None = None

    @property
    def capabilities(self) -> BackendCapabilities:
        """What this backend offers."""
        return self._capabilities

    @property
    def store_id(self) -> str | None:
        """The store's id once open."""
        return self._store.store_id

    @property
    def closed(self) -> bool:
        """Closed for good (a failed close is not: the next `close` retries it)."""
        return self._closed

    @property
    def is_open(self) -> bool:
        """Opened and not closed."""
        return self._open

    async def open(self) -> None:
        """Open on the worker thread; errors are `PersistenceError` subclasses."""
        self._store.check_process()
        if self._closed or self._closing:
            raise BackendClosedError("a closed backend cannot be opened again")
        if self._open:
            return
        if self._store.pid is None:
            self._store.pid = os.getpid()  # bound to this process from now on
        await self._worker.run(self._store.call, self._store.open_sync, seconds_to_us(self._wall()))
        self._open = True

    async def set_limits(self, limits: Limits) -> None:
        """Bound reads from the next call on (queued behind a running one, not re-budgeting it)."""
        self._check_open()
        await self._worker.run(setattr, self._store, "limits", limits)

    @property
    def limits(self) -> Limits:
        """The bounds reads are checked against now."""
        limits: Limits = self._store.limits
        return limits

    async def read_header(self) -> StateHeader | None:
        """The verified header (None if nothing was committed)."""
        self._check_open()
        return await self._worker.run(self._store.call, self._store.read_header_sync)

    async def read_state(self) -> tuple[StateHeader, PersistedState] | None:
        """The whole verified state (None if nothing was committed)."""
        self._check_open()
        return await self._worker.run(self._store.call, self._store.read_state_sync)

    async def commit(self, state: PersistedState, expected: StateId | None) -> PersistReceipt:
        """Store ``state`` if the stored state is ``expected``; idempotent for a retry.

        ``written_at`` is the wall clock, raised to `PersistedState.time_floor` when the state
        shows a later time (a wall clock set back must not make the file look older); a retry
        of a stored state keeps the original ``written_at``.
        """
        self._check_open()
        written_at = max(seconds_to_us(self._wall()), state.time_floor())
        return await self._worker.run(
            self._store.call, self._store.commit_sync, state, expected, written_at
        )

    async def close(self, *, wait: float | None = None) -> bool:
        """Close the connection and release the owner lock after the queued calls.

        They get ``wait`` s (default ``close_timeout``; 0: the close deadline has come). A call
        still running then is interrupted with the database's own cancel, so its transaction
        rolls back (it raises `CallInterruptedError`: never reported as stored), and the close
        waits until its own step has run: the connection closes and the lock is released on
        the worker thread, after the call. The log says what happened. Shielded; True once the
        close step has run (a call the database cannot interrupt is waited for, logged each
        ``close_timeout``).

        A failing close never raises here (it must not replace a caller's own error): it is
        returned in `close_error` (None after a close that succeeded). The backend then is not
        closed: the store keeps its connection and owner lock, the worker thread stays, and
        the next `close` retries. Only a successful close marks it closed and ends the thread.
        """
        try:
            self._store.check_process()
        except ForkedProcessError as exc:  # the parent's: leave connection and lock alone
            self._open = False
            self.close_error = exc
            return True
        if self._closed:
            return not self._worker.alive
        self._closing = True
        self._open = False
        attempt = _CloseAttempt()
        close = functools.partial(self._close_sync, attempt)
        self._worker.submit(close)  # runs here when no thread was started
        with anyio.CancelScope(shield=True):
            if not await attempt.wait(self._close_timeout if wait is None else wait):
                await self._interrupt_for(attempt, close)
        self.close_error = attempt.error
        if attempt.error is not None:
            return True  # kept, not closed: see close_error; the next close retries
        self._closed = True
        with anyio.CancelScope(shield=True):
            while not await self._worker.stop(self._close_timeout):
                log.error("%s: the worker thread has not ended after the close", self._worker.name)
        return True

    async def _interrupt_for(self, attempt: _CloseAttempt, close: Callable[[], None]) -> None:
        """At the close deadline: interrupt the running call and wait until the close ran."""
        name = self._worker.name
        running = None
        if self._worker.running(besides=close):
            running = self._store.running or "a call"
            log.warning(
                "%s: %s still runs at the close deadline: interrupting it (its transaction "
                "rolls back)",
                name,
                running,
            )
            await self._worker.interrupt_running(self._store.interrupt, besides=close)
        while not await attempt.wait(self._close_timeout):
            log.error(
                "%s: the close has not run %g s later (a call the database cannot interrupt?); "
                "still waiting: the connection stays open and the owner lock held until it ends",
                name,
                self._close_timeout,
            )
        if running is not None:
            interrupted = self._store.interrupted
            log.warning(
                "%s: %s; %s",
                name,
                f"{interrupted} was interrupted and rolled back (nothing of it is stored)"
                if interrupted is not None
                else f"{running} ended before the interrupt took effect",
                "connection closed and owner lock released"
                if attempt.error is None
                else f"closing failed ({attempt.error}): connection and owner lock kept",
            )

    def _close_sync(self, attempt: _CloseAttempt) -> None:
        try:
            self._store.call(self._store.close_sync)
        except Exception as exc:  # noqa: BLE001 - returned to `close` (close_error)
            attempt.error = exc
        finally:
            attempt.done.set()

    def _check_open(self) -> None:
        self._store.check_process()  # a forked child has no worker thread: never queue there
        if not self._open:
            raise BackendClosedError(f"the {self._capabilities.backend_name} backend is not open")


class _CloseAttempt:
    """One run of the close step on the worker thread: whether it ran, and how it failed."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: Exception | None = None

    async def wait(self, seconds: float) -> bool:
        """Wait (shielded) up to ``seconds`` for the close step; whether it has run."""
        if not self.done.is_set() and seconds > 0:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.done.wait, seconds)
        return self.done.is_set()
