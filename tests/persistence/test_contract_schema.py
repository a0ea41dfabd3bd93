"""P-23/P-26/P-28/P-29/P-54 on real files: the DDL's keys and CHECKs, the header, old layouts.

The DDL refuses out-of-range and duplicate rows in SQL itself (both backends); a file of the
same tables without keys or CHECKs (`UNCHECKED_DDL`) is still read and committed to, and rows
written into it behind the backend's back are caught by the read's own checks. A file of our
earlier layout (a ``header`` table) is refused untouched.
"""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from persistence.backend import ThreadedBackend
from persistence.errors import (
    CorruptStateError,
    DamagedStateError,
    UnsupportedSchemaError,
)
from persistence.exchange_values import ExchangeFormatError
from persistence.meta_digest import publication_digest
from persistence.sqlite_backend import SQLiteBackend
from persistence.state import StateId
from tests.persistence.helpers import KINDS, make, opened, raw
from tests.persistence.states import assert_same_state, make_state
from tests.persistence.test_contract import (
    RANGE_TAMPERS,
    SQL_REFUSED,
    committed,
)
from tests.persistence.unchecked_ddl import old_layout_store
from tests.persistence.unchecked_ddl import unchecked_store as legacy_store

pytestmark = pytest.mark.anyio

#: Rows the current DDL refuses (out of range, duplicate key or name), with the kinds they apply
#: to: a text where a BLOB belongs only exists in SQLite (DuckDB casts or refuses it by type).
HEADER_REFUSED = (
    "UPDATE publication SET session_v0 = 65536",
    "UPDATE publication SET session_v2 = -1",
    "UPDATE publication SET serial = 4294967296",
    "UPDATE publication SET recovered_from_epoch = 3",
    "UPDATE publication SET singleton = 2",
    "INSERT INTO publication SELECT * FROM publication",
    "UPDATE store_meta SET singleton = 2",
    "UPDATE store_meta SET schema_version = 3",
    "UPDATE store_meta SET mode = 'later'",
    "UPDATE store_meta SET upstream_epoch = 1",
    "UPDATE schema_info SET singleton = 2",
    "UPDATE schema_info SET schema_version = 1",
    "UPDATE aspas SET afi = 3",
    "UPDATE sources SET protocol = 3",
    "UPDATE sources SET present = 8",
    "UPDATE sources SET invalidated = 2",
    "UPDATE sources SET aspa_families = 4",
    "UPDATE groups SET kinds = 8",
    "INSERT INTO groups VALUES (9, 'primary', 1)",
    "UPDATE active_groups SET kind = 'aspa_v5' WHERE kind = 'vrp'",
    "INSERT INTO active_groups VALUES ('vrp', 1)",
    "INSERT INTO vrps SELECT * FROM vrps WHERE source_id = 0 AND support_id = 0",
)
REFUSED: list[Any] = [
    pytest.param(kind, sql, args, id=f"{kind}-{sql}")
    for kind in KINDS
    for sql, args in [*RANGE_TAMPERS, *((sql, ()) for sql in (*SQL_REFUSED, *HEADER_REFUSED))]
    if kind == "sqlite" or ("'abcd'" not in sql and "'twenty" not in sql)
]


def integrity_errors() -> tuple[type[Exception], ...]:
    """The drivers' errors for a violated constraint."""
    import duckdb

    return (sqlite3.IntegrityError, duckdb.ConstraintException)


@pytest.mark.parametrize(("kind", "sql", "args"), REFUSED)
async def test_the_ddl_refuses_what_no_commit_writes(
    kind: str, sql: str, args: tuple[object, ...], tmp_path: Path
) -> None:
    path = tmp_path / "state.db"
    await committed(kind, path)
    async with opened(kind, path) as backend:
        before = await backend.read_state()
    assert before is not None
    with raw(kind, path) as db, pytest.raises(integrity_errors(), match=r"(?i)constraint"):
        db.execute(sql, args) if args else db.execute(sql)
    async with opened(kind, path) as backend:
        after = await backend.read_state()
    assert after is not None
    assert after[0] == before[0]
    assert_same_state(after[1], before[1])


