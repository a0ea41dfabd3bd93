"""The exchange document's raw records: VRPs, router keys and ASPAs (and their duplicates).

Each record is one JSON array (docs/exchange-format.md). `write_records` writes one list in
stored order; a record whose conservative encoded size is at most `RECORD_FAST_PATH_BYTES`
and whose values the fast path vouches for is formatted in one go, any other (or one that
would exceed the budget) field by field, giving the same bytes and naming the field that fails.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator, Sequence
from typing import cast

from persistence.exchange_values import (
    AFI_TEXT,
    CHUNK_BYTES,
    INT64_MAX,
    INT64_MIN,
    RECORD_FAST_PATH_BYTES,
    ExchangeFormatError,
    Out,
    write_int,
)
from persistence.state import SourceRecord
from snapshot.model import Aspa, RouterKey
from snapshot.packed import V4, V6
from snapshot.prefix_text import v4_text, v6_groups_text, v6_text

__all__ = ["RECORD_MEMBERS", "write_records"]

#: Fast record texts appended at a time.
_BATCH = 512
#: The decimal text of 0..255 (octets, lengths).
_DECIMAL = tuple(str(n) for n in range(256))
#: An IPv4 VRP key as four address octets, max length, prefix length, ASN.
_V4_OCTETS = struct.Struct(">BBBBBBI")
#: An IPv6 VRP key as eight address groups, max length, prefix length, ASN.
_V6_GROUPS = struct.Struct(">8HBBI")
#: The source members that hold raw records, in document order.
RECORD_MEMBERS = frozenset(
    {"vrps", "vrp_duplicates", "router_keys", "router_key_duplicates", "aspas", "aspa_duplicates"}
)


def _prefix(family: int, key: bytes, offset: int, version: int) -> tuple[str, int, int, int]:
    """(prefix text, max length, ASN, prefix length) of the packed key at ``offset``."""
    if family == 4:
        address, max_length, length, asn = V4.numbers.unpack_from(key, offset)
        return f"{v4_text(address)}/{length}", max_length, asn, length
    high, low, max_length, length, asn = V6.numbers.unpack_from(key, offset)
    return (
        f"{v6_text(high << 64 | low, legacy_mapped=version == 1)}/{length}",
        max_length,
        asn,
        length,
    )


def _vrp_batches(source: SourceRecord, version: int) -> Iterator[list[str]]:
    """The VRPs' record texts, IPv4 then IPv6 in stored order, `_BATCH` at a time."""
    o = _DECIMAL
    v4, v4_expires = source.v4, source.v4_expires
    for first in range(0, len(v4_expires), _BATCH):
        keys = _V4_OCTETS.iter_unpack(v4[first * V4.size : (first + _BATCH) * V4.size])
        yield [
            f'["{o[a]}.{o[b]}.{o[c]}.{o[d]}/{o[length]}",{o[max_length]},{asn},{expires}]'
            for (a, b, c, d, max_length, length, asn), expires in zip(
                keys, v4_expires[first : first + _BATCH], strict=True
            )
        ]
    legacy = version == 1
    v6, v6_expires = source.v6, source.v6_expires
    for first in range(0, len(v6_expires), _BATCH):
        keys6 = _V6_GROUPS.iter_unpack(v6[first * V6.size : (first + _BATCH) * V6.size])
        yield [
            f'["{v6_groups_text(key[:8], legacy_mapped=legacy)}/{o[key[9]]}",'
            f"{o[key[8]]},{key[10]},{expires}]"
            for key, expires in zip(keys6, v6_expires[first : first + _BATCH], strict=True)
        ]


def _duplicate_key(family: object, key: object, path: str) -> int:
    """The family of a duplicate VRP support's (family, key); `ExchangeFormatError` if none."""
    if (
        type(family) is int
        and family in {4, 6}
        and isinstance(key, bytes)
        and len(key) == (V4.size if family == 4 else V6.size)
    ):
        return family
    raise ExchangeFormatError(path, "not a VRP support (family 4 or 6 and its packed key)")


