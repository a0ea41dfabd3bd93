"""Row helpers of the SQL store: batching, VRP rows, strict value types.

Pure conversions between `PersistedState` parts and database rows; no connection, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from persistence.state import SourceRecord
from snapshot.packed import V4, V6

#: Rows per insert or fetch batch.
BATCH = 256
Row = tuple[Any, ...]


def batches(rows: Iterator[Row], size: int = BATCH) -> Iterator[list[Row]]:
    """Consecutive lists of at most ``size`` rows."""
    batch: list[Row] = []
    for row in rows:
        batch.append(row)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def vrp_rows(sid: int, source: SourceRecord) -> Iterator[Row]:
    """The VRP rows of source ``sid``: IPv4 then IPv6, ``seq`` counting across both."""
    seq = 0
    for family, keys, expires, unpack in (
        (4, source.v4, source.v4_expires, V4.fields.iter_unpack),
        (6, source.v6, source.v6_expires, V6.fields.iter_unpack),
    ):
        for (net, max_len, plen, asn), exp in zip(unpack(keys), expires, strict=True):
            yield (sid, family, seq, net, plen, max_len, asn, exp)
            seq += 1


def as_int(value: object) -> int:
    """``value`` if it is exactly an int; TypeError otherwise."""
    if type(value) is not int:
        raise TypeError(f"expected an integer, found {type(value).__name__}")
    return value


def as_text(value: object) -> str:
    """``value`` if it is a str; TypeError otherwise."""
    if not isinstance(value, str):
        raise TypeError(f"expected text, found {type(value).__name__}")
    return value


def as_blob(value: object) -> bytes:
    """``value`` as bytes if it is a blob; TypeError otherwise."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise TypeError(f"expected a blob, found {type(value).__name__}")
    return bytes(value)
