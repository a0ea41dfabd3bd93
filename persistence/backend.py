"""`ThreadedBackend`: the async adapter running any synchronous `PersistenceBackend` on its thread.

open, read, commit and close of the wrapped backend run serially on one dedicated worker thread
(which the backend binds at open); the event loop only awaits. The adapter adds what the client
and the persister use besides the protocol: the stored header (`read_header`, from the
backend's `HeaderReading` extension or derived from a read's receipt), the store id, new
`Limits` for a backend that takes them, and a bounded close that interrupts a call still
running at its deadline (a backend that is `Interruptible`). The protocol types are in
`persistence.protocol` (re-exported here).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import anyio

from persistence.errors import BackendClosedError, ForkedProcessError
from persistence.limits import Limits
from persistence.protocol import (
    BackendCapabilities,
    HeaderReading,
    Interruptible,
    LimitSetting,
    PersistenceBackend,
    WithStoreId,
    header_of,
)
from persistence.state import PersistedState, PersistReceipt, StateHeader, StateId
from persistence.worker_thread import WorkerThread

__all__ = [
    "CLOSE_TIMEOUT",
    "AsyncPersistenceBackend",
    "BackendCapabilities",
    "PersistenceBackend",
    "ThreadedBackend",
]

#: Default bound on how long `close` waits for the queued calls before it interrupts one.
CLOSE_TIMEOUT = 30.0
log = logging.getLogger(__name__)


@runtime_checkable
class AsyncPersistenceBackend(Protocol):
    """What the persister and the client await: the shape of `ThreadedBackend`."""

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
        """Store ``state`` if the stored state is ``expected``; idempotent for a retry."""
        ...

    async def close(self) -> bool:
        """Release the file once the running call ended; False if the worker is still busy."""
        ...


class ThreadedBackend:
    """Runs a synchronous `PersistenceBackend` on a dedicated worker thread (async adapter)."""

    def __init__(
        self, backend: PersistenceBackend, *, close_timeout: float = CLOSE_TIMEOUT
    ) -> None:
        """Wrap ``backend`` (any object of the protocol); nothing happens until `open`."""
        self._backend = backend
        self._capabilities = backend.capabilities
        self._close_timeout = close_timeout
        self._worker = WorkerThread(f"{self._capabilities.backend_name}-persistence")
        self._open = False
        self._closing = False
        self._closed = False
        #: Why the last `close` failed (None after one that succeeded); set when `close` returns.
        self.close_error: Exception | None = None

    @property
    def inner(self) -> PersistenceBackend:
        """The wrapped synchronous backend (call it only on the worker thread)."""
        return self._backend

    @property
    def capabilities(self) -> BackendCapabilities:
        """What this backend offers."""
        return self._capabilities

    @property
    def store_id(self) -> str | None:
        """The store's id once open (None for a backend without the `WithStoreId` extension)."""
        backend = self._backend
        return backend.store_id if isinstance(backend, WithStoreId) else None

    @property
    def closed(self) -> bool:
        """Closed for good (a failed close is not: the next `close` retries it)."""
        return self._closed

    @property
    def is_open(self) -> bool:
        """Opened and not closed."""
        return self._open

    @property
    def takes_limits(self) -> bool:
        """Whether the wrapped backend has the `LimitSetting` extension."""
        return isinstance(self._backend, LimitSetting)

    async def open(self) -> None:
        """Open on the worker thread (which the backend binds); errors propagate unchanged."""
        self._check_process()
        if self._closed or self._closing:
            raise BackendClosedError("a closed backend cannot be opened again")
        if self._open:
            return
        await self._worker.run(self._backend.open)
        self._open = True

    async def set_limits(self, limits: Limits) -> None:
        """Bound reads from the next call on (queued behind a running one, not re-budgeting it).

        Only for a backend with the `LimitSetting` extension (`TypeError` otherwise).
        """
        self._check_open()
        backend = self._backend
        if not isinstance(backend, LimitSetting):
            raise TypeError(f"the {self._capabilities.backend_name} backend takes no Limits")
        await self._worker.run(backend.set_limits, limits)

    @property
    def limits(self) -> Limits | None:
        """The bounds reads are checked against now (None: the backend keeps its own)."""
        backend = self._backend
        return backend.limits if isinstance(backend, LimitSetting) else None

    async def read_header(self) -> StateHeader | None:
        """The verified header (None if nothing was committed).

        From the `HeaderReading` extension, else derived from a full read's receipt.
        """
        self._check_open()
        backend = self._backend
        if isinstance(backend, HeaderReading):
            return await self._worker.run(backend.read_header)
        found = await self.read_state()
        return None if found is None else found[0]

    async def read_state(self) -> tuple[StateHeader, PersistedState] | None:
        """The whole verified state and its header (None if nothing was committed)."""
        self._check_open()
        backend = self._backend
        if isinstance(backend, HeaderReading):
            return await self._worker.run(backend.read_stored)
        state = await self._worker.run(backend.read_state)
        if state is None:
            return None
        return await self._worker.run(header_of, state), state

    async def commit(self, state: PersistedState, expected: StateId | None) -> PersistReceipt:
        """Store ``state`` if the stored state is ``expected``; idempotent for a retry."""
        self._check_open()
        commit = functools.partial(self._backend.commit, state, expected=expected)
        return await self._worker.run(commit)

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
            self._check_process()
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
            running = getattr(self._backend, "running", None) or "a call"
            log.warning(
                "%s: %s still runs at the close deadline: interrupting it (its transaction "
                "rolls back)",
                name,
                running,
            )
            backend = self._backend
            if isinstance(backend, Interruptible):
                await self._worker.interrupt_running(backend.interrupt, besides=close)
        while not await attempt.wait(self._close_timeout):
            log.error(
                "%s: the close has not run %g s later (a call the database cannot interrupt?); "
                "still waiting: the connection stays open and the owner lock held until it ends",
                name,
                self._close_timeout,
            )
        if running is not None:
            interrupted = getattr(self._backend, "interrupted", None)
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
            self._backend.close()
        except Exception as exc:  # noqa: BLE001 - returned to `close` (close_error)
            attempt.error = exc
        finally:
            attempt.done.set()

    def _check_process(self) -> None:
        """`ForkedProcessError` in a forked child (when the backend can tell)."""
        check = getattr(self._backend, "check_process", None)
        if callable(check):
            check()

    def _check_open(self) -> None:
        self._check_process()  # a forked child has no worker thread: never queue there
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
