"""One frozen dataclass per RTR PDU and `encode` of exactly one (decoding: `pdu_decode`).

`encode` (PDU → bytes) raises `ValueError` for a PDU that is not valid for its version;
`rtr_protocol.pdu_decode.decode` (bytes → PDU) raises only `RtrProtocolError`. The
dataclasses themselves do not validate, so anything a peer sends can be represented; `encode`
is where our own output is checked. Layouts follow draft-ietf-sidrops-8210bis-27 §5 (and
RFC 6810 / RFC 8210 for v0/v1):

* every PDU: version(1) type(1) octets 2-3 (session id / zero / error code / flags+zero)
  length(4);
* End of Data is 12 octets in v0 and 24 (with timers) in v1/v2;
* ASPA (v2 only) is the *current* layout: flags in header octet 2, zero octet 3, length
  12 + 4·N, customer ASN, N provider ASNs; a withdraw is exactly 12 octets.

Decoding choices: reserved "zero" octets and reserved flag bits are accepted as sent (bis §5);
the zero-host-bits rule of bis §5.9 is applied to every version; an Error Report keeps its raw
code (unknown codes included, the session decides) and its text is decoded as UTF-8 with
``errors="replace"`` so a peer's diagnostic can always be logged; a trailing NUL in the text is
kept as sent (we never send one).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from rtr_protocol.constants import (
    DEFAULT_MAX_ENCAPSULATED,
    HEADER_SIZE,
    MAX_PDU_SIZE,
    MAX_VERSION,
    MIN_ENCAPSULATED,
    ErrorCode,
    Flag,
    PduType,
    Timers,
    error_code_valid,
    pdu_type_valid,
)

__all__ = [
    "HEADER_LAYOUT",
    "SKI_SIZE",
    "U32_LAYOUT",
    "AspaPdu",
    "CacheReset",
    "CacheResponse",
    "EndOfData",
    "ErrorReport",
    "Ipv4Prefix",
    "Ipv6Prefix",
    "Pdu",
    "ResetQuery",
    "RouterKeyPdu",
    "SerialNotify",
    "SerialQuery",
    "encode",
]

U16_MAX = 0xFFFF
U32_MAX = 0xFFFF_FFFF
SKI_SIZE = 20

#: The common header (version, type, octets 2-3, length) and a 32-bit field, shared with decoding.
HEADER_LAYOUT = struct.Struct(">BBHI")
U32_LAYOUT = struct.Struct(">I")


# ---------------------------------------------------------------------------------- PDU types


@dataclass(frozen=True, slots=True)
class SerialNotify:
    """Serial Notify (type 0): the cache has ``serial`` now (bis §5.2)."""

    TYPE: ClassVar[PduType] = PduType.SERIAL_NOTIFY
    version: int
    session_id: int
    serial: int


@dataclass(frozen=True, slots=True)
class SerialQuery:
    """Serial Query (type 1): the router asks for changes since ``serial`` (bis §5.3)."""

    TYPE: ClassVar[PduType] = PduType.SERIAL_QUERY
    version: int
    session_id: int
    serial: int


@dataclass(frozen=True, slots=True)
class ResetQuery:
    """Reset Query (type 2): the router asks for the whole data set (bis §5.4)."""

    TYPE: ClassVar[PduType] = PduType.RESET_QUERY
    version: int


@dataclass(frozen=True, slots=True)
class CacheResponse:
    """Cache Response (type 3): opens a reply and names the session (bis §5.5)."""

    TYPE: ClassVar[PduType] = PduType.CACHE_RESPONSE
    version: int
    session_id: int


@dataclass(frozen=True, slots=True)
class Ipv4Prefix:
    """IPv4 Prefix (type 4): one IPv4 VRP; ``prefix`` is the address as an int (bis §5.9)."""

    TYPE: ClassVar[PduType] = PduType.IPV4_PREFIX
    version: int
    flags: int
    prefix_length: int
    max_length: int
    prefix: int
    asn: int

    @property
    def announce(self) -> bool:
        """True for an announcement, False for a withdrawal."""
        return bool(self.flags & Flag.ANNOUNCE)


@dataclass(frozen=True, slots=True)
class Ipv6Prefix:
    """IPv6 Prefix (type 6): one IPv6 VRP; ``prefix`` is a 128-bit int (bis §5.10)."""

    TYPE: ClassVar[PduType] = PduType.IPV6_PREFIX
    version: int
    flags: int
    prefix_length: int
    max_length: int
    prefix: int
    asn: int

    @property
    def announce(self) -> bool:
        """True for an announcement, False for a withdrawal."""
        return bool(self.flags & Flag.ANNOUNCE)


@dataclass(frozen=True, slots=True)
class EndOfData:
    """End of Data (type 7): closes a reply; ``timers`` is None exactly for v0 (bis §5.7)."""

    TYPE: ClassVar[PduType] = PduType.END_OF_DATA
    version: int
    session_id: int
    serial: int
    timers: Timers | None


@dataclass(frozen=True, slots=True)
class CacheReset:
    """Cache Reset (type 8): no incremental update from the router's serial (bis §5.6)."""

    TYPE: ClassVar[PduType] = PduType.CACHE_RESET
    version: int


