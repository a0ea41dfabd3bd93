"""Row helpers of the SQL store: batching, VRP rows, strict value types.

Pure conversions between `PersistedState` parts and database rows; no connection, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from persistence.state import SourceRecord
from snapshot.model import Aspa
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
    """The VRP rows of source ``sid``: IPv4, IPv6, then the duplicate supports.

    ``support_id`` counts from 0 across all of them (one VRP payload family).
    """
    support = 0
    for family, keys, expires, unpack in (
        (4, source.v4, source.v4_expires, V4.fields.iter_unpack),
        (6, source.v6, source.v6_expires, V6.fields.iter_unpack),
    ):
        for (net, max_len, plen, asn), exp in zip(unpack(keys), expires, strict=True):
            yield (sid, support, family, net, plen, max_len, asn, exp)
            support += 1
    for family, key, exp in source.vrp_duplicates:
        net, max_len, plen, asn = (V4 if family == 4 else V6).fields.unpack(key)
        yield (sid, support, family, net, plen, max_len, asn, exp)
        support += 1


def router_key_rows(sid: int, source: SourceRecord) -> Iterator[Row]:
    """The router key rows of source ``sid``, the duplicate supports after the keys."""
    keys = (*source.router_keys, *source.router_key_duplicates)
    for support, (key, exp) in enumerate(keys):
        yield (sid, support, key.ski, key.asn, key.spki, exp)


def _aspa_supports(source: SourceRecord) -> Iterator[tuple[Aspa, int, int]]:
    """(ASPA, afi, expiry) of every ASPA support, the duplicates after the records."""
    for index, (aspa, exp) in enumerate(source.aspas):
        yield aspa, source.afi_of(index), exp
    yield from source.aspa_duplicates


def aspa_rows(sid: int, source: SourceRecord) -> Iterator[Row]:
    """The ``aspas`` rows of source ``sid`` (customer, afi, expiry per support)."""
    for support, (aspa, afi, exp) in enumerate(_aspa_supports(source)):
        yield (sid, support, aspa.customer, afi, exp)


def provider_rows(sid: int, source: SourceRecord) -> Iterator[Row]:
    """The ``aspa_providers`` rows of source ``sid``: each support's providers in order."""
    for support, (aspa, _, _) in enumerate(_aspa_supports(source)):
        for idx, provider in enumerate(aspa.providers):
            yield (sid, support, idx, provider)


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
