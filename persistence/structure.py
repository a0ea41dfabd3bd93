"""The schema and structure checks of a SQL store: create schema 2, refuse any other file.

`StructureChecks.check_writable` is the owner's check before anything is written: a file that
is not exactly our schema version 2 (foreign or newer schema, other tables, columns, triggers,
views or indexes), fails the database's own integrity check, or whose header (the base of every
commit's compare-and-swap) fails its checks cannot be written safely, and the start refuses it.
"""

from __future__ import annotations

import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

from persistence.errors import CorruptStateError, UnsupportedSchemaError
from persistence.schema import COLUMNS, TABLES, ddl
from persistence.state import SCHEMA_VERSION, StateHeader

__all__ = ["Column", "StructureChecks", "expected_columns"]

#: (name, declared type, NOT NULL) of one column.
Column = tuple[str, str, bool]


def expected_columns() -> dict[str, tuple[Column, ...]]:
    """Table -> its columns in order, as the shared DDL declares them."""
    return {
        table: tuple((n, t.upper(), nn) for n, t, nn in cols) for table, cols in COLUMNS.items()
    }


_EXPECTED = expected_columns()
log = logging.getLogger(__name__)


class StructureChecks(ABC):
    """Schema creation and checks on top of a store's dialect hooks."""

    store_id: str | None
    path: Path
    #: The SQL function giving a BLOB's length in octets (the DDL's one dialect slot).
    blob_length: str
    #: The dialect's spelling of a DDL type where it differs (DuckDB reports TEXT as VARCHAR).
    type_names: dict[str, str] = {}  # noqa: RUF012 - read only

    @abstractmethod
    def _conn(self) -> Any: ...

    @abstractmethod
    def _begin(self, *, write: bool) -> None: ...

    @abstractmethod
    def _commit(self) -> None: ...

    @abstractmethod
    def _rollback(self) -> None: ...

    @abstractmethod
    def _table_names(self) -> set[str]: ...

    @abstractmethod
    def _columns(self, table: str) -> tuple[Column, ...]:
        """The columns of ``table`` as the database reports them (upper-case types)."""

    @abstractmethod
    def _foreign_objects(self) -> list[str]:
        """Schema objects besides our tables (other tables, views, triggers, indexes)."""

    def _integrity_problems(self) -> list[str]:
        """What the database's own integrity check reports (empty: none, or no such check)."""
        return []

    @abstractmethod
    def read_header_sync(self) -> StateHeader | None:
        """The verified header, or None for a store never committed to."""

    def ensure_schema(self, created_at: int) -> None:
        """Create the schema in an empty database; refuse any other schema."""
        tables = self._table_names()
        if not tables:
            self._in_write(self._create, created_at)
            tables = self._table_names()
        self.check_schema(tables)

    def _create(self, created_at: int) -> None:
        for statement in ddl(self.blob_length):
            self._conn().execute(statement)
        self._conn().execute(
            "INSERT INTO schema_info VALUES (1, ?, ?, ?)",
            (SCHEMA_VERSION, uuid.uuid4().hex, created_at),
        )

    def _in_write(self, fn: Callable[..., object], *args: Any) -> None:
        """``fn(*args)`` in one write transaction (rolled back on any error)."""
        self._begin(write=True)
        try:
            fn(*args)
            self._commit()
        except BaseException:
            self._rollback()
            raise

    def check_schema(self, tables: set[str] | None = None) -> None:
        """Refuse a database whose schema is not version 2 of ours (the tables and version)."""
        tables = self._table_names() if tables is None else tables
        if "schema_info" not in tables:
            raise UnsupportedSchemaError(
                f"not an rtr-serve state database (tables: {', '.join(sorted(tables))})"
            )
        if "header" in tables and "store_meta" not in tables:
            raise UnsupportedSchemaError(
                f"{self.path} has the header table of an earlier rtr-serve layout, not schema "
                "version 2's store_meta: it is neither migrated nor wiped; keep it, and point "
                "the state file setting at a new empty file (the state resynchronises from the "
                "network)"
            )
        rows = self._conn().execute("SELECT * FROM schema_info").fetchall()
        if len(rows) != 1:
            raise CorruptStateError(f"schema_info holds {len(rows)} rows, not 1")
        if len(rows[0]) != len(COLUMNS["schema_info"]) or rows[0][0] != 1:
            raise UnsupportedSchemaError(
                f"{self.path}: schema_info is not schema version 2's (no singleton = 1 row); "
                "point the state file setting at a new empty file"
            )
        _, version, store_id, _ = rows[0]
        if version != SCHEMA_VERSION:
            raise UnsupportedSchemaError(
                f"schema version {version!r} is not the supported version {SCHEMA_VERSION}; "
                "this build neither migrates nor wipes it"
            )
        missing = set(TABLES) - tables
        if missing:
            raise CorruptStateError(f"schema version 2 without tables {sorted(missing)}")
        self.store_id = str(store_id)

    def check_writable(self) -> None:
        """Refuse (before any write) a file that cannot be written safely; see the module text.

        Run by the owner after `check_schema`; only reads.
        """
        for table, columns in _EXPECTED.items():
            want = tuple((n, self.type_names.get(t, t), nn) for n, t, nn in columns)
            got = self._columns(table)
            if got != want:
                raise UnsupportedSchemaError(
                    f"table {table} has other columns than schema version 2 "
                    f"({', '.join(' '.join(map(str, c)) for c in got)}); it is not written into"
                )
        foreign = self._foreign_objects()
        if foreign:
            raise UnsupportedSchemaError(
                f"objects that are not schema version 2: {', '.join(sorted(foreign))}; "
                "the file is not written into"
            )
        problems = self._integrity_problems()
        if problems:
            raise CorruptStateError(f"integrity check failed: {'; '.join(problems[:3])}")
        try:
            self.read_header_sync()
        except CorruptStateError as exc:  # the class kept (a damaged value stays damaged)
            raise type(exc)(
                f"{exc}: the header every commit is checked against is damaged"
            ) from exc
