"""Persistence of published state (SQLite, DuckDB); memory-only by default.

The public face of the persistence half is what this package exports: the backend protocol,
the two backends (DuckDB needs the ``duckdb`` extra, imported only when a store opens), the
commit receipt and the error classes. Everything else in the submodules is internal.
"""

from persistence.backend import PersistenceBackend
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
from persistence.sqlite_backend import SQLiteBackend
from persistence.state import CommitReceipt

__all__ = [
    "BackendClosedError",
    "CommitConflictError",
    "CommitReceipt",
    "CorruptStateError",
    "DuckDBBackend",
    "MissingExtraError",
    "OwnerLockedError",
    "PersistenceBackend",
    "PersistenceError",
    "SQLiteBackend",
    "TransientError",
    "UnsupportedSchemaError",
]