@dataclass(frozen=True, slots=True)
class RouterKeyPdu:
    """Router Key (type 9, v1+): SKI (20 octets), ASN and DER SPKI (bis §5.11)."""

    TYPE: ClassVar[PduType] = PduType.ROUTER_KEY
    version: int
    flags: int
    ski: bytes
    asn: int
    spki: bytes

    @property
    def announce(self) -> bool:
        """True for an announcement, False for a withdrawal."""
        return bool(self.flags & Flag.ANNOUNCE)


@dataclass(frozen=True, slots=True)
class ErrorReport:
    """Error Report (type 10): ``code`` stays a raw int so unknown codes survive (bis §5.8)."""

    TYPE: ClassVar[PduType] = PduType.ERROR_REPORT
    version: int
    code: int
    pdu: bytes = b""
    text: str = ""

    @property
    def error_code(self) -> ErrorCode | None:
        """The code as an `ErrorCode`, or None when it is not one we know."""
        try:
            return ErrorCode(self.code)
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class AspaPdu:
    """ASPA (type 11, v2 only): a customer ASN and its providers, ascending (bis §5.12)."""

    TYPE: ClassVar[PduType] = PduType.ASPA
    version: int
    flags: int
    customer: int
    providers: tuple[int, ...] = ()

    @property
    def announce(self) -> bool:
        """True for an announcement (or replacement), False for a withdrawal."""
        return bool(self.flags & Flag.ANNOUNCE)


Pdu = (
    SerialNotify
    | SerialQuery
    | ResetQuery
    | CacheResponse
    | Ipv4Prefix
    | Ipv6Prefix
    | EndOfData
    | CacheReset
    | RouterKeyPdu
    | ErrorReport
    | AspaPdu
)


# ---------------------------------------------------------------------------------- encoding


def _check_int(name: str, value: int, high: int) -> None:
    if type(value) is not int or not 0 <= value <= high:
        raise ValueError(f"{name}={value!r} must be an int in 0..{high}")


def _check_version(pdu: Pdu) -> int:
    version = pdu.version
    _check_int("version", version, MAX_VERSION)
    if not pdu_type_valid(pdu.TYPE, version):
        raise ValueError(f"{pdu.TYPE.name} PDUs do not exist in protocol version {version}")
    return version


def _check_prefix(pdu: Ipv4Prefix | Ipv6Prefix, bits: int) -> None:
    _check_int("flags", pdu.flags, 0xFF)
    _check_int("prefix_length", pdu.prefix_length, bits)
    _check_int("max_length", pdu.max_length, bits)
    if pdu.max_length < pdu.prefix_length:
        raise ValueError(
            f"max_length {pdu.max_length} is less than prefix_length {pdu.prefix_length}"
        )
    _check_int("prefix", pdu.prefix, (1 << bits) - 1)
    if pdu.prefix & ((1 << (bits - pdu.prefix_length)) - 1):
        raise ValueError(f"prefix has host bits set beyond /{pdu.prefix_length} (bis §5.9)")
    _check_int("asn", pdu.asn, U32_MAX)


def _check_providers(providers: tuple[int, ...]) -> None:
    previous = -1
    for asn in providers:
        _check_int("provider", asn, U32_MAX)
        if asn <= previous:
            raise ValueError("ASPA providers must be strictly increasing (bis §5.12)")
        previous = asn
    if len(providers) > 1 and providers[0] == 0:
        raise ValueError("AS0 may only be the sole ASPA provider (bis §5.12)")