@pytest.mark.parametrize("kind", KINDS)
async def test_the_ddl_refuses_an_out_of_range_commit(kind: str, tmp_path: Path) -> None:
    """A session id beyond 16 bits is refused before any row is written, naming the field.

    The state digest (its exchange document) checks every value first; SQL's own refusal of
    such a row is `test_the_ddl_refuses_what_no_commit_writes`.
    """
    path = tmp_path / "state.db"
    async with opened(kind, path) as backend:
        assert backend.store_id is not None
        state = make_state(backend.store_id, StateId(1, 1))
        http, rtr, empty = state.sources
        bad = replace(state, sources=(http, replace(rtr, rtr_session=70_000), empty))
        with pytest.raises(ExchangeFormatError, match="rtr_session"):
            await backend.commit(bad, None)
        assert await backend.read_state() is None  # nothing was written
        await backend.commit(state, None)


# ---------------------------------------------------------------- files of the first DDL


async def forge_header(kind: str, path: Path, **changes: Any) -> None:
    """Change header fields of a closed store and re-sign its header digest."""
    async with opened(kind, path) as backend:
        header = await backend.read_header()
    assert header is not None
    forged = replace(header, **changes)
    columns = {"serial": forged.serial}
    columns.update(zip(("session_v0", "session_v1", "session_v2"), forged.session_ids, strict=True))
    sets = ", ".join(f"{name} = ?" for name in columns)
    with raw(kind, path) as db:
        db.execute(
            f"UPDATE publication SET {sets}, publication_digest = ?",
            [*columns.values(), publication_digest(forged)],
        )


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "changes",
    [
        {"session_ids": (65536, 1, 2)},
        {"session_ids": (1, -1, 2)},
        {"serial": 4294967296},
        {"serial": -1},
    ],
    ids=["session-65536", "session-minus-1", "serial-2^32", "serial-minus-1"],
)
async def test_an_out_of_range_header_is_damaged(
    kind: str, changes: dict[str, Any], tmp_path: Path
) -> None:
    """Re-signed behind the backend's back in a file of the first DDL: damaged, not served."""
    path = tmp_path / "state.db"
    legacy_store(kind, path)
    await committed(kind, path)
    await forge_header(kind, path, **changes)
    before = await anyio.Path(path).read_bytes()
    backend = make(kind, path)
    with pytest.raises(DamagedStateError, match="out of range"):
        await backend.open()  # the owner refuses a damaged header at open (P-51)
    assert await backend.close()
    if kind == "sqlite":
        reader = ThreadedBackend(SQLiteBackend(path, read_only=True))
        await reader.open()
        try:
            with pytest.raises(DamagedStateError, match="out of range"):
                await reader.read_header()
            with pytest.raises(DamagedStateError, match="out of range"):
                await reader.read_state()
        finally:
            assert await reader.close()
    assert await anyio.Path(path).read_bytes() == before


def table_sql(kind: str, path: Path) -> str:
    """The stored DDL of the vrps table (SQLite) or its constraints (DuckDB), as text."""
    with raw(kind, path) as db:
        if kind == "sqlite":
            (sql,) = db.execute("SELECT sql FROM sqlite_master WHERE name = 'vrps'").fetchone()
        else:
            (sql,) = db.execute(
                "SELECT sql FROM duckdb_tables() WHERE table_name = 'vrps'"
            ).fetchone()
        return str(sql)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_file_without_the_checks_reads_and_is_committed_to(
    kind: str, tmp_path: Path
) -> None:
    """The owner's structure check compares columns, not CHECKs: such a file is used as is."""
    path = tmp_path / "state.db"
    legacy_store(kind, path)
    assert "CHECK" not in table_sql(kind, path)
    first = await committed(kind, path)
    async with opened(kind, path) as backend:
        assert backend.store_id == "e" * 32
        result = await backend.read_state()
        assert result is not None
        assert result[1].state_id == first
        newer = replace(make_state(backend.store_id, StateId(2, 1)), recovered_from=first)
        await backend.commit(newer, first)
    async with opened(kind, path) as backend:
        result = await backend.read_state()
    assert result is not None
    assert result[0].recovered_from == result[1].recovered_from == first
    assert_same_state(result[1], newer)
    assert "CHECK" not in table_sql(kind, path)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_file_of_the_earlier_layout_is_refused_untouched(kind: str, tmp_path: Path) -> None:
    """A ``header`` table of before schema 2's ``store_meta``: no migration, a clear refusal."""
    path = tmp_path / "state.db"
    old_layout_store(kind, path)
    before = await anyio.Path(path).read_bytes()
    backend = make(kind, path)
    with pytest.raises(UnsupportedSchemaError, match="earlier rtr-serve layout") as caught:
        await backend.open()
    assert str(path.name) in str(caught.value)
    assert "new empty file" in str(caught.value)
    assert await backend.close()
    assert await anyio.Path(path).read_bytes() == before


