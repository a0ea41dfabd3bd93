"""Driver errors classed as the persistence contract says: retryable, permanent or corrupt.

SQLite by its (extended) result code only, DuckDB by its exception type only; real errors where
a real file can provoke them, constructed driver exceptions for the rest.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import duckdb
import pytest

from persistence import duckdb_backend, sqlite_backend
from persistence.backend import ThreadedBackend
from persistence.errors import (
    CorruptStateError,
    PersistenceError,
    TransientError,
)
from persistence.sqlite_backend import SQLiteBackend, SQLiteStore
from persistence.state import StateId
from tests.persistence.helpers import make, opened, raw, sql_store
from tests.persistence.states import crash_state, make_state

pytestmark = pytest.mark.anyio

FAILED = "persistence_failed"
CORRUPT = "persistence_corrupt"
#: (error class, retryable, code) of each outcome.
RETRY = (TransientError, True, FAILED)
FAIL = (PersistenceError, False, FAILED)
BROKEN = (CorruptStateError, False, CORRUPT)

SQLITE_CODES: list[tuple[str, tuple[type[PersistenceError], bool, str]]] = [
    ("SQLITE_BUSY", RETRY),
    ("SQLITE_BUSY_RECOVERY", RETRY),
    ("SQLITE_BUSY_SNAPSHOT", RETRY),
    ("SQLITE_BUSY_TIMEOUT", RETRY),
    ("SQLITE_LOCKED", RETRY),
    ("SQLITE_LOCKED_SHAREDCACHE", RETRY),
    ("SQLITE_PROTOCOL", RETRY),
    ("SQLITE_IOERR", RETRY),
    ("SQLITE_IOERR_READ", RETRY),
    ("SQLITE_IOERR_SHORT_READ", RETRY),
    ("SQLITE_IOERR_WRITE", RETRY),
    ("SQLITE_IOERR_FSYNC", RETRY),
    ("SQLITE_IOERR_LOCK", RETRY),
    ("SQLITE_IOERR_SHMLOCK", RETRY),
    ("SQLITE_IOERR_NOMEM", RETRY),
    ("SQLITE_NOMEM", RETRY),
    ("SQLITE_INTERRUPT", RETRY),
    ("SQLITE_FULL", RETRY),
    ("SQLITE_CANTOPEN", RETRY),
    ("SQLITE_CANTOPEN_ISDIR", RETRY),
    # Damaged data: never retryable, never "just I/O".
    ("SQLITE_IOERR_DATA", BROKEN),
    ("SQLITE_IOERR_CORRUPTFS", BROKEN),
    ("SQLITE_CORRUPT", BROKEN),
    ("SQLITE_CORRUPT_INDEX", BROKEN),
    ("SQLITE_NOTADB", BROKEN),
    # Read-only access is not this connection's to fix; the rest are no faults of the moment.
    ("SQLITE_READONLY", FAIL),
    ("SQLITE_READONLY_DBMOVED", FAIL),
    ("SQLITE_READONLY_CANTLOCK", FAIL),
    ("SQLITE_CONSTRAINT", FAIL),
    ("SQLITE_ERROR", FAIL),
    ("SQLITE_MISUSE", FAIL),
]


def check(error: PersistenceError, want: tuple[type[PersistenceError], bool, str]) -> None:
    """``error`` is exactly of the wanted class, retryability and code."""
    cls, retryable, code = want
    assert type(error) is cls, repr(error)
    assert error.retryable is retryable
    assert getattr(error, "code", None) == code


def test_the_numeric_extended_codes() -> None:
    """The damaged-data I/O codes are the ones SQLite documents (IOERR | 32<<8, | 33<<8)."""
    assert sqlite3.SQLITE_IOERR_DATA == 8202 == sqlite3.SQLITE_IOERR | 32 << 8
    assert sqlite3.SQLITE_IOERR_CORRUPTFS == 8458 == sqlite3.SQLITE_IOERR | 33 << 8


@pytest.mark.parametrize(("name", "want"), SQLITE_CODES, ids=[n for n, _ in SQLITE_CODES])
@pytest.mark.parametrize("error_type", [sqlite3.OperationalError, sqlite3.DatabaseError])
def test_sqlite_result_codes(
    name: str, want: tuple[type[PersistenceError], bool, str], error_type: type[sqlite3.Error]
) -> None:
    exc = error_type("the message does not matter")
    exc.sqlite_errorcode = getattr(sqlite3, name)
    exc.sqlite_errorname = name
    check(sqlite_backend.classify(exc), want)


@pytest.mark.parametrize(
    "exc",
    [
        sqlite3.OperationalError("database is locked"),  # the text alone proves nothing
        sqlite3.OperationalError("disk I/O error"),
        sqlite3.OperationalError("Could not decode to UTF-8 column 'name' with text 'x'"),
        sqlite3.DatabaseError("file is not a database"),
        sqlite3.ProgrammingError("Cannot operate on a closed database."),
        sqlite3.InterfaceError("bad parameter"),
    ],
    ids=repr,
)
def test_sqlite_errors_without_a_code_are_permanent(exc: sqlite3.Error) -> None:
    assert getattr(exc, "sqlite_errorcode", None) is None
    check(sqlite_backend.classify(exc), FAIL)


DUCKDB_TYPES: list[tuple[type[Exception], tuple[type[PersistenceError], bool, str]]] = [
    (duckdb.OutOfMemoryException, RETRY),
    (duckdb.TransactionException, RETRY),
    (duckdb.InterruptException, RETRY),
    (duckdb.SerializationException, BROKEN),
    # A failed block checksum and other I/O faults share this type: permanent, not "corrupt".
    (duckdb.IOException, FAIL),
    (duckdb.HTTPException, FAIL),
    (duckdb.ConnectionException, FAIL),  # a closed connection
    (duckdb.FatalException, FAIL),  # an invalidated database
    (duckdb.InvalidInputException, FAIL),
    (duckdb.CatalogException, FAIL),
    (duckdb.ConstraintException, FAIL),
    (duckdb.OperationalError, FAIL),
    (duckdb.Error, FAIL),
]


@pytest.mark.parametrize(
    ("error_type", "want"), DUCKDB_TYPES, ids=[t.__name__ for t, _ in DUCKDB_TYPES]
)
@pytest.mark.parametrize("text", ["x", "Could not set lock on file", "Corrupt block"])
def test_duckdb_exception_types(
    error_type: type[Exception], want: tuple[type[PersistenceError], bool, str], text: str
) -> None:
    check(duckdb_backend.classify(error_type(text)), want)


# ---------------------------------------------------------------- through a store's call


class MarkerError(BaseException):
    """A control-flow exception that is not an `Exception`."""


@pytest.mark.parametrize(
    ("exc", "want"),
    [
        (OSError(5, "Input/output error"), RETRY),
        (FileNotFoundError(2, "gone"), RETRY),
        (MemoryError(), RETRY),
    ],
    ids=repr,
)
def test_system_errors_are_transient(
    exc: Exception, want: tuple[type[PersistenceError], bool, str], tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "state.db")

    def fail() -> None:
        raise exc

    with pytest.raises(PersistenceError) as caught:
        store.call(fail)
    check(caught.value, want)
    assert caught.value.__cause__ is exc


@pytest.mark.parametrize(
    "exc",
    [AssertionError("an internal check"), KeyboardInterrupt(), MarkerError(), ValueError("bug")],
    ids=repr,
)
def test_assertions_and_control_flow_propagate_unchanged(
    exc: BaseException, tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "state.db")

    def fail() -> None:
        raise exc

    with pytest.raises(type(exc)) as caught:
        store.call(fail)
    assert caught.value is exc


# ---------------------------------------------------------------- real errors on real files


async def test_sqlite_damaged_pages_are_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    async with opened("sqlite", path) as backend:
        assert backend.store_id is not None
        await backend.commit(crash_state(backend.store_id, StateId(1, 1), 20_000), None)
    size = path.stat().st_size
    data = bytearray(await anyio.Path(path).read_bytes())
    middle = size // 4096 // 2 * 4096
    data[middle : middle + 4 * 4096] = b"\xff" * (4 * 4096)
    await anyio.Path(path).write_bytes(bytes(data))
    owner = make("sqlite", path)
    with pytest.raises(CorruptStateError):
        await owner.open()  # the owner's integrity check refuses the file (P-51)
    assert await owner.close()
    # A read-only follower runs no integrity check: its read meets the damaged pages.
    backend = ThreadedBackend(SQLiteBackend(path, read_only=True))
    await backend.open()
    try:
        assert await backend.read_header() is not None  # the header page is intact
        with pytest.raises(PersistenceError) as caught:
            await backend.read_state()
    finally:
        assert await backend.close()
    check(caught.value, BROKEN)
    assert caught.value.__cause__ is not None
    assert getattr(caught.value.__cause__, "sqlite_errorcode", None) == sqlite3.SQLITE_CORRUPT
    assert await anyio.Path(path).read_bytes() == bytes(data)  # left as it was


async def test_sqlite_text_that_does_not_decode_is_permanent(tmp_path: Path) -> None:
    """A bare OperationalError (no result code) from a real read: not retryable."""
    path = tmp_path / "state.db"
    async with opened("sqlite", path) as backend:
        assert backend.store_id is not None
        await backend.commit(make_state(backend.store_id, StateId(1, 1)), None)
    with raw("sqlite", path) as db:
        db.execute("UPDATE sources SET location = CAST(X'FF' AS TEXT) WHERE source_id = 0")
    async with opened("sqlite", path) as backend:
        with pytest.raises(PersistenceError) as caught:
            await backend.read_state()
    check(caught.value, FAIL)
    assert type(caught.value.__cause__) is sqlite3.OperationalError


async def test_sqlite_follower_write_is_permanent(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    async with opened("sqlite", path) as owner:
        assert owner.store_id is not None
        follower = ThreadedBackend(SQLiteBackend(path, read_only=True))
        await follower.open()
        try:
            with pytest.raises(PersistenceError) as caught:
                await follower.commit(make_state(owner.store_id, StateId(1, 1)), None)
        finally:
            assert await follower.close()
        check(caught.value, FAIL)
        code = getattr(caught.value.__cause__, "sqlite_errorcode", None)
        assert code is not None
        assert code & 0xFF == sqlite3.SQLITE_READONLY
        assert await owner.read_header() is None


async def test_sqlite_disk_full_is_transient(tmp_path: Path) -> None:
    backend = ThreadedBackend(SQLiteBackend(tmp_path / "state.db", max_page_count=48))
    await backend.open()
    try:
        assert backend.store_id is not None
        with pytest.raises(PersistenceError) as caught:
            await backend.commit(crash_state(backend.store_id, StateId(1, 1), 20_000), None)
        check(caught.value, RETRY)
        assert getattr(caught.value.__cause__, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
        assert await backend.read_header() is None
    finally:
        assert await backend.close()


async def open_error(kind: str, path: Path) -> PersistenceError:
    """The error opening ``path`` as owner gives."""
    backend = make(kind, path)
    try:
        with pytest.raises(PersistenceError) as caught:
            await backend.open()
    finally:
        assert await backend.close()
    return caught.value


async def test_duckdb_not_a_database_is_permanent_not_corrupt(tmp_path: Path) -> None:
    """DuckDB reports a foreign file with its generic IOException: no guess at corruption."""
    path = tmp_path / "state.duckdb"
    await anyio.Path(path).write_bytes(b"not a duckdb file\n" * 500)
    error = await open_error("duckdb", path)
    check(error, FAIL)
    assert type(error.__cause__) is duckdb.IOException


async def test_duckdb_closed_connection_is_permanent(tmp_path: Path) -> None:
    async with opened("duckdb", tmp_path / "state.duckdb") as backend:
        store: Any = sql_store(backend)
        await backend._worker.run(store._conn().close)  # the connection is gone underneath
        with pytest.raises(PersistenceError) as caught:
            await backend.read_header()
        check(caught.value, FAIL)
        assert type(caught.value.__cause__) is duckdb.ConnectionException
