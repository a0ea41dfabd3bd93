"""P-31: DuckDB writes a batch as one JSON parameter through json_each with explicit CASTs.

The encoding is exact (int64 extremes, binary as hex, NULL, any text), a batch splits at the
1 MiB target with an oversized row alone, other value types are refused, and the path runs
with external access, extension autoload and install disabled.
"""

from __future__ import annotations

import json

import duckdb
import pytest

from persistence.json_batches import BUFFER_TARGET, encode_row, insert_sql, json_batches

NEVER = (1 << 63) - 1


def connection() -> duckdb.DuckDBPyConnection:
    return duckdb.connect(
        ":memory:",
        config={
            "threads": 1,
            "enable_external_access": False,
            "autoload_known_extensions": False,
            "autoinstall_known_extensions": False,
        },
    )


def test_values_go_through_exactly() -> None:
    db = connection()
    db.execute("CREATE TABLE t (a BIGINT, b BLOB, c TEXT, d SMALLINT)")
    rows = [
        (NEVER, b"\x00\xff" * 10, 'ä"\\\n\x00x', 2),
        (-(1 << 63), b"", "", None),
        (4294967295, None, None, 0),
    ]
    sql = insert_sql("t", ["a", "b", "c", "d"], ["BIGINT", "BLOB", "TEXT", "SMALLINT"])
    for parameter in json_batches(rows):
        db.execute(sql, [parameter])
    got = db.execute("SELECT * FROM t ORDER BY a").fetchall()
    assert got == sorted(rows, key=lambda r: r[0])


def test_a_batch_splits_at_the_target_and_a_large_row_goes_alone() -> None:
    small = (1, b"\x01" * 100)
    large = (2, b"\x02" * (BUFFER_TARGET // 2 + 10))  # hex doubles it: beyond the target
    parts = list(json_batches([small, small, large, small]))
    assert [len(json.loads(p)) for p in parts] == [2, 1, 1]
    assert all(len(p.encode()) <= BUFFER_TARGET for p in (parts[0], parts[2]))
    assert len(parts[1].encode()) > BUFFER_TARGET
    assert list(json_batches([])) == []


@pytest.mark.parametrize("value", [1.5, True, object()])
def test_other_value_types_are_refused(value: object) -> None:
    with pytest.raises(TypeError):
        encode_row((value,))