# ---------------------------------------------------------------- P-28: no header, no payload

HEADERLESS_ROWS = {
    "sources": (
        "INSERT INTO sources VALUES (0, 'a', 0, 'g', 'file', '/x', 1, 1, 1, 1, 0, NULL, 0, 0, 0,"
        " NULL, NULL, NULL, 0, NULL, NULL, 0, 0, 0)"
    ),
    "vrps": "INSERT INTO vrps VALUES (0, 0, 4, ?, 8, 8, 64496, 0)",
    "aspa_providers": "INSERT INTO aspa_providers VALUES (0, 0, 0, 64496)",
    "groups": "INSERT INTO groups VALUES (0, 'g', 1)",
    "active_groups": "INSERT INTO active_groups VALUES ('vrp', 0)",
    "publication": (
        "INSERT INTO publication VALUES (1, 1, 0, 0, 0, 0, ?, NULL, NULL, NULL, X'00')"
    ),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("table", sorted(HEADERLESS_ROWS))
async def test_payload_rows_without_a_header_are_damaged(
    kind: str, table: str, tmp_path: Path
) -> None:
    path = tmp_path / "state.db"
    async with opened(kind, path) as backend:
        assert await backend.read_state() is None
    sql = HEADERLESS_ROWS[table]
    with raw(kind, path) as db:
        db.execute(sql, [bytes(4)]) if "?" in sql else db.execute(sql)
    before = await anyio.Path(path).read_bytes()
    backend = make(kind, path)
    with pytest.raises(DamagedStateError, match=f"no header, but the {table} table"):
        await backend.open()
    assert await backend.close()
    if kind == "sqlite":
        reader = ThreadedBackend(SQLiteBackend(path, read_only=True))
        await reader.open()
        try:
            with pytest.raises(DamagedStateError, match="no header"):
                await reader.read_state()
        finally:
            assert await reader.close()
    assert await anyio.Path(path).read_bytes() == before


# ---------------------------------------------------------------- P-54: recovered_from


@pytest.mark.parametrize("kind", KINDS)
async def test_recovered_from_round_trips_and_is_signed(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    async with opened(kind, path) as backend:
        assert backend.store_id is not None
        state = replace(make_state(backend.store_id, StateId(5, 1)), recovered_from=StateId(4, 9))
        await backend.commit(state, None)
        # The same state again is an idempotent retry, recovered_from included.
        assert (await backend.commit(state, None)).retried
    async with opened(kind, path) as backend:
        result = await backend.read_state()
    assert result is not None
    header, read = result
    assert header.recovered_from == read.recovered_from == StateId(4, 9)
    assert_same_state(read, state)
    with raw(kind, path) as db:
        row = db.execute("SELECT recovered_from_epoch, recovered_from_generation FROM publication")
        assert row.fetchall() == [(4, 9)]
        db.execute("UPDATE publication SET recovered_from_generation = 8")
    backend = make(kind, path)
    with pytest.raises(CorruptStateError, match="publication_digest"):
        await backend.open()
    assert await backend.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_half_a_recovered_from_in_a_file_without_the_checks_is_corrupt(
    kind: str, tmp_path: Path
) -> None:
    path = tmp_path / "state.db"
    legacy_store(kind, path)
    await committed(kind, path)
    with raw(kind, path) as db:
        db.execute("UPDATE publication SET recovered_from_epoch = 3")
    backend = make(kind, path)
    with pytest.raises(CorruptStateError, match="stored together"):
        await backend.open()
    assert await backend.close()
