"""SQLite (stdlib) backend: WAL, synchronous=FULL, one owner per file, read-only followers.

Errors are classed on the SQLite (extended) result code alone, never on the message: busy,
locked, plain I/O, full, no memory, interrupt and cannot-open are transient; corrupt,
not-a-database and the damaged-data I/O codes are corrupt; read-only and an error without a code
are permanent. The file is never rewritten to repair it.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from persistence.errors import (
    CorruptStateError,
    PersistenceError,
    TransientError,
)
from persistence.limits import Limits
from persistence.lock import OwnerLock, normalise
from persistence.protocol import BackendCapabilities
from persistence.rows import Row
from persistence.schema import TABLES
from persistence.sql_backend import SqlBackend
from persistence.sql_store import SqlStore
from persistence.state import SCHEMA_VERSION
from persistence.structure import Column

#: Primary result codes of faults that may clear up: busy, locked, the lock protocol, plain
#: I/O, no memory, interrupted, disk full, cannot open (the extended codes share them).
_TRANSIENT = frozenset(
    {
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
        sqlite3.SQLITE_PROTOCOL,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_NOMEM,
        sqlite3.SQLITE_INTERRUPT,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_CANTOPEN,
    }
)
#: Extended I/O codes that report damaged data (a page checksum, a corrupt file system): the
#: file is not trusted, and retrying does not repair it.
_CORRUPT_IO = frozenset({sqlite3.SQLITE_IOERR_DATA, sqlite3.SQLITE_IOERR_CORRUPTFS})
_CORRUPT = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_FORMAT})
#: How long a statement waits for a lock held by another connection (followers, checkpoints).
BUSY_TIMEOUT_MS = 5_000
#: The owner's automatic checkpoint threshold in WAL pages (SQLite's automatic checkpoints are
#: PASSIVE: they never wait for a reader and never truncate the WAL).
WAL_AUTOCHECKPOINT_PAGES = 1000
#: How much of a reset WAL (and other journals) SQLite keeps on disk: 64 MiB. A retention bound,
#: not a hard disk limit: a long read keeps the WAL from being recycled.
JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024


def classify(exc: sqlite3.Error) -> PersistenceError:
    """The persistence error class of an `sqlite3` error, by its (extended) result code only.

    An error without a result code (a bare ``OperationalError``, a text that does not decode
    as UTF-8, a closed connection) is not retryable: nothing says trying again could help.
    """
    code = getattr(exc, "sqlite_errorcode", None)
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    message = f"sqlite {name}: {exc}"
    if type(code) is not int:
        return PersistenceError(message)
    primary = code & 0xFF
    if code in _CORRUPT_IO or primary in _CORRUPT:
        return CorruptStateError(message)
    if primary in _TRANSIENT:
        return TransientError(message)
    return PersistenceError(message)  # read-only access among them: not this connection's to fix


def _use_wal(db: sqlite3.Connection, path: Path) -> None:
    mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise TransientError(f"{path}: cannot switch to WAL mode (got {mode})")


def _autoindex(kind: str, name: str, table: str) -> bool:
    """Whether this is an index SQLite made for a key or UNIQUE constraint of ``table``."""
    prefix = f"sqlite_autoindex_{table}_"
    return kind == "index" and name.startswith(prefix) and name[len(prefix) :].isdigit()


class SQLiteStore(SqlStore):
    """Schema v2 on one `sqlite3` connection."""

    backend_name = "sqlite"
    # Rows are inserted in (source, seq) order into an emptied table, so rowid order is that
    # order and costs no sort (a wrong order fails the digest check, it cannot slip through).
    vrp_order = "ORDER BY rowid"

    def __init__(
        self,
        path: str | Path,
        *,
        read_only: bool = False,
        max_page_count: int | None = None,
        limits: Limits | None = None,
        busy_timeout: float = BUSY_TIMEOUT_MS / 1000,
    ) -> None:
        """Remember the settings; the file is opened by `open_sync`."""
        super().__init__(normalise(path), None if read_only else OwnerLock(path), limits)
        self.read_only = read_only
        self.max_page_count = max_page_count
        if not busy_timeout >= 0:
            raise ValueError("busy_timeout must be >= 0")
        #: How long a statement waits for a lock held by another connection, in ms.
        self.busy_timeout_ms = round(busy_timeout * 1000)

    def _conn(self) -> sqlite3.Connection:
        db: sqlite3.Connection = super()._conn()
        return db

    def open_sync(self, now: int) -> None:
        """Lock, connect, check (or create) the schema.

        The owner sets WAL, synchronous=FULL, `WAL_AUTOCHECKPOINT_PAGES` and
        `JOURNAL_SIZE_LIMIT` explicitly; it never runs a TRUNCATE checkpoint itself.
        """
        if self.read_only:
            self._open_reader()
            return
        self._take_ownership()
        try:
            db = sqlite3.connect(
                self.path, isolation_level=None, timeout=self.busy_timeout_ms / 1000
            )
            self._db = db
            self._lock_created_file()
            tables = self._table_names()
            if tables:  # before anything could write to a foreign or damaged file
                self.check_schema(tables)
                self.check_writable()
            _use_wal(db, self.path)
            db.execute("PRAGMA synchronous=FULL")
            db.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
            db.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT}")
            db.execute(f"PRAGMA busy_timeout={self.busy_timeout_ms}")
            if self.max_page_count is not None:
                db.execute(f"PRAGMA max_page_count={int(self.max_page_count)}")
            self.ensure_schema(now)
        except BaseException:
            self.close_sync()
            raise

    def _open_reader(self) -> None:
        if not self.path.exists():
            raise TransientError(f"{self.path} does not exist (yet): the owner creates it")
        uri = f"{self.path.as_uri()}?mode=ro"
        timeout = self.busy_timeout_ms / 1000
        db = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=timeout)
        self._db = db
        try:
            db.execute("PRAGMA query_only=ON")
            db.execute(f"PRAGMA busy_timeout={self.busy_timeout_ms}")
            self.check_schema()
        except BaseException:
            self.close_sync()
            raise

    def _begin(self, *, write: bool) -> None:
        self._conn().execute("BEGIN IMMEDIATE" if write else "BEGIN")

    def _commit(self) -> None:
        self._conn().execute("COMMIT")

    def _rollback(self) -> None:
        with self._interrupt.guarded():
            db = self._db
            if db is not None and db.in_transaction:
                db.execute("ROLLBACK")

    def _insert(self, table: str, columns: Sequence[str], rows: list[Row]) -> None:
        marks = ", ".join("?" * len(columns))
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"  # noqa: S608
        self._conn().executemany(sql, rows)

    def _table_names(self) -> set[str]:
        rows = self._conn().execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        return {str(name) for (name,) in rows.fetchall()}

    def _columns(self, table: str) -> tuple[Column, ...]:
        rows = self._conn().execute(f"PRAGMA table_info({table})").fetchall()
        return tuple((str(r[1]), str(r[2]).upper(), bool(r[3])) for r in rows)

    def _foreign_objects(self) -> list[str]:
        # The indexes SQLite itself makes for the primary keys and UNIQUE constraints
        # (``sqlite_autoindex_<table>_<n>``, a prefix no CREATE INDEX may use) are ours.
        rows = self._conn().execute("SELECT type, name, tbl_name FROM sqlite_master").fetchall()
        return [
            f"{kind} {name}"
            for kind, name, table in rows
            if table not in TABLES
            or not ((kind == "table" and name == table) or _autoindex(kind, name, table))
        ]

    def _integrity_problems(self) -> list[str]:
        # quick_check reads every page and checks each b-tree, not that the key indexes match
        # their tables (integrity_check's extra, slow part): a read's checks cover the rows.
        rows = self._conn().execute("PRAGMA quick_check").fetchall()
        return [] if rows == [("ok",)] else [str(row[0]) for row in rows]

    def translate(self, exc: Exception) -> PersistenceError | None:
        """`classify` for `sqlite3` errors."""
        return classify(exc) if isinstance(exc, sqlite3.Error) else None


#: What the SQLite backend offers.
SQLITE_CAPABILITIES = BackendCapabilities(
    backend_name="sqlite",
    schema_version=SCHEMA_VERSION,
    shared_read=True,
    single_owner=True,
    atomic_commit=True,
)


class SQLiteBackend(SqlBackend):
    """The synchronous SQLite backend; ``read_only`` makes a follower of another owner's file.

    Wrap it in `persistence.backend.ThreadedBackend` to await it from an event loop.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        limits: Limits | None = None,
        busy_timeout: float = BUSY_TIMEOUT_MS / 1000,
        read_only: bool = False,
        max_page_count: int | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """Nothing is opened here; ``limits`` bound what a read builds (default `Limits()`).

        ``busy_timeout``: seconds a statement waits for a lock of another connection.
        """
        store = SQLiteStore(
            path,
            read_only=read_only,
            max_page_count=max_page_count,
            limits=limits,
            busy_timeout=busy_timeout,
        )
        super().__init__(store, SQLITE_CAPABILITIES, wall=wall)
