"""`SqlBackend`: a `SqlStore` as a synchronous `PersistenceBackend` bound to one thread and process.

The constructor touches no file; `open` binds the instance to the calling thread and process
and every later call must come from that thread (`WrongThreadError` otherwise), never from a
forked child (`ForkedProcessError`: the child neither uses nor releases the parent's
connection and owner lock). `close` is idempotent; a closed instance is never opened again,
and a close that failed keeps connection and lock for the next `close` to retry.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from persistence.errors import BackendClosedError, PersistenceError
from persistence.limits import Limits
from persistence.protocol import BackendCapabilities, StoredState, stored
from persistence.sql_store import SqlStore
from persistence.state import PersistedState, PersistReceipt, StateHeader, StateId, seconds_to_us

__all__ = ["SqlBackend", "WrongThreadError"]


class WrongThreadError(PersistenceError):
    """A call on an open backend from another thread than the one that opened it."""


class SqlBackend:
    """The synchronous backend over one `SqlStore` (SQLite's and DuckDB's common part)."""

    def __init__(
        self,
        store: SqlStore,
        capabilities: BackendCapabilities,
        *,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """Wrap ``store``; nothing is opened. ``wall``: the clock of ``written_at``."""
        self.store = store
        self.path = store.path
        self._capabilities = capabilities
        self._wall = wall
        self._thread: int | None = None
        self._open = False
        self._closing = False
        self._closed = False

    @property
    def capabilities(self) -> BackendCapabilities:
        """What this backend offers."""
        return self._capabilities

    @property
    def store_id(self) -> str | None:
        """The store's id once open."""
        return self.store.store_id

    @property
    def limits(self) -> Limits:
        """The bounds the next read is checked against."""
        limits: Limits = self.store.limits
        return limits

    @property
    def is_open(self) -> bool:
        """Opened and not closed."""
        return self._open

    @property
    def closed(self) -> bool:
        """Closed for good."""
        return self._closed

    @property
    def running(self) -> str | None:
        """The name of the call running now (read from any thread, for the log)."""
        return self.store.running

    @property
    def interrupted(self) -> str | None:
        """The name of the call an `interrupt` ended, if any."""
        return self.store.interrupted

    def check_process(self) -> None:
        """`ForkedProcessError` in a process forked from the one that opened the store."""
        self.store.check_process()

    def open(self) -> None:
        """Bind to this thread and process, take ownership, check or create the schema.

        A second `open` on the owning thread is harmless; a failed one leaves the backend
        unopened (and unbound).
        """
        self.store.check_process()
        if self._closing:
            raise BackendClosedError("a closed backend cannot be opened again")
        if self._open:
            self._check_thread()
            return
        if self.store.pid is None:
            self.store.pid = os.getpid()  # bound to this process from now on
        self._thread = threading.get_ident()
        try:
            self.store.call(self.store.open_sync, seconds_to_us(self._wall()))
        except BaseException:
            self._thread = None
            raise
        self._open = True

    def set_limits(self, limits: Limits) -> None:
        """Bound reads from the next call on (a running one is never re-budgeted)."""
        if self._open:
            self._check_thread()
        self.store.limits = limits

    def read_header(self) -> StateHeader | None:
        """The verified header (None if nothing was committed)."""
        self._check_open()
        return self.store.call(self.store.read_header_sync)

    def read_stored(self) -> tuple[StateHeader, PersistedState] | None:
        """The verified header and state of one read transaction (None: nothing committed)."""
        self._check_open()
        return self.store.call(self.store.read_state_sync)

    def read_state(self) -> StoredState | None:
        """The whole verified state, carrying the receipt of its commit (None: nothing)."""
        found = self.read_stored()
        if found is None:
            return None
        header, state = found
        return stored(state, header.receipt())

    def commit(self, state: PersistedState, *, expected: StateId | None) -> PersistReceipt:
        """Store ``state`` if the stored state is ``expected``; idempotent for a retry.

        ``written_at`` is the wall clock, raised to `PersistedState.time_floor` when the state
        shows a later time; a retry of a stored state keeps the original ``written_at``.
        """
        self._check_open()
        written_at = max(seconds_to_us(self._wall()), state.time_floor())
        return self.store.call(self.store.commit_sync, state, expected, written_at)

    def close(self) -> None:
        """Close the connection, then release the owner lock; idempotent.

        Raises `ForkedProcessError` in a forked child (nothing of the parent's is touched).
        When closing the connection fails the error propagates, connection and lock are kept
        and the next `close` retries; the backend cannot be opened again either way.
        """
        self.store.check_process()
        if self._closed:
            return
        self._check_thread()
        self._closing = True
        self._open = False
        self.store.call(self.store.close_sync)
        self._closed = True

    def interrupt(self) -> None:
        """From any thread: end the running call and every later one (the close deadline)."""
        self.store.interrupt()

    def _check_open(self) -> None:
        self.store.check_process()
        if not self._open:
            raise BackendClosedError(f"the {self._capabilities.backend_name} backend is not open")
        self._check_thread()

    def _check_thread(self) -> None:
        if self._thread is not None and threading.get_ident() != self._thread:
            raise WrongThreadError(
                f"the {self._capabilities.backend_name} backend belongs to the thread that "
                "opened it; call it there (the client runs it on its worker thread)"
            )
