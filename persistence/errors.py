"""Persistence error classes: transient (retry, memory keeps serving) versus permanent.

Every error carries ``retryable`` and a ``code``: ``persistence_corrupt`` for stored data that
fails a check, ``persistence_failed`` for everything else (retryable or not). ``details`` says
where it happened when that is known (`CloseFailedError`: ``phase`` and ``cause``).
"""

from __future__ import annotations

#: The code of a failed persistence operation (the default).
FAILED = "persistence_failed"
#: The code of stored data that is damaged or fails a check.
CORRUPT = "persistence_corrupt"
#: The ``cause`` of a close whose final (revocation) build raised an unexpected exception.
REVOCATION_FAILED = "revocation_failed"


class PersistenceError(Exception):
    """Base class; ``retryable`` says whether trying again later may succeed."""

    retryable = False
    code = FAILED

    @property
    def details(self) -> dict[str, str]:
        """Where it happened (empty when nothing more is known)."""
        return {}


class TransientError(PersistenceError):
    """Busy, locked, I/O error, disk full, out of memory, a transaction conflict: try again."""

    retryable = True


class CorruptStateError(PersistenceError):
    """The stored state fails a type, range or digest check; the file is left untouched."""

    code = CORRUPT


class CallInterruptedError(TransientError):
    """A call interrupted at a close deadline: its transaction was rolled back, nothing stored."""


class DamagedStateError(CorruptStateError):
    """The stored rows fail a check (digest, type, range) in a file that is otherwise sound.

    The owner does not use them, resynchronises from the network and replaces them with its
    first commit: the file's structure and header were verified when it opened.
    """


class UnsupportedSchemaError(PersistenceError):
    """The file holds another (unknown or older) schema version; no migration, no wipe."""


class CommitConflictError(PersistenceError):
    """The stored state is not the ``expected`` one, or the same id holds other content."""


class OwnerLockedError(PersistenceError):
    """Another owner (process or backend in this process) holds the database."""


class MissingExtraError(PersistenceError):
    """The backend needs an optional dependency that is not installed."""


class BackendClosedError(PersistenceError):
    """The backend is not open (never opened, or closed)."""


class ForkedProcessError(PersistenceError):
    """A backend, store or owner lock used in a process forked from the one that opened it.

    The connection and the owner lock belong to the opening process: a forked child can
    neither use them nor release the parent's lock (its close leaves both alone).
    """


class CloseFailedError(PersistenceError):
    """The close could not hand over a final state: ``details`` holds ``phase`` and ``cause``."""

    def __init__(self, message: str, *, cause: str, phase: str = "close") -> None:
        """``cause``: e.g. `REVOCATION_FAILED`; ``phase``: the stage that failed."""
        super().__init__(message)
        self.phase = phase
        self.cause = cause

    @property
    def details(self) -> dict[str, str]:
        """``{"phase": ..., "cause": ...}``."""
        return {"phase": self.phase, "cause": self.cause}