def _duplicate_vrp_text(family: object, key: object, expires: object, version: int) -> str | None:
    """The record text of a duplicate VRP support; None: take the field-by-field path."""
    if type(expires) is not int or not INT64_MIN <= expires <= INT64_MAX:
        return None
    try:
        known = _duplicate_key(family, key, "")
    except ExchangeFormatError:
        return None
    assert isinstance(key, bytes)
    prefix, max_length, asn, _ = _prefix(known, key, 0, version)
    return f'["{prefix}",{max_length},{asn},{expires}]'


def _vrp_fields(  # noqa: PLR0917 - the fields of one record
    out: Out, family: int, key: bytes, offset: int, expires: object, path: str, version: int
) -> None:
    prefix, max_length, asn, length = _prefix(family, key, offset, version)
    out.ascii(f'["{prefix}"', f"{path}[0]")
    out.ascii(",", path)
    write_int(out, max_length, f"{path}[1]", length, 32 if family == 4 else 128)
    out.ascii(",", path)
    write_int(out, asn, f"{path}[2]", 0, 0xFFFF_FFFF)
    out.ascii(",", path)
    write_int(out, expires, f"{path}[3]")
    out.ascii("]", path)


def _router_key_text(key: RouterKey, expires: object) -> str | None:
    """The record text of a router key (fast path); None: take the field-by-field path."""
    if (
        type(expires) is not int
        or not INT64_MIN <= expires <= INT64_MAX
        or 2 * len(key.spki) + 100 > RECORD_FAST_PATH_BYTES
    ):
        return None
    return f'["{key.ski.hex()}",{key.asn},"{key.spki.hex()}",{expires}]'


def _router_key_fields(out: Out, key: RouterKey, expires: object, path: str) -> None:
    out.ascii(f'["{key.ski.hex()}"', f"{path}[0]")
    out.ascii(",", path)
    write_int(out, key.asn, f"{path}[1]", 0, 0xFFFF_FFFF)
    out.ascii(',"', f"{path}[2]")
    # The SPKI in slices, so a long one is counted against the budget as it is written.
    for start in range(0, len(key.spki), 4096):
        out.ascii(key.spki[start : start + 4096].hex(), f"{path}[2]")
    out.ascii('",', path)
    write_int(out, expires, f"{path}[3]")
    out.ascii("]", path)


def _aspa_text(aspa: Aspa, afi: object, expires: object, version: int) -> str | None:
    """The record text of an ASPA (fast path); None: take the field-by-field path."""
    if (
        type(expires) is not int
        or not INT64_MIN <= expires <= INT64_MAX
        or type(afi) is not int
        or not 0 <= afi <= 2
        or (version == 1 and afi != 0)
        or 11 * len(aspa.providers) + 64 > RECORD_FAST_PATH_BYTES
    ):
        return None
    providers = ",".join(map(str, aspa.providers))
    if version == 1:
        return f"[{aspa.customer},[{providers}],{expires}]"
    return f"[{aspa.customer},{AFI_TEXT[afi]},[{providers}],{expires}]"


def _aspa_fields(  # noqa: PLR0917 - the fields of one record
    out: Out, aspa: Aspa, afi: object, expires: object, path: str, version: int
) -> None:
    out.ascii("[", path)
    write_int(out, aspa.customer, f"{path}[0]", 1, 0xFFFF_FFFF)
    out.ascii(",", path)
    index = 1
    if version == 1:
        if afi != 0:
            raise ExchangeFormatError(path, "version 1 has no single-family ASPAs")
    else:
        if type(afi) is not int or not 0 <= afi <= 2:
            raise ExchangeFormatError(f"{path}[1]", f"ASPA afi must be 0, 1 or 2, not {afi!r}")
        out.ascii(AFI_TEXT[afi] + ",", f"{path}[1]")
        index = 2
    out.ascii("[", f"{path}[{index}]")
    for i, provider in enumerate(aspa.providers):
        if i:
            out.ascii(",", f"{path}[{index}]")
        write_int(out, provider, f"{path}[{index}][{i}]", 0, 0xFFFF_FFFF)
    out.ascii("],", f"{path}[{index}]")
    write_int(out, expires, f"{path}[{index + 1}]")
    out.ascii("]", path)


