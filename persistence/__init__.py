"""Persistence of published state (SQLite, DuckDB); memory-only by default.

The public face of the persistence half is what this package exports: the backend protocol,
the two backends (DuckDB needs the ``duckdb`` extra, imported only when a store opens), the
commit receipt and the error classes. Everything else in the submodules is internal.
"""

from persistence.backend import BackendCapabilities, PersistenceBackend
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
    "TransientError",
    "UnsupportedSchemaError",
]
