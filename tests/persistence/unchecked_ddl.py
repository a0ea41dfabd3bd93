"""Schema 2's tables without their keys and CHECKs (a fixture: rows SQL itself would refuse).

`unchecked_store` creates the current tables and columns but no key or ``CHECK``, so a test can
write out-of-range rows "behind the backend's back" on both backends and see the read's own
range and type checks catch them (the owner's structure check compares columns, not CHECKs).
`old_layout_store` builds a file of our earlier layout (a ``header`` table): refused at open.
"""

from __future__ import annotations

from pathlib import Path

from persistence.schema import COLUMNS, TABLES
from tests.persistence.helpers import raw

__all__ = ["UNCHECKED_DDL", "old_layout_store", "unchecked_store"]


def _create(table: str) -> str:
    lines = [f"{name} {kind}{' NOT NULL' if nn else ''}" for name, kind, nn in COLUMNS[table]]
    return f"CREATE TABLE {table} ({', '.join(lines)})"


UNCHECKED_DDL = tuple(_create(table) for table in TABLES)


def unchecked_store(kind: str, path: Path, store_id: str = "e" * 32) -> None:
    """Create an empty schema-2 store at ``path`` with `UNCHECKED_DDL`."""
    with raw(kind, path) as db:
        for statement in UNCHECKED_DDL:
            db.execute(statement)
        db.execute("INSERT INTO schema_info VALUES (1, ?, ?, ?)", (2, store_id, 0))


#: The first tables of our earlier layout, as far as the refusal looks (``schema_info`` without
#: ``singleton``, a ``header`` table).
OLD_LAYOUT_DDL = (
    (
        "CREATE TABLE schema_info (schema_version INTEGER NOT NULL, store_id TEXT NOT NULL,"
        " created_at BIGINT NOT NULL)"
    ),
    (
        "CREATE TABLE header (schema_version INTEGER NOT NULL, store_id TEXT NOT NULL,"
        " epoch BIGINT NOT NULL, generation BIGINT NOT NULL, header_digest BLOB NOT NULL)"
    ),
    "CREATE TABLE sources (source_id INTEGER NOT NULL, name TEXT NOT NULL)",
)


def old_layout_store(kind: str, path: Path, store_id: str = "e" * 32) -> None:
    """Create a file of the earlier layout at ``path`` (schema version 2 in its schema_info)."""
    with raw(kind, path) as db:
        for statement in OLD_LAYOUT_DDL:
            db.execute(statement)
        db.execute("INSERT INTO schema_info VALUES (?, ?, ?)", (2, store_id, 0))
