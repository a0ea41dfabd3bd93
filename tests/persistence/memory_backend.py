"""`MemoryBackend`: a small third-party `PersistenceBackend` kept in memory, for the tests.

Not one of ours and written only against the synchronous protocol (P-03, P-04): the state and
its receipt live in this process's memory, keyed by a token written once into the file at
``path``; the file itself is only the ownership token (an exclusive ``flock`` on its open
file, so a second owner is refused in this process, through a hard link and in another
process). It offers ``store_id`` and none of the adapter's other extensions.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from persistence import (
    BackendCapabilities,
    BackendClosedError,
    CommitConflictError,
    OwnerLockedError,
    PersistReceipt,
)
from persistence.exchange import state_digest
from persistence.protocol import stored
from persistence.state import SCHEMA_VERSION, PersistedState, StateId, seconds_to_us

__all__ = ["MEMORY_CAPABILITIES", "MemoryBackend"]

MEMORY_CAPABILITIES = BackendCapabilities(
    backend_name="memory",
    schema_version=SCHEMA_VERSION,
    shared_read=False,
    single_owner=True,
    atomic_commit=True,
)


@dataclass
class _Kept:
    """What one store holds: the last committed state and its receipt."""

    state: PersistedState | None = None
    receipt: PersistReceipt | None = None


#: Every store of this process, by the token in its file.
_KEPT: dict[str, _Kept] = {}
_KEPT_LOCK = threading.Lock()


class MemoryBackend:
    """A store in memory; ``path`` is its ownership token."""

    def __init__(
        self, path: str | Path, *, wall: Callable[[], float] = time.time, name: str = "memory"
    ) -> None:
        """Nothing is touched here."""
        self.path = Path(path)
        self._wall = wall
        self._capabilities = replace(MEMORY_CAPABILITIES, backend_name=name)
        self._fd: int | None = None
        self._token: str | None = None
        self._thread: int | None = None
        self._closed = False
        #: Every call made, by name (the tests check which thread made them).
        self.calls: list[tuple[str, int]] = []

    @property
    def capabilities(self) -> BackendCapabilities:
        """In memory, one owner, all or nothing."""
        return self._capabilities

    @property
    def store_id(self) -> str | None:
        """The token of the file once open."""
        return self._token

    def open(self) -> None:
        """Create the file, lock it, read (or write) its token."""
        self._note("open")
        if self._closed:
            raise BackendClosedError("a closed memory backend cannot be opened again")
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OwnerLockedError(f"{self.path} has another owner") from None
        token = os.pread(fd, 64, 0).decode()
        if not token:
            token = uuid.uuid4().hex
            os.pwrite(fd, token.encode(), 0)
        with _KEPT_LOCK:
            _KEPT.setdefault(token, _Kept())
        self._fd, self._token, self._thread = fd, token, threading.get_ident()

    def read_state(self) -> PersistedState | None:
        """The state last committed, carrying its receipt."""
        kept = self._kept("read_state")
        if kept.state is None or kept.receipt is None:
            return None
        return stored(kept.state, kept.receipt)

    def commit(self, state: PersistedState, *, expected: StateId | None) -> PersistReceipt:
        """Compare and swap; the same id and digest again is an idempotent retry."""
        kept = self._kept("commit")
        if state.store_id != self._token:
            raise CommitConflictError(f"state of store {state.store_id} is not for {self._token}")
        digest = state_digest(state)
        current = kept.receipt
        if current is not None and current.snapshot_id == state.state_id:
            if current.state_digest == digest:
                return replace(current, retried=True)
            raise CommitConflictError(f"state {state.state_id} is stored with other content")
        stored_id = None if current is None else current.snapshot_id
        if stored_id != expected:
            raise CommitConflictError(f"stored state is {stored_id}, expected {expected}")
        receipt = PersistReceipt(
            snapshot_id=state.state_id,
            config_revision=state.config_revision,
            committed_at=max(seconds_to_us(self._wall()), state.time_floor()),
            schema_version=SCHEMA_VERSION,
            state_digest=digest,
        )
        kept.state, kept.receipt = state, receipt
        return receipt

    def close(self) -> None:
        """Unlock the file; idempotent."""
        self._note("close")
        self._closed = True
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _kept(self, call: str) -> _Kept:
        self._note(call)
        if self._fd is None or self._token is None:
            raise BackendClosedError("the memory backend is not open")
        if threading.get_ident() != self._thread:
            raise RuntimeError("the memory backend is called from another thread than open's")
        return _KEPT[self._token]

    def _note(self, call: str) -> None:
        self.calls.append((call, threading.get_ident()))