def _record_count(s: SourceRecord, member: str) -> int:
    if member == "vrps":
        return s.vrp_count
    records: tuple[object, ...] = getattr(s, member)
    return len(records)


def _record_texts(s: SourceRecord, member: str, version: int) -> Iterator[str | None]:
    """The fast texts of one raw-record list but the VRPs' (None: the field path writes it)."""
    if member == "vrp_duplicates":
        for family, packed, expires in s.vrp_duplicates:
            yield _duplicate_vrp_text(family, packed, expires, version)
    elif member in {"router_keys", "router_key_duplicates"}:
        records: tuple[tuple[RouterKey, int], ...] = getattr(s, member)
        for key, expires in records:
            yield _router_key_text(key, expires)
    elif member == "aspas":
        for i, (aspa, expires) in enumerate(s.aspas):
            yield _aspa_text(aspa, s.afi_of(i), expires, version)
    else:
        for aspa, afi, expires in s.aspa_duplicates:
            yield _aspa_text(aspa, afi, expires, version)


def _record_batches(
    s: SourceRecord, member: str, version: int, fast: bool
) -> Iterator[Sequence[str | None]]:
    """The fast texts of one raw-record list in batches (all None without the fast path)."""
    if not fast:
        count = _record_count(s, member)
        for first in range(0, count, _BATCH):
            yield [None] * min(_BATCH, count - first)
    elif member == "vrps":
        yield from _vrp_batches(s, version)
    else:
        texts = _record_texts(s, member, version)
        while batch := list(itertools.islice(texts, _BATCH)):
            yield batch


def _record_fields(  # noqa: PLR0917 - one record of one list
    out: Out, s: SourceRecord, member: str, index: int, path: str, version: int
) -> None:
    """Write the ``index``-th record of ``member`` field by field (the exact path)."""
    if member == "vrps":
        count4 = len(s.v4_expires)
        if index < count4:
            _vrp_fields(out, 4, s.v4, index * V4.size, s.v4_expires[index], path, version)
        else:
            i = index - count4
            _vrp_fields(out, 6, s.v6, i * V6.size, s.v6_expires[i], path, version)
    elif member == "vrp_duplicates":
        family, key, expires = s.vrp_duplicates[index]
        _vrp_fields(out, _duplicate_key(family, key, path), key, 0, expires, path, version)
    elif member in {"router_keys", "router_key_duplicates"}:
        key, expires = getattr(s, member)[index]
        _router_key_fields(out, key, expires, path)
    elif member == "aspas":
        aspa, expires = s.aspas[index]
        _aspa_fields(out, aspa, s.afi_of(index), expires, path, version)
    else:
        aspa, afi, expires = s.aspa_duplicates[index]
        _aspa_fields(out, aspa, afi, expires, path, version)


def write_records(  # noqa: PLR0917 - one list of one source
    out: Out, s: SourceRecord, member: str, path: str, version: int, fast: bool
) -> Iterator[bytes]:
    """A list of raw records: each in one go when it may be, else field by field.

    Fast texts are appended a batch at a time when the whole batch fits the budget; a batch
    that does not (or holds a record without fast text) is written record by record.
    """
    out.ascii("[", path)
    index = 0
    for batch in _record_batches(s, member, version, fast):
        if None not in batch:
            joined = ("," if index else "") + ",".join(cast("Sequence[str]", batch))
            if out.fits(len(joined)):
                out.ascii(joined, path)
                index += len(batch)
                if out.pending >= CHUNK_BYTES:
                    yield out.take()
                continue
        for text in batch:
            item = f"{path}[{index}]"
            if index:
                out.ascii(",", item)
            if text is not None and out.fits(len(text)):
                out.ascii(text, item)
            else:  # too large, no fast text, or over the budget: the field path names the field
                _record_fields(out, s, member, index, item, version)
            index += 1
        if out.pending >= CHUNK_BYTES:
            yield out.take()
    out.ascii("]", path)
