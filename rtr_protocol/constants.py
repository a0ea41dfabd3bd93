"""RTR wire numbers: PDU types, error codes, flags, size limits and timers, per protocol version.

Everything the codec and the session need to know about *which* number is legal *where* lives
here, as data: `PDU_TYPES_BY_VERSION`, `ERROR_CODES_BY_VERSION`, `CACHE_PDU_TYPES`,
`ROUTER_PDU_TYPES`, `is_fatal`. Section numbers cite RFC 6810 (v0), RFC 8210 (v1) and
draft-ietf-sidrops-8210bis-27 (v2, written "bis"); the bis numbering differs from RFC 8210 for
the PDU sections (bis moved Cache Reset, End of Data and Error Report before the payload PDUs).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, IntFlag
from typing import Final


class PduType(IntEnum):
    """PDU Type octet (header octet 1); IANA "rpki-rtr-pdu" registry, bis §14."""

    #: Cache → router: "I have serial X now" (RFC 6810 §5.2, RFC 8210 §5.2, bis §5.2).
    SERIAL_NOTIFY = 0
    #: Router → cache: "send me changes since X" (RFC 6810 §5.3, RFC 8210 §5.3, bis §5.3).
    SERIAL_QUERY = 1
    #: Router → cache: "send me everything" (RFC 6810 §5.4, RFC 8210 §5.4, bis §5.4).
    RESET_QUERY = 2
    #: Cache → router: opens a reply, carries the Session ID (RFC 8210 §5.5, bis §5.5).
    CACHE_RESPONSE = 3
    #: Cache → router: one IPv4 VRP (RFC 6810 §5.6, RFC 8210 §5.6, bis §5.9).
    IPV4_PREFIX = 4
    #: Cache → router: one IPv6 VRP (RFC 6810 §5.7, RFC 8210 §5.7, bis §5.10).
    IPV6_PREFIX = 6
    #: Cache → router: closes a reply; 12 octets in v0, 24 with timers in v1/v2
    #: (RFC 6810 §5.8, RFC 8210 §5.8, bis §5.7).
    END_OF_DATA = 7
    #: Cache → router: "no incremental update from your serial" (RFC 8210 §5.9, bis §5.6).
    CACHE_RESET = 8
    #: Cache → router: one BGPsec router key; v1 and v2 only (RFC 8210 §5.10, bis §5.11).
    ROUTER_KEY = 9
    #: Either direction: an error, with the offending PDU and a text (RFC 6810 §5.10,
    #: RFC 8210 §5.11, bis §5.8).
    ERROR_REPORT = 10
    #: Cache → router: one customer's ASPA provider set; v2 only (bis §5.12).
    ASPA = 11


class ErrorCode(IntEnum):
    """Error Code of an Error Report (header octets 2-3); IANA "rpki-rtr-error", bis §12."""

    #: Fatal. PDU corrupt in a way no other code covers; also a Session ID mismatch
    #: (RFC 6810 §10, RFC 8210 §12, bis §5.1 and §12).
    CORRUPT_DATA = 0
    #: Fatal. The reporter failed internally (RFC 6810 §10, RFC 8210 §12, bis §12).
    INTERNAL_ERROR = 1
    #: Non-fatal. The cache has no data yet (RFC 6810 §10, RFC 8210 §12, bis §8.4 and §12).
    NO_DATA_AVAILABLE = 2
    #: Fatal. The cache believes the router's request is invalid (RFC 8210 §12, bis §12).
    INVALID_REQUEST = 3
    #: Fatal in RFC 6810 §10 / RFC 8210 §12; non-fatal in bis §12. Answer to a query of a
    #: version we do not speak; carries our highest version (bis §7).
    UNSUPPORTED_PROTOCOL_VERSION = 4
    #: Fatal. The PDU Type is not known to the receiver (RFC 8210 §12, bis §12).
    UNSUPPORTED_PDU_TYPE = 5
    #: Fatal. Withdraw of a record the router does not hold (RFC 8210 §12, bis §12).
    WITHDRAWAL_OF_UNKNOWN_RECORD = 6
    #: Fatal. Announce of a record the router already holds (RFC 8210 §12, bis §12).
    DUPLICATE_ANNOUNCEMENT = 7
    #: Fatal; v1 and v2 only. A PDU of another version after negotiation (RFC 8210 §7 and
    #: §12, bis §7 and §12).
    UNEXPECTED_PROTOCOL_VERSION = 8
    #: Fatal; v2 only. Empty or malformed ASPA provider list (bis §5.12 and §12).
    ASPA_PROVIDER_LIST_ERROR = 9
    #: Fatal; v2 only. Transport stall or failure (bis §9 and §12).
    TRANSPORT_FAILURE = 10
    #: Fatal; v2 only. Payload PDUs not in the §11.2 order (bis §11.4 and §12).
    ORDERING_ERROR = 11
    #: Non-fatal; v2 only. The cache restarts and expects to be back soon (bis §8.5, §12).
    CACHE_RESTART = 12
    #: Fatal; v2 only. The cache shuts down deliberately; flush its data (bis §8.6, §12).
    CACHE_SHUTDOWN = 13


class Flag(IntFlag):
    """Flags octet of prefix, Router Key and ASPA PDUs (RFC 8210 §5.1, bis §5.1)."""

    #: Bit 0: 1 = announce (ASPA: announce or replace), 0 = withdraw. Bits 1-7 are reserved.
    ANNOUNCE = 1


#: Bit 0 of the Flags octet set: announce (bis §5.1).
ANNOUNCE: Final = Flag.ANNOUNCE
#: Flags octet of a withdrawal.
WITHDRAW: Final = 0

#: Every PDU starts with the same 8-octet header (bis §5.1).
HEADER_SIZE: Final = 8
#: Largest PDU we send or accept: the bis §5.1 limit, applied to every version.
MAX_PDU_SIZE: Final = 65_535
#: Highest protocol version we implement (bis is version 2).
MAX_VERSION: Final = 2
#: The protocol versions this package implements: RFC 6810, RFC 8210, 8210bis.
VERSIONS: Final = (0, 1, 2)
#: Octets of an encapsulated PDU kept in an Error Report we send (bis §5.8 requires at
#: least 4 when truncating; OpenBGPD also keeps 256).
DEFAULT_MAX_ENCAPSULATED: Final = 256
#: The minimum bis §5.8 requires of a truncated encapsulated PDU.
MIN_ENCAPSULATED: Final = 4

#: PDU types defined in each version (bis §14: 9 is reserved in v0, 11 in v0 and v1).
PDU_TYPES_BY_VERSION: Final[dict[int, frozenset[PduType]]] = {
    0: frozenset(PduType) - {PduType.ROUTER_KEY, PduType.ASPA},
    1: frozenset(PduType) - {PduType.ASPA},
    2: frozenset(PduType),
}

#: Error codes defined in each version; only these may be sent on a session of that version
#: (bis §12: "send errors only with error codes that were defined by the specification that
#: corresponds to the version of the relevant session").
ERROR_CODES_BY_VERSION: Final[dict[int, frozenset[ErrorCode]]] = {
    0: frozenset(c for c in ErrorCode if c <= ErrorCode.DUPLICATE_ANNOUNCEMENT),
    1: frozenset(c for c in ErrorCode if c <= ErrorCode.UNEXPECTED_PROTOCOL_VERSION),
    2: frozenset(ErrorCode),
}

#: Non-fatal codes per version: everything else MUST end the session (RFC 8210 §12, bis §12).
NON_FATAL_BY_VERSION: Final[dict[int, frozenset[ErrorCode]]] = {
    0: frozenset({ErrorCode.NO_DATA_AVAILABLE}),
    1: frozenset({ErrorCode.NO_DATA_AVAILABLE}),
    2: frozenset(
        {
            ErrorCode.NO_DATA_AVAILABLE,
            ErrorCode.UNSUPPORTED_PROTOCOL_VERSION,
            ErrorCode.CACHE_RESTART,
        }
    ),
}

#: PDU types only a cache sends (a router sending one is an Invalid Request).
CACHE_PDU_TYPES: Final = frozenset(
    {
        PduType.SERIAL_NOTIFY,
        PduType.CACHE_RESPONSE,
        PduType.IPV4_PREFIX,
        PduType.IPV6_PREFIX,
        PduType.END_OF_DATA,
        PduType.CACHE_RESET,
        PduType.ROUTER_KEY,
        PduType.ASPA,
    }
)
#: PDU types a router sends (Error Report goes both ways).
ROUTER_PDU_TYPES: Final = frozenset(
    {PduType.SERIAL_QUERY, PduType.RESET_QUERY, PduType.ERROR_REPORT}
)


def pdu_type_valid(pdu_type: int, version: int) -> bool:
    """True when ``pdu_type`` is defined in protocol ``version`` (False for unknown versions)."""
    types = PDU_TYPES_BY_VERSION.get(version)
    return types is not None and pdu_type in types


def error_code_valid(code: int, version: int) -> bool:
    """True when ``code`` is defined in protocol ``version`` (False for unknown versions)."""
    codes = ERROR_CODES_BY_VERSION.get(version)
    return codes is not None and code in codes


def is_fatal(code: int, version: int) -> bool:
    """True when error ``code`` ends the session in ``version``; unknown codes are fatal."""
    return code not in NON_FATAL_BY_VERSION.get(version, frozenset())


# Timer bounds (bis §6); RFC 8210 §6 has the same numbers.
REFRESH_MIN: Final = 1
REFRESH_MAX: Final = 86_400
RETRY_MIN: Final = 1
RETRY_MAX: Final = 7_200
EXPIRE_MIN: Final = 600
EXPIRE_MAX: Final = 172_800


@dataclass(frozen=True, slots=True)
class Timers:
    """Refresh, Retry and Expire intervals in seconds, sent in v1/v2 End of Data (bis §6).

    Raises:
        ValueError: when a value is not an int, lies outside its bis §6 range, or Expire is
            not larger than both Refresh and Retry.
    """

    #: Seconds the router waits after End of Data before polling again (1..86400).
    refresh: int = 3600
    #: Seconds the router waits after a failed query before retrying (1..7200).
    retry: int = 600
    #: Seconds the router may keep data without a successful query (600..172800).
    expire: int = 7200

    def __post_init__(self) -> None:
        for name, value, low, high in (
            ("refresh", self.refresh, REFRESH_MIN, REFRESH_MAX),
            ("retry", self.retry, RETRY_MIN, RETRY_MAX),
            ("expire", self.expire, EXPIRE_MIN, EXPIRE_MAX),
        ):
            if type(value) is not int:
                raise ValueError(f"{name} interval must be an int of seconds, got {value!r}")
            if not low <= value <= high:
                raise ValueError(f"{name} interval {value} s is outside {low}..{high} s (bis §6)")
        if self.expire <= self.refresh or self.expire <= self.retry:
            raise ValueError(
                f"expire interval ({self.expire} s) must be larger than refresh "
                f"({self.refresh} s) and retry ({self.retry} s) (bis §6)"
            )
