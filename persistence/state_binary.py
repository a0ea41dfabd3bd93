"""Binary SHA-256 digests of one source record's content and of the sources' evaluation times.

A deterministic length-prefixed serialisation (integers as 9-byte signed big-endian). Neither
is the state digest (that is `persistence.exchange.state_digest`, the SHA-256 of the exchange
document): `source_digest` tells two representations of a source apart in memory (the shared
reader's time anchors), `evaluated_digest` seals the stored ``evaluated_at`` values.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from persistence.deferred import built
from persistence.kinds import kinds_to_mask

if TYPE_CHECKING:
    from persistence.state import SourceRecord

__all__ = ["evaluated_digest", "source_digest"]


def evaluated_digest(sources: Iterable[SourceRecord]) -> bytes:
    """SHA-256 over each source's name and ``evaluated_at``, in the order given (stored order)."""
    h = hashlib.sha256(b"rtr-serve evaluated v1\x00")
    for source in sources:
        _put_str(h, source.name)
        _put_int(h, source.evaluated_at)
    return h.digest()


def _put_int(h: hashlib._Hash, value: int) -> None:
    h.update(value.to_bytes(9, "big", signed=True))


def _put_str(h: hashlib._Hash, value: str) -> None:
    data = value.encode()
    _put_int(h, len(data))
    h.update(data)


def _big_endian(values: Sequence[int]) -> bytes:
    if sys.byteorder == "big":
        return array("q", values).tobytes()
    copy = array("q", built(values))
    copy.byteswap()
    return copy.tobytes()


def _put_opt_str(h: hashlib._Hash, value: str | None) -> None:
    if value is None:
        _put_int(h, -1)
    else:
        _put_str(h, value)


def _put_opt_int(h: hashlib._Hash, value: int | None) -> None:
    h.update(b"\x00" if value is None else b"\x01")
    _put_int(h, 0 if value is None else value)


def _source_fields_digest(h: hashlib._Hash, source: SourceRecord) -> None:
    """The schema-2 source fields: group, protocol, present, flags, afis, duplicates."""
    h.update(b"source fields\x00")
    for value in (
        source.group_id,
        -1 if source.protocol is None else source.protocol,
        kinds_to_mask(source.present),
        int(source.invalidated),
        source.aspa_families,
    ):
        _put_int(h, value)
    afis = source.aspa_afis or bytes(len(source.aspas))
    _put_int(h, len(afis))
    h.update(afis)
    _put_opt_str(h, source.metadata_json)
    _put_int(h, len(source.vrp_duplicates))
    for family, key, expires in source.vrp_duplicates:
        _put_int(h, family)
        _put_int(h, len(key))
        h.update(key)
        _put_int(h, expires)
    _put_int(h, len(source.router_key_duplicates))
    for router_key, expires in source.router_key_duplicates:
        h.update(router_key.sort_key())
        _put_int(h, len(router_key.spki))
        _put_int(h, expires)
    _put_int(h, len(source.aspa_duplicates))
    for aspa, afi, expires in source.aspa_duplicates:
        _put_int(h, aspa.customer)
        _put_int(h, afi)
        _put_int(h, expires)
        _put_int(h, len(aspa.providers))
        h.update(b"".join(p.to_bytes(4, "big") for p in aspa.providers))


def source_digest(source: SourceRecord) -> bytes:
    h = hashlib.sha256(b"source\x00")
    for text in (source.name, source.group, source.kind, source.location):
        _put_str(h, text)
    if source.identity is not None:  # absent in files of before: their digests stay
        h.update(b"identity\x00")
        _put_str(h, source.identity)
    for value in (
        int(source.complete),
        kinds_to_mask(source.capabilities),
        kinds_to_mask(source.selected),
        source.accepted_at,
        source.expires_at,
        -1 if source.rtr_session is None else source.rtr_session,
        -1 if source.rtr_serial is None else source.rtr_serial,
        -1 if source.generated_at is None else source.generated_at,
    ):
        _put_int(h, value)
    for packed, expiries in ((source.v4, source.v4_expires), (source.v6, source.v6_expires)):
        _put_int(h, len(packed))
        h.update(packed)
        h.update(_big_endian(expiries))
    _put_int(h, len(source.router_keys))
    for key, expires in source.router_keys:
        h.update(key.sort_key())
        _put_int(h, len(key.spki))
        _put_int(h, expires)
    _put_int(h, len(source.aspas))
    for aspa, expires in source.aspas:
        _put_int(h, aspa.customer)
        _put_int(h, expires)
        _put_int(h, len(aspa.providers))
        h.update(b"".join(p.to_bytes(4, "big") for p in aspa.providers))
    _source_fields_digest(h, source)
    return h.digest()
