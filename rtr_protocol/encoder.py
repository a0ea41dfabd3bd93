"""Bulk encoders: whole Cache Response … End of Data replies as a few large `bytes` objects.

`encode_full_response` answers a Reset Query from a `Snapshot`, `encode_delta_response` a Serial
Query from a `Delta`. Payload goes out in draft-ietf-sidrops-8210bis-27 §11.2 order (used for
every version, as §11.2 recommends): by PDU type (IPv4 4, IPv6 6, Router Key 9, ASPA 11), and
within a type announcements before withdrawals; prefix announcements by address, max length,
prefix length, ASN all descending, withdrawals all ascending (§11.2.1); router keys by SKI, SPKI
length, SPKI, ASN (§11.2.2); ASPA by customer (§11.2.3). Payload is filtered by version: Router
Keys only from v1, ASPA only in v2 (digest pitfall P5).

The packed VRP keys of `snapshot.packed` are already in that order, so the prefix blocks are built
without a per-record Python loop: one ``bytearray(template * n)`` per block, whose variable
columns are filled by extended-slice assignment from the key columns.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from rtr_protocol.constants import (
    DEFAULT_MAX_ENCAPSULATED,
    MAX_VERSION,
    ErrorCode,
    Flag,
    PduType,
    Timers,
)
from rtr_protocol.pdu import (
    CacheReset,
    CacheResponse,
    EndOfData,
    ErrorReport,
    SerialNotify,
    encode,
)
from snapshot.packed import V4, V6, KeyLayout

if TYPE_CHECKING:
    from collections.abc import Iterable

    from snapshot import Aspa, Delta, RouterKey, Serial, Snapshot


def _check_version(version: int) -> None:
    if type(version) is not int or not 0 <= version <= MAX_VERSION:
        raise ValueError(f"protocol version {version!r} is not one of 0..{MAX_VERSION}")


def encode_cache_response(version: int, session_id: int) -> bytes:
    """A Cache Response PDU."""
    return encode(CacheResponse(version, session_id))


def encode_end_of_data(version: int, session_id: int, serial: Serial, timers: Timers) -> bytes:
    """An End of Data PDU; the timers are only written for v1/v2 (v0 has none)."""
    return encode(EndOfData(version, session_id, int(serial), None if version == 0 else timers))


def encode_cache_reset(version: int) -> bytes:
    """A Cache Reset PDU."""
    return encode(CacheReset(version))


def encode_serial_notify(version: int, session_id: int, serial: Serial) -> bytes:
    """A Serial Notify PDU."""
    return encode(SerialNotify(version, session_id, int(serial)))


def encode_error_report(
    version: int,
    code: ErrorCode,
    offending: bytes = b"",
    text: str = "",
    *,
    max_encapsulated: int | None = DEFAULT_MAX_ENCAPSULATED,
) -> bytes:
    """An Error Report; ``offending`` is truncated to ``max_encapsulated`` octets (min 4).

    Raises:
        ValueError: when ``code`` does not exist in ``version`` (bis §12) or the PDU would be
            larger than 65,535 octets.
    """
    return encode(ErrorReport(version, code, offending, text), max_encapsulated=max_encapsulated)


# ------------------------------------------------------------------------- payload blocks


def _prefix_block(keys: bytes, version: int, flags: int, layout: KeyLayout) -> bytes:
    """IPv4 or IPv6 Prefix PDUs for packed keys of ``layout``, in the keys' order.

    PDU: 8-octet header, flags, prefix length, max length, zero, address, ASN. No per-record
    loop: each PDU column is filled from the matching key column with one extended-slice copy.
    """
    key_size, address_size = layout.size, layout.address_size
    pdu_size = address_size + 16
    n = len(keys) // key_size
    if not n:
        return b""
    pdu_type = PduType.IPV4_PREFIX if layout.version == 4 else PduType.IPV6_PREFIX
    template = struct.pack(">BBHIBBBB", version, pdu_type, 0, pdu_size, flags, 0, 0, 0)
    out = bytearray(template + bytes(pdu_size - len(template))) * n
    out[9::pdu_size] = keys[layout.prefix_length_offset :: key_size]
    out[10::pdu_size] = keys[layout.max_length_offset :: key_size]
    for i in range(address_size):
        out[12 + i :: pdu_size] = keys[i::key_size]
    for i in range(4):
        out[12 + address_size + i :: pdu_size] = keys[layout.asn_offset + i :: key_size]
    return bytes(out)


def _v4_block(keys: bytes, version: int, flags: int) -> bytes:
    return _prefix_block(keys, version, flags, V4)


def _v6_block(keys: bytes, version: int, flags: int) -> bytes:
    return _prefix_block(keys, version, flags, V6)


def _router_key_block(keys: Iterable[RouterKey], version: int, flags: int) -> bytes:
    head = struct.Struct(">BBBBI")
    asn = struct.Struct(">I")
    return b"".join(
        head.pack(version, PduType.ROUTER_KEY, flags, 0, 32 + len(key.spki))
        + key.ski
        + asn.pack(key.asn)
        + key.spki
        for key in keys
    )


def _aspa_announce_block(aspas: Iterable[Aspa]) -> bytes:
    return b"".join(
        struct.pack(
            f">BBBBII{len(a.providers)}I",
            *(2, PduType.ASPA, Flag.ANNOUNCE, 0, 12 + 4 * len(a.providers), a.customer),
            *a.providers,
        )
        for a in aspas
    )


def _aspa_withdraw_block(customers: Iterable[int]) -> bytes:
    pdu = struct.Struct(">BBBBII")
    return b"".join(pdu.pack(2, PduType.ASPA, 0, 0, 12, c) for c in customers)


def _response(
    version: int, session_id: int, serial: Serial, timers: Timers, blocks: list[bytes]
) -> list[bytes]:
    head = encode_cache_response(version, session_id)
    tail = encode_end_of_data(version, session_id, serial, timers)
    return [head, *(b for b in blocks if b), tail]


def encode_full_response(
    snapshot: Snapshot, version: int, session_id: int, serial: Serial, timers: Timers
) -> list[bytes]:
    """The whole reply to a Reset Query: Cache Response, every record announced, End of Data.

    Args:
        snapshot: the data to send; VRP keys are already in announcement order.
        version: the negotiated protocol version (filters Router Keys and ASPA).
        session_id: the session id of that version.
        serial: the serial of ``snapshot``, sent in End of Data.
        timers: End of Data intervals (ignored for v0).

    Returns:
        The reply as a few large chunks, to be written in order.
    """
    _check_version(version)
    announce = int(Flag.ANNOUNCE)
    blocks = [_v4_block(snapshot.v4, version, announce), _v6_block(snapshot.v6, version, announce)]
    if version >= 1:
        blocks.append(_router_key_block(snapshot.router_keys, version, announce))
    if version >= 2:
        blocks.append(_aspa_announce_block(snapshot.aspas))
    return _response(version, session_id, serial, timers, blocks)


def encode_delta_response(
    delta: Delta, version: int, session_id: int, serial: Serial, timers: Timers
) -> list[bytes]:
    """The reply to a Serial Query: Cache Response, the net changes, End of Data.

    Per type, announcements (descending packed order) come before withdrawals (ascending); an
    ASPA change is one announce (replace) or one 12-octet withdraw, by ascending customer. An
    empty delta gives just Cache Response + End of Data.

    Args:
        delta: the net delta from the router's serial to ``serial``.
        version: the negotiated protocol version (filters Router Keys and ASPA).
        session_id: the session id of that version.
        serial: the current serial, sent in End of Data.
        timers: End of Data intervals (ignored for v0).

    Returns:
        The reply as a few large chunks, to be written in order.
    """
    _check_version(version)
    announce = int(Flag.ANNOUNCE)
    blocks = [
        _v4_block(delta.v4_announce, version, announce),
        _v4_block(delta.v4_withdraw, version, 0),
        _v6_block(delta.v6_announce, version, announce),
        _v6_block(delta.v6_withdraw, version, 0),
    ]
    if version >= 1:
        blocks.append(_router_key_block(delta.router_key_announce, version, announce))
        blocks.append(_router_key_block(delta.router_key_withdraw, version, 0))
    if version >= 2:
        blocks.append(_aspa_announce_block(delta.aspa_announce))
        blocks.append(_aspa_withdraw_block(delta.aspa_withdraw))
    return _response(version, session_id, serial, timers, blocks)