def encode(pdu: Pdu, *, max_encapsulated: int | None = DEFAULT_MAX_ENCAPSULATED) -> bytes:
    """The wire bytes of one PDU.

    Args:
        pdu: the PDU; its ``version`` decides the layout.
        max_encapsulated: for an Error Report, keep at most this many octets of the
            encapsulated PDU (never fewer than 4, bis §5.8); None keeps it whole.

    Raises:
        ValueError: when the PDU is not valid for its version (e.g. Router Key in v0, ASPA
            below v2, an error code the version lacks, an ASPA announce without providers,
            max length out of range, host bits set) or would exceed 65,535 octets.
    """
    version = _check_version(pdu)
    out: bytes
    match pdu:
        case SerialNotify() | SerialQuery():
            _check_int("session_id", pdu.session_id, U16_MAX)
            _check_int("serial", pdu.serial, U32_MAX)
            out = struct.pack(">BBHII", version, pdu.TYPE, pdu.session_id, 12, pdu.serial)
        case ResetQuery() | CacheReset():
            out = HEADER_LAYOUT.pack(version, pdu.TYPE, 0, HEADER_SIZE)
        case CacheResponse():
            _check_int("session_id", pdu.session_id, U16_MAX)
            out = HEADER_LAYOUT.pack(version, pdu.TYPE, pdu.session_id, HEADER_SIZE)
        case Ipv4Prefix():
            _check_prefix(pdu, 32)
            out = struct.pack(
                ">BBHIBBBBII",
                *(version, pdu.TYPE, 0, 20, pdu.flags, pdu.prefix_length, pdu.max_length, 0),
                *(pdu.prefix, pdu.asn),
            )
        case Ipv6Prefix():
            _check_prefix(pdu, 128)
            out = (
                struct.pack(
                    ">BBHIBBBB",
                    *(version, pdu.TYPE, 0, 32, pdu.flags, pdu.prefix_length, pdu.max_length, 0),
                )
                + pdu.prefix.to_bytes(16, "big")
                + U32_LAYOUT.pack(pdu.asn)
            )
        case EndOfData():
            out = _encode_end_of_data(pdu)
        case RouterKeyPdu():
            _check_int("flags", pdu.flags, 0xFF)
            if not isinstance(pdu.ski, bytes) or len(pdu.ski) != SKI_SIZE:
                raise ValueError("Router Key SKI must be 20 octets")
            _check_int("asn", pdu.asn, U32_MAX)
            if not isinstance(pdu.spki, bytes) or not pdu.spki:
                raise ValueError("Router Key SPKI must not be empty")
            out = (
                struct.pack(">BBBBI", version, pdu.TYPE, pdu.flags, 0, 32 + len(pdu.spki))
                + pdu.ski
                + U32_LAYOUT.pack(pdu.asn)
                + pdu.spki
            )
        case ErrorReport():
            out = _encode_error_report(pdu, max_encapsulated)
        case AspaPdu():
            _check_int("flags", pdu.flags, 0xFF)
            _check_int("customer", pdu.customer, U32_MAX)
            providers = tuple(pdu.providers)
            if pdu.announce and not providers:
                raise ValueError("an ASPA announce needs at least one provider (bis §5.12)")
            if not pdu.announce and providers:
                raise ValueError("an ASPA withdraw carries no providers (bis §5.12)")
            _check_providers(providers)
            n = len(providers)
            out = struct.pack(
                f">BBBBII{n}I", version, pdu.TYPE, pdu.flags, 0, 12 + 4 * n, pdu.customer,
                *providers,
            )  # fmt: skip
        case _:  # pragma: no cover - the union is exhaustive
            raise TypeError(f"not a PDU: {pdu!r}")
    if len(out) > MAX_PDU_SIZE:
        raise ValueError(f"{pdu.TYPE.name} PDU of {len(out)} octets exceeds {MAX_PDU_SIZE}")
    return out


def _encode_end_of_data(pdu: EndOfData) -> bytes:
    _check_int("session_id", pdu.session_id, U16_MAX)
    _check_int("serial", pdu.serial, U32_MAX)
    if pdu.version == 0:
        if pdu.timers is not None:
            raise ValueError("a v0 End of Data carries no timers")
        return struct.pack(">BBHII", 0, pdu.TYPE, pdu.session_id, 12, pdu.serial)
    timers = pdu.timers
    if timers is None:
        raise ValueError(f"a v{pdu.version} End of Data needs timers")
    return struct.pack(
        ">BBHIIIII",
        *(pdu.version, pdu.TYPE, pdu.session_id, 24, pdu.serial),
        *(timers.refresh, timers.retry, timers.expire),
    )


def _encode_error_report(pdu: ErrorReport, max_encapsulated: int | None) -> bytes:
    if not error_code_valid(pdu.code, pdu.version):
        raise ValueError(f"error code {pdu.code!r} does not exist in version {pdu.version}")
    inner = bytes(pdu.pdu)
    if max_encapsulated is not None:
        inner = inner[: max(max_encapsulated, MIN_ENCAPSULATED)]
    try:
        text = pdu.text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"Error Report text is not encodable as UTF-8: {exc}") from None
    n, m = len(inner), len(text)
    return (
        struct.pack(">BBHII", pdu.version, pdu.TYPE, pdu.code, 16 + n + m, n)
        + inner
        + U32_LAYOUT.pack(m)
        + text
    )


# ---------------------------------------------------------------------------------- decoding
