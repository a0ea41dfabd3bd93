"""Sans-IO RTR protocol core (v0/v1/v2): PDUs, framing, the server session state machine, encoders.

Read in this order: `constants` (wire numbers and which are legal in which version), `pdu`
(one dataclass per PDU, `encode`/`decode`), `framer` (bytes → PDUs), `session` (the cache's
state machine and its transition table), `encoder` (whole replies, fast). Nothing here does
I/O, reads a clock or awaits; the only exception the codec raises is `RtrProtocolError`.
"""

from __future__ import annotations

from rtr_server.protocol.constants import (
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
from rtr_server.protocol.encoder import (
    encode_cache_reset,
    encode_cache_response,
    encode_delta_response,
    encode_end_of_data,
    encode_error_report,
    encode_full_response,
    encode_serial_notify,
)
from rtr_server.protocol.errors import RtrProtocolError
from rtr_server.protocol.framer import NEED_DATA, NeedData, PduFramer
from rtr_server.protocol.pdu import (
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
    decode,
    encode,
)
from rtr_server.protocol.session import (
    Action,
    Close,
    Send,
    SendDelta,
    SendFull,
    ServerSession,
    SessionState,
)

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
    "Close",
    "EndOfData",
    "ErrorCode",
    "ErrorReport",
    "Flag",
    "Ipv4Prefix",
    "Ipv6Prefix",
    "NeedData",
    "Pdu",
    "PduFramer",
    "PduType",
    "ResetQuery",
    "RouterKeyPdu",
    "RtrProtocolError",
    "Send",
    "SendDelta",
    "SendFull",
    "SerialNotify",
    "SerialQuery",
    "ServerSession",
    "SessionState",
    "Timers",
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
    "pdu_type_valid",
]
