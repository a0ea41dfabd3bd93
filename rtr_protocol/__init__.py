"""Sans-IO RTR protocol core (v0/v1/v2): PDUs, framing, the server session state machine, encoders.

Read in this order: `constants` (wire numbers and which are legal in which version), `pdu`
(one dataclass per PDU, `encode`/`decode`), `framer` (bytes → PDUs), `session` (the cache's
state machine and its transition table), `encoder` (whole replies, fast); for the router side,
`client` (its state machine, on `client_core`, `client_staging`, `client_runs`, `client_bounds`,
with the actions of `client_actions`). Nothing here does I/O, reads a clock or awaits; the
only exception the codec raises is `RtrProtocolError`.
"""

from __future__ import annotations

from rtr_protocol.actions import (
    Action,
    Close,
    CloseReason,
    Hold,
    SendCacheReset,
    SendDelta,
    SendError,
    SendFull,
)
from rtr_protocol.client import ClientSession, is_legacy_aspa
from rtr_protocol.client_actions import (
    ClientAction,
    ClientState,
    Disconnect,
    Downgrade,
    PollAfter,
    Publish,
    Transmit,
)
from rtr_protocol.constants import (
    ANNOUNCE,
    CACHE_PDU_TYPES,
    DEFAULT_MAX_ENCAPSULATED,
    ERROR_CODES_BY_VERSION,
    HEADER_SIZE,
    MAX_PDU_SIZE,
    MAX_VERSION,
    PDU_TYPES_BY_VERSION,
    ROUTER_PDU_TYPES,
    VERSIONS,
    ErrorCode,
    Flag,
    PduType,
    Timers,
    error_code_valid,
    is_fatal,
    pdu_type_valid,
)
from rtr_protocol.encoder import (
    encode_cache_reset,
    encode_cache_response,
    encode_delta_response,
    encode_end_of_data,
    encode_error_report,
    encode_full_response,
    encode_serial_notify,
)
from rtr_protocol.errors import RtrProtocolError
from rtr_protocol.framer import NEED_DATA, NeedData, PduFramer
from rtr_protocol.pdu import (
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
    encode,
)
from rtr_protocol.pdu_decode import decode
from rtr_protocol.session import ServerSession
from rtr_protocol.session_state import SessionState

__all__ = [
    "ANNOUNCE",
    "CACHE_PDU_TYPES",
    "DEFAULT_MAX_ENCAPSULATED",
    "ERROR_CODES_BY_VERSION",
    "HEADER_SIZE",
    "MAX_PDU_SIZE",
    "MAX_VERSION",
    "NEED_DATA",
    "PDU_TYPES_BY_VERSION",
    "ROUTER_PDU_TYPES",
    "VERSIONS",
    "Action",
    "AspaPdu",
    "CacheReset",
    "CacheResponse",
    "ClientAction",
    "ClientSession",
    "ClientState",
    "Close",
    "CloseReason",
    "Disconnect",
    "Downgrade",
    "EndOfData",
    "ErrorCode",
    "ErrorReport",
    "Flag",
    "Hold",
    "Ipv4Prefix",
    "Ipv6Prefix",
    "NeedData",
    "Pdu",
    "PduFramer",
    "PduType",
    "PollAfter",
    "Publish",
    "ResetQuery",
    "RouterKeyPdu",
    "RtrProtocolError",
    "SendCacheReset",
    "SendDelta",
    "SendError",
    "SendFull",
    "SerialNotify",
    "SerialQuery",
    "ServerSession",
    "SessionState",
    "Timers",
    "Transmit",
    "decode",
    "encode",
    "encode_cache_reset",
    "encode_cache_response",
    "encode_delta_response",
    "encode_end_of_data",
    "encode_error_report",
    "encode_full_response",
    "encode_serial_notify",
    "error_code_valid",
    "is_fatal",
    "is_legacy_aspa",
    "pdu_type_valid",
]
