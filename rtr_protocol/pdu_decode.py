"""Decoding of exactly one complete RTR PDU (bytes → a `rtr_protocol.pdu` dataclass).

`decode` and `decode_framed` raise only `RtrProtocolError`, carrying the Error Report code the
session answers with; `parse_header` checks a header before the framer waits for the body.
The decoding choices are those of `rtr_protocol.pdu`'s module text.
"""

from __future__ import annotations

import itertools
import struct

from rtr_protocol.constants import (
    HEADER_SIZE,
    MAX_PDU_SIZE,
    MAX_VERSION,
    ErrorCode,
    Flag,
    PduType,
    Timers,
    pdu_type_valid,
)
from rtr_protocol.errors import RtrProtocolError
from rtr_protocol.pdu import (
    HEADER_LAYOUT,
    U32_LAYOUT,
    AspaPdu,
    CacheReset,
    CacheResponse,
    EndOfData,
    ErrorReport,
    Ipv4Prefix,
    Ipv6Prefix,
    Pdu,
    ResetQuery,
    RouterKeyPdu,
    SerialNotify,
    SerialQuery,
)

__all__ = ["decode", "decode_framed", "parse_header"]


def parse_header(header: bytes | bytearray, max_pdu_size: int = MAX_PDU_SIZE) -> int:
    """Check the Length field of an 8-octet header; returns the PDU length.

    Raises:
        RtrProtocolError: CORRUPT_DATA, not recoverable, when Length is below 8 or above
            ``max_pdu_size`` (the offending bytes are the header only).
    """
    version, _type, _octets, length = HEADER_LAYOUT.unpack_from(header)
    if length < HEADER_SIZE:
        raise RtrProtocolError(
            ErrorCode.CORRUPT_DATA,
            f"PDU length {length} is shorter than the 8-octet header",
            offending=bytes(header[:HEADER_SIZE]),
            version=version,
        )
    if length > max_pdu_size:
        raise RtrProtocolError(
            ErrorCode.CORRUPT_DATA,
            f"PDU length {length} exceeds the maximum of {max_pdu_size} octets",
            offending=bytes(header[:HEADER_SIZE]),
            version=version,
        )
    return int(length)


def decode(data: bytes) -> Pdu:
    """Decode exactly one complete PDU.

    Raises:
        RtrProtocolError: for anything wrong; any other exception is a bug. Length problems
            of ``data`` itself are not recoverable; problems inside a well-framed PDU are.
    """
    data = bytes(data)
    if len(data) < HEADER_SIZE:
        raise RtrProtocolError(
            ErrorCode.CORRUPT_DATA,
            f"{len(data)} octets are not a PDU: the header alone is 8",
            offending=data,
            version=data[0] if data else None,
        )
    length = parse_header(data, MAX_PDU_SIZE)
    if length != len(data):
        raise RtrProtocolError(
            ErrorCode.CORRUPT_DATA,
            f"PDU length field says {length} octets but {len(data)} were given",
            offending=data[:HEADER_SIZE],
            version=data[0],
        )
    return decode_framed(data)


def _corrupt(data: bytes, text: str, code: ErrorCode = ErrorCode.CORRUPT_DATA) -> RtrProtocolError:
    return RtrProtocolError(code, text, offending=data, version=data[0], recoverable=True)


#: Exact lengths of the fixed-size PDUs (End of Data depends on the version).
_FIXED_LENGTH = {
    PduType.SERIAL_NOTIFY: 12,
    PduType.SERIAL_QUERY: 12,
    PduType.RESET_QUERY: 8,
    PduType.CACHE_RESPONSE: 8,
    PduType.IPV4_PREFIX: 20,
    PduType.IPV6_PREFIX: 32,
    PduType.CACHE_RESET: 8,
}


