"""Persistence of published state (SQLite, DuckDB); memory-only by default.

The public face of the persistence half is what this package exports: the synchronous backend
protocol, the two backends implementing it (DuckDB needs the ``duckdb`` extra, imported only
when a store opens), the async adapter that runs any of them on its own worker thread, the
commit receipt, the state a read returns with it, and the error classes. Everything else in
the submodules is internal.
"""

from persistence.backend import ThreadedBackend
from persistence.duckdb_backend import DuckDBBackend
from persistence.errors import (
    BackendClosedError,
    CommitConflictError,
    CorruptStateError,
    MissingExtraError,
    OwnerLockedError,
    PersistenceError,
    TransientError,
    UnsupportedSchemaError,
)
from persistence.limits import LimitExceededError, Limits
from persistence.protocol import BackendCapabilities, PersistenceBackend, StoredState, receipt_of
from persistence.sql_backend import WrongThreadError
from persistence.sqlite_backend import SQLiteBackend
from persistence.state import PersistReceipt

__all__ = [
    "BackendCapabilities",
    "BackendClosedError",
    "CommitConflictError",
    "CorruptStateError",
    "DuckDBBackend",
    "LimitExceededError",
    "Limits",
    "MissingExtraError",
    "OwnerLockedError",
    "PersistReceipt",
    "PersistenceBackend",
    "PersistenceError",
    "SQLiteBackend",
    "StoredState",
    "ThreadedBackend",
    "TransientError",
    "UnsupportedSchemaError",
    "WrongThreadError",
    "receipt_of",
]
