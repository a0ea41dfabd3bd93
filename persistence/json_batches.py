"""One batch of strictly typed rows as one JSON parameter (DuckDB's write path, contract P-31).

A batch (at most `persistence.rows.BATCH` rows) is encoded as a JSON array of row arrays:
integers as JSON numbers (read back as text and CAST, so no value passes through a float),
text as JSON strings, binary as lowercase hex strings, NULL as ``null``. Batches are split
further at a 1 MiB encoded target; a single row larger than that goes alone. `insert_sql` reads
the parameter through the built-in ``json_each`` with an explicit ``CAST`` per column
(``unhex`` for binary), so no extension is loaded or installed and neither Arrow nor Pandas is
needed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

from persistence.rows import Row

__all__ = ["BUFFER_TARGET", "encode_row", "insert_sql", "json_batches"]

#: The encoded size a JSON parameter is split at.
BUFFER_TARGET = 1 << 20


def _value(value: object) -> str:
    if value is None:
        return "null"
    if type(value) is int:
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bytes | bytearray | memoryview):
        return f'"{bytes(value).hex()}"'
    raise TypeError(f"a row value of type {type(value).__name__}")


def encode_row(row: Row) -> str:
    """One row as a JSON array (see the module text); `TypeError` for any other value type."""
    return "[" + ",".join(map(_value, row)) + "]"


def json_batches(rows: Sequence[Row], target: int = BUFFER_TARGET) -> Iterator[str]:
    """The JSON parameters of ``rows``, each at most ``target`` octets unless one row is larger."""
    parts: list[str] = []
    size = 2
    for row in rows:
        encoded = encode_row(row)
        octets = len(encoded.encode()) + 1
        if parts and size + octets > target:
            yield "[" + ",".join(parts) + "]"
            parts, size = [], 2
        parts.append(encoded)
        size += octets
    if parts:
        yield "[" + ",".join(parts) + "]"


def insert_sql(table: str, columns: Sequence[str], types: Sequence[str]) -> str:
    """``INSERT`` of one JSON parameter's rows into ``columns`` of declared ``types``."""
    casts = [
        f"unhex(value->>{i})" if kind == "BLOB" else f"CAST(value->>{i} AS {kind})"
        for i, kind in enumerate(types)
    ]
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) "  # noqa: S608 - fixed names
        f"SELECT {', '.join(casts)} FROM json_each($1)"
    )