def decode_framed(data: bytes) -> Pdu:
    """Decode one PDU whose Length field is already known to equal ``len(data)`` (≥ 8).

    Every error raised here is recoverable: the PDU was framed by its length.

    Raises:
        RtrProtocolError: UNSUPPORTED_PROTOCOL_VERSION for a version above 2;
            UNSUPPORTED_PDU_TYPE for a type unknown or not defined in the version;
            CORRUPT_DATA for a wrong length or invalid field; ASPA_PROVIDER_LIST_ERROR for an
            ASPA announce with an empty or malformed provider list.
    """
    version, raw_type, octets23, length = HEADER_LAYOUT.unpack_from(data)
    if version > MAX_VERSION:
        raise _corrupt(
            data,
            f"protocol version {version} is not supported (highest is {MAX_VERSION})",
            ErrorCode.UNSUPPORTED_PROTOCOL_VERSION,
        )
    if not pdu_type_valid(raw_type, version):
        raise _corrupt(
            data,
            f"PDU type {raw_type} is not defined in protocol version {version}",
            ErrorCode.UNSUPPORTED_PDU_TYPE,
        )
    pdu_type = PduType(raw_type)
    expected = _FIXED_LENGTH.get(pdu_type)
    if pdu_type is PduType.END_OF_DATA:
        expected = 12 if version == 0 else 24
    if expected is not None and length != expected:
        raise _corrupt(data, f"wrong length for {pdu_type.name} PDU: {length} != {expected}")
    match pdu_type:
        case PduType.SERIAL_NOTIFY:
            return SerialNotify(version, octets23, U32_LAYOUT.unpack_from(data, 8)[0])
        case PduType.SERIAL_QUERY:
            return SerialQuery(version, octets23, U32_LAYOUT.unpack_from(data, 8)[0])
        case PduType.RESET_QUERY:
            return ResetQuery(version)
        case PduType.CACHE_RESPONSE:
            return CacheResponse(version, octets23)
        case PduType.CACHE_RESET:
            return CacheReset(version)
        case PduType.IPV4_PREFIX:
            flags, plen, mlen, _zero, prefix, asn = struct.unpack_from(">BBBBII", data, 8)
            _check_received_prefix(data, plen, mlen, prefix, 32)
            return Ipv4Prefix(version, flags, plen, mlen, prefix, asn)
        case PduType.IPV6_PREFIX:
            flags, plen, mlen, _zero = data[8:12]
            prefix = int.from_bytes(data[12:28], "big")
            _check_received_prefix(data, plen, mlen, prefix, 128)
            return Ipv6Prefix(
                version, flags, plen, mlen, prefix, U32_LAYOUT.unpack_from(data, 28)[0]
            )
        case PduType.END_OF_DATA:
            return _decode_end_of_data(data, version, octets23)
        case PduType.ROUTER_KEY:
            if length <= 32:
                raise _corrupt(data, f"Router Key PDU of {length} octets has no SPKI (min 33)")
            return RouterKeyPdu(
                version, data[2], data[8:28], U32_LAYOUT.unpack_from(data, 28)[0], data[32:]
            )
        case PduType.ERROR_REPORT:
            return _decode_error_report(data, version, octets23, length)
        case PduType.ASPA:  # pragma: no branch - the last member
            return _decode_aspa(data, version, length)


def _check_received_prefix(data: bytes, plen: int, mlen: int, prefix: int, bits: int) -> None:
    if plen > bits or mlen > bits or mlen < plen:
        raise _corrupt(
            data, f"prefix length {plen} / max length {mlen} invalid for a {bits}-bit prefix"
        )
    if prefix & ((1 << (bits - plen)) - 1):
        raise _corrupt(data, f"prefix has host bits set beyond /{plen} (bis §5.9)")


def _decode_end_of_data(data: bytes, version: int, session_id: int) -> EndOfData:
    serial = U32_LAYOUT.unpack_from(data, 8)[0]
    if version == 0:
        return EndOfData(version, session_id, serial, None)
    refresh, retry, expire = struct.unpack_from(">III", data, 12)
    try:
        timers = Timers(refresh, retry, expire)
    except ValueError as exc:
        raise _corrupt(data, f"End of Data timers invalid: {exc}") from None
    return EndOfData(version, session_id, serial, timers)


def _decode_error_report(data: bytes, version: int, code: int, length: int) -> ErrorReport:
    if length < 16:
        raise _corrupt(data, f"Error Report PDU of {length} octets is shorter than 16")
    n = U32_LAYOUT.unpack_from(data, 8)[0]
    if 16 + n > length:
        raise _corrupt(data, f"encapsulated PDU length {n} overruns the Error Report")
    m = U32_LAYOUT.unpack_from(data, 12 + n)[0]
    if 16 + n + m != length:
        raise _corrupt(data, f"Error Report lengths do not add up: 16 + {n} + {m} != {length}")
    text = data[16 + n :].decode("utf-8", errors="replace")
    return ErrorReport(version, code, data[12 : 12 + n], text)


def _decode_aspa(data: bytes, version: int, length: int) -> AspaPdu:
    if length < 12 or (length - 12) % 4:
        raise _corrupt(data, f"wrong length for ASPA PDU: {length} is not 12 + 4·N")
    flags = data[2]
    customer = U32_LAYOUT.unpack_from(data, 8)[0]
    n = (length - 12) // 4
    providers: tuple[int, ...] = struct.unpack_from(f">{n}I", data, 12)
    if not flags & Flag.ANNOUNCE:
        if n:
            raise _corrupt(data, f"ASPA withdraw must be 12 octets, got {length}")
        return AspaPdu(version, flags, customer, ())
    provider_error = ErrorCode.ASPA_PROVIDER_LIST_ERROR
    if not n:
        raise _corrupt(data, "ASPA announce without providers", provider_error)
    if any(a >= b for a, b in itertools.pairwise(providers)):
        raise _corrupt(data, "ASPA providers are not strictly increasing", provider_error)
    if n > 1 and providers[0] == 0:
        raise _corrupt(data, "AS0 listed among several ASPA providers", provider_error)
    return AspaPdu(version, flags, customer, providers)
