"""DuckDB backend (the ``duckdb`` extra): one owner, one connection, threads=1, no external access.

`duckdb` is imported when the backend opens, so a missing extra is a `MissingExtraError` at
open, never at import. A batch of at most 256 rows goes in as one JSON parameter through
``json_each`` with explicit CASTs (`persistence.json_batches`; DuckDB's executemany runs one
statement per row). Driver errors are classed by their
exception type alone (`classify`), never by their message.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from persistence.errors import (
    CorruptStateError,
    MissingExtraError,
    PersistenceError,
    TransientError,
)
from persistence.json_batches import insert_sql, json_batches
from persistence.limits import Limits
from persistence.lock import OwnerLock, normalise
from persistence.protocol import BackendCapabilities
from persistence.rows import Row
from persistence.schema import COLUMNS, TABLES
from persistence.sql_backend import SqlBackend
from persistence.sql_store import SqlStore
from persistence.state import SCHEMA_VERSION
from persistence.structure import Column

#: (table, column) -> SQL type, as the shared DDL declares it.
_TYPES = {(table, n): t for table, cols in COLUMNS.items() for n, t, _ in cols}


#: DuckDB exception types of faults that may clear up: out of memory, a transaction conflict,
#: an interrupted statement.
_TRANSIENT = ("OutOfMemoryException", "TransactionException", "InterruptException")
#: The stored data could not be deserialised: damaged.
_CORRUPT = ("SerializationException",)


def classify(exc: Exception) -> PersistenceError:
    """The persistence error class of a `duckdb` error, by its exception type only.

    The generic ``IOException`` covers both a failed block checksum and other I/O faults and
    carries no reliable sub-code, so it is permanent without claiming corruption; so are a
    closed or invalidated connection and every other driver error.
    """
    duckdb = importlib.import_module("duckdb")
    message = f"duckdb {type(exc).__name__}: {exc}"
    if isinstance(exc, tuple(getattr(duckdb, name) for name in _CORRUPT)):
        return CorruptStateError(message)
    if isinstance(exc, tuple(getattr(duckdb, name) for name in _TRANSIENT)):
        return TransientError(message)
    return PersistenceError(message)


class DuckDBStore(SqlStore):
    """Schema v2 on one DuckDB connection."""

    backend_name = "duckdb"
    blob_length = "octet_length"
    text_octets = "strlen({})"
    type_names = {"TEXT": "VARCHAR"}  # noqa: RUF012 - read only

    def __init__(self, path: str | Path, limits: Limits | None = None) -> None:
        """Remember the path; the file is opened by `open_sync`."""
        super().__init__(normalise(path), OwnerLock(path), limits)

    def open_sync(self, now: int) -> None:
        """Import duckdb, lock, connect with threads=1 and external access off, check schema."""
        try:
            duckdb = importlib.import_module("duckdb")
        except ImportError as exc:
            raise MissingExtraError(
                "the DuckDB backend needs the 'duckdb' extra: pip install 'rtr-serve[duckdb]'"
            ) from exc
        self._take_ownership()
        try:
            self._db = duckdb.connect(
                str(self.path),
                config={"threads": 1, "enable_external_access": False},
            )
            self._lock_created_file()
            tables = self._table_names()
            if tables:  # before anything could write to a foreign or damaged file
                self.check_schema(tables)
                self.check_writable()
            self.ensure_schema(now)
        except BaseException:
            self.close_sync()
            raise

    def _begin(self, *, write: bool) -> None:  # noqa: ARG002 - one kind of transaction
        self._conn().execute("BEGIN TRANSACTION")

    def _commit(self) -> None:
        self._conn().execute("COMMIT")

    def _rollback(self) -> None:
        with self._interrupt.guarded():
            if self._db is None:
                return
            try:
                self._db.execute("ROLLBACK")
            except Exception as exc:
                if "no transaction is active" not in str(exc):
                    raise

    def _insert(self, table: str, columns: Sequence[str], rows: list[Row]) -> None:
        # One JSON parameter per batch (split at a 1 MiB target), read by json_each with an
        # explicit CAST per column: statement overhead, not values, dominates in DuckDB.
        sql = insert_sql(table, columns, [_TYPES[table, c] for c in columns])
        for parameter in json_batches(rows):
            self._conn().execute(sql, [parameter])

    def _table_names(self) -> set[str]:
        rows = self._conn().execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
        )
        return {str(name) for (name,) in rows.fetchall()}

    def _columns(self, table: str) -> tuple[Column, ...]:
        rows = (
            self._conn()
            .execute(
                "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
                "WHERE table_schema = 'main' AND table_name = ? ORDER BY ordinal_position",
                [table],
            )
            .fetchall()
        )
        return tuple((str(n), str(t).upper(), str(null).upper() == "NO") for n, t, null in rows)

    def _foreign_objects(self) -> list[str]:
        conn = self._conn()
        tables = conn.execute(
            "SELECT table_type, table_schema, table_name FROM information_schema.tables "
            "WHERE table_catalog = current_database()"
        ).fetchall()
        found = [
            f"{kind.lower()} {schema}.{name}"
            for kind, schema, name in tables
            if not (kind == "BASE TABLE" and schema == "main" and name in TABLES)
        ]
        indexes = conn.execute(
            "SELECT index_name FROM duckdb_indexes() WHERE database_name = current_database()"
        ).fetchall()
        return found + [f"index {name}" for (name,) in indexes]

    def translate(self, exc: Exception) -> PersistenceError | None:
        """`classify` for errors raised by the `duckdb` module."""
        if type(exc).__module__.split(".")[0] not in {"duckdb", "_duckdb"}:
            return None
        return classify(exc)


#: What the DuckDB backend offers.
DUCKDB_CAPABILITIES = BackendCapabilities(
    backend_name="duckdb",
    schema_version=SCHEMA_VERSION,
    shared_read=False,
    single_owner=True,
    atomic_commit=True,
)


class DuckDBBackend(SqlBackend):
    """The synchronous DuckDB backend (single owner; no shared readers).

    Wrap it in `persistence.backend.ThreadedBackend` to await it from an event loop.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        limits: Limits | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """Nothing is opened (nor imported) here; ``limits`` bound what a read builds."""
        super().__init__(DuckDBStore(path, limits), DUCKDB_CAPABILITIES, wall=wall)
