"""The synchronous `PersistenceBackend` protocol, its optional extensions and `StoredState`.

A backend is a plain object whose ``open``/``read_state``/``commit``/``close`` block; the
client never calls them on its event loop but through `persistence.backend.ThreadedBackend`,
one call at a time on the backend's own worker thread. Besides the protocol a backend may
offer the extensions below (our SQL backends offer all of them); the adapter uses one only
where the backend has it and otherwise gets by with the protocol alone.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Protocol, runtime_checkable

from persistence.errors import PersistenceError
from persistence.exchange import state_digest
from persistence.limits import Limits
from persistence.meta_digest import sealed
from persistence.state import (
    PersistedState,
    PersistReceipt,
    StateHeader,
    StateId,
)

__all__ = [
    "BackendCapabilities",
    "HeaderReading",
    "Interruptible",
    "LimitSetting",
    "PersistenceBackend",
    "StoredState",
    "WithStoreId",
    "header_of",
    "receipt_of",
    "stored",
]


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
    """A store for one `PersistedState` at a time; every call blocks (the contract's protocol).

    Constructing touches no file. `open` binds the instance to the calling thread (and
    process): `read_state`, `commit` and `close` run there afterwards. `close` is idempotent,
    and a closed instance cannot be opened again.
    """

    @property
    def capabilities(self) -> BackendCapabilities:
        """What this backend offers."""
        ...

    def open(self) -> None:
        """Take ownership, create or check the schema."""
        ...

    def read_state(self) -> PersistedState | None:
        """The whole verified state with its actual receipt (`receipt_of`); None if empty."""
        ...

    def commit(self, state: PersistedState, *, expected: StateId | None) -> PersistReceipt:
        """Store ``state`` if the stored state is ``expected`` (None: only into an empty store).

        The same id with the same digest again is an idempotent retry that returns the
        original receipt; the same id with other content is a `CommitConflictError`.
        """
        ...

    def close(self) -> None:
        """Release the store (idempotent)."""
        ...


@runtime_checkable
class WithStoreId(Protocol):
    """Extension: the id of the store once open (a state must carry it to be committed)."""

    @property
    def store_id(self) -> str | None:
        """The store's id; None before `PersistenceBackend.open`."""
        ...


@runtime_checkable
class HeaderReading(Protocol):
    """Extension: the stored header alone, and the header with the state in one read."""

    def read_header(self) -> StateHeader | None:
        """The verified header (None if nothing was committed)."""
        ...

    def read_stored(self) -> tuple[StateHeader, PersistedState] | None:
        """The verified header and state of one read (None if nothing was committed)."""
        ...


@runtime_checkable
class LimitSetting(Protocol):
    """Extension: the `Limits` a client that built the backend may change between calls."""

    @property
    def limits(self) -> Limits:
        """The bounds in force."""
        ...

    def set_limits(self, limits: Limits) -> None:
        """Bound the next call on (never a running one)."""
        ...


@runtime_checkable
class Interruptible(Protocol):
    """Extension: a cooperative cancel of the running call, callable from any thread."""

    def interrupt(self) -> None:
        """End the running call and every later one (its transaction rolls back)."""
        ...


@dataclass(frozen=True, slots=True, eq=False)
class StoredState(PersistedState):
    """A `PersistedState` as `PersistenceBackend.read_state` returns it: with its receipt.

    A state built to be committed is a plain `PersistedState` (its receipt is None,
    `receipt_of`); one read back carries the receipt of the commit that wrote it.
    """

    receipt: PersistReceipt | None = None


def stored(state: PersistedState, receipt: PersistReceipt) -> StoredState:
    """``state`` carrying ``receipt`` (the fields are shared, not copied)."""
    values = {f.name: getattr(state, f.name) for f in fields(PersistedState)}
    return StoredState(**values, receipt=receipt)


def receipt_of(state: PersistedState) -> PersistReceipt | None:
    """The receipt a read returned with ``state``; None for a state waiting to be committed."""
    receipt = getattr(state, "receipt", None)
    return receipt if isinstance(receipt, PersistReceipt) else None


def header_of(state: PersistedState) -> StateHeader:
    """The header of a state read back, from its receipt (for a backend without headers).

    Raises `PersistenceError` for a state without receipt or one that disagrees with it: a
    backend's read must return what was committed.
    """
    receipt = receipt_of(state)
    if receipt is None:
        raise PersistenceError("the backend's read_state returned a state without its receipt")
    if (
        receipt.snapshot_id != state.state_id
        or receipt.config_revision != state.config_revision
        or receipt.state_digest != state_digest(state)
    ):
        raise PersistenceError("the backend's read_state returned a receipt of another state")
    return sealed(state, receipt.state_digest, receipt.committed_at)
