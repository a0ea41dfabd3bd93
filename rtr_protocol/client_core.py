"""`ClientCore`: the router session's state (connection, version, data) and the moves on it."""

from __future__ import annotations

from collections import deque

from rtr_protocol.client_actions import (
    ClientAction,
    ClientState,
    Disconnect,
    Downgrade,
    Publish,
)
from rtr_protocol.client_bounds import (
    REPLY_BYTE_FLOOR,
    REPLY_GROWTH,
    REPLY_RECORD_FLOOR,
    ReplyBounds,
)
from rtr_protocol.client_staging import Staging
from rtr_protocol.constants import (
    HEADER_SIZE,
    MAX_PDU_SIZE,
    MAX_VERSION,
    ErrorCode,
    PduType,
    Timers,
    error_code_valid,
)
from rtr_protocol.encoder import encode_error_report
from rtr_protocol.framer import PduFramer
from rtr_protocol.pdu import ResetQuery, SerialQuery, encode
from snapshot.snapshot import Snapshot

__all__ = ["ClientCore"]


class ClientCore:
    """The state of the router side of RTR for one cache, across reconnects, and its moves.

    `ClientSession` adds the reading of PDUs; this class keeps the connection, the version,
    the data held and staged, and changes them (query, close, drop, downgrade).

    Args:
        max_version: the version the first query is sent at; only ever lowered afterwards.
        max_pdu_size: largest inbound PDU accepted (a longer Length is Corrupt Data).
        default_timers: the intervals used until an End of Data brings the cache's own (and
            for v0, whose End of Data has none).
        no_data_retry: seconds before asking again after Error 2 (No Data) when no End of
            Data has told us the cache's Retry yet.
        fast_path: stage runs of prefix PDUs straight from the buffer (same results, about
            10x faster); False sends every PDU through the transition table.
        reply_record_floor: records one unfinished reply may stage at least; the bound is
            ``max(reply_record_floor, reply_growth × records held)``.
        reply_byte_floor: octets one unfinished reply may take at least; the bound is
            ``max(reply_byte_floor, reply_growth × wire size of the data held)``.
        reply_growth: how many times the held data a reply may stage or take.
    """

    def __init__(
        self,
        *,
        max_version: int = MAX_VERSION,
        max_pdu_size: int = MAX_PDU_SIZE,
        default_timers: Timers | None = None,
        no_data_retry: float = 60.0,
        fast_path: bool = True,
        reply_record_floor: int = REPLY_RECORD_FLOOR,
        reply_byte_floor: int = REPLY_BYTE_FLOOR,
        reply_growth: int = REPLY_GROWTH,
    ) -> None:
        """Start DISCONNECTED, holding no data."""
        if not 0 <= max_version <= MAX_VERSION:
            raise ValueError(f"max_version must be in 0..{MAX_VERSION}, got {max_version}")
        if no_data_retry <= 0:
            raise ValueError("no_data_retry must be positive")
        if max_pdu_size < HEADER_SIZE:
            raise ValueError(f"max_pdu_size must be at least {HEADER_SIZE}")
        self._bounds = ReplyBounds(reply_record_floor, reply_byte_floor, reply_growth)
        self.max_version = max_version
        self.max_pdu_size = max_pdu_size
        self.default_timers = default_timers if default_timers is not None else Timers()
        self.no_data_retry = no_data_retry
        self.fast_path = fast_path
        #: True once the cache sent the pre-standard ASPA layout (the session stays at v1).
        self.legacy_aspa = False
        self._version = max_version
        self._state = ClientState.DISCONNECTED
        self._framer = PduFramer(max_pdu_size)
        #: The raw bytes of the PDU being handled (for Error Reports).
        self._raw = b""
        self._pending: deque[ClientAction] = deque()
        self._close_reason = ""
        self._negotiated = False
        self._query: PduType | None = None
        self._response_session: int | None = None
        self._notified: tuple[int, int] | None = None
        self._discarding = False
        # The data: None until the first End of Data and after a drop.
        self._session_id: int | None = None
        self._serial: int | None = None
        self._timers = self.default_timers
        self._synced_once = False
        self._snapshot: Snapshot | None = None
        self._data = Staging()

    # ----------------------------------------------------------------- read-only views
    @property
    def reply_record_floor(self) -> int:
        """Records one unfinished reply may stage at least."""
        return self._bounds.record_floor

    @property
    def reply_byte_floor(self) -> int:
        """Octets one unfinished reply may take at least."""
        return self._bounds.byte_floor

    @property
    def reply_growth(self) -> int:
        """How many times the held data one reply may stage or take."""
        return self._bounds.growth

    @property
    def state(self) -> ClientState:
        """The current `ClientState`."""
        return self._state

    @property
    def version(self) -> int:
        """The protocol version queries are sent at."""
        return self._version

    @property
    def negotiated(self) -> bool:
        """True once the cache answered at our version on the current connection."""
        return self._negotiated

    @property
    def session_id(self) -> int | None:
        """The cache's session id of the data we hold (None without data)."""
        return self._session_id

    @property
    def serial(self) -> int | None:
        """The serial of the data we hold (None without data)."""
        return self._serial

    @property
    def timers(self) -> Timers:
        """Refresh/Retry/Expire of the last End of Data (`default_timers` before one, or v0)."""
        return self._timers

    @property
    def snapshot(self) -> Snapshot | None:
        """The data we hold, complete as of the last End of Data; None when we hold none."""
        return self._snapshot

    @property
    def busy(self) -> bool:
        """True while a query is unanswered (the I/O layer bounds this wait)."""
        return self._state in (ClientState.AWAITING_RESPONSE, ClientState.RECEIVING)

    # ----------------------------------------------------------------- connection life
    def connection_made(self) -> bytes:
        """A transport is up: returns the first query to write.

        Raises:
            RuntimeError: when the session is not DISCONNECTED.
        """
        if self._state is not ClientState.DISCONNECTED:
            raise RuntimeError(f"connection_made() in state {self._state.name}")
        self._framer = PduFramer(self.max_pdu_size)
        self._negotiated = False
        self._notified = None
        self._pending.clear()
        return self._query_now()

    def connection_lost(self) -> None:
        """The transport is gone (after a Disconnect, EOF, an I/O error or cancellation).

        Staged payload is discarded; the data as of the last End of Data stays.
        """
        self._state = ClientState.DISCONNECTED
        self._query = None
        self._negotiated = False
        self._discarding = False
        self._pending.clear()
        self._abort_staging()

    def poll(self) -> bytes | None:
        """The Refresh (or Retry) timer fired: the query to write, or None when not IDLE."""
        if self._state is not ClientState.IDLE:
            return None
        return self._query_now()

    def expire(self) -> bool:
        """Drop the data because it outlived Expire; True when there was data to drop.

        An incremental reply in flight would apply to data we no longer hold, so it is read to
        its End of Data and then answered with a Reset Query.
        """
        had = self._snapshot is not None
        if self.busy and self._query is PduType.SERIAL_QUERY:
            self._discarding = True
        self._drop_data()
        return had

    # ----------------------------------------------------------------- input
    def receive_data(self, data: bytes) -> None:
        """Feed received bytes; ``b""`` means the cache closed its side.

        Raises:
            RuntimeError: when DISCONNECTED, or data is fed after EOF.
        """
        if self._state is ClientState.DISCONNECTED:
            raise RuntimeError("receive_data() without a connection")
        if self._state is not ClientState.CLOSING:
            self._framer.receive_data(data)

    # ----------------------------------------------------------------- helpers
    def _query_now(self) -> bytes:
        """Send a Serial Query when we hold data of this version, else a Reset Query."""
        if self._snapshot is not None and self._session_id is not None and self._serial is not None:
            self._state = ClientState.AWAITING_RESPONSE
            self._discarding = False
            self._abort_staging()
            self._query = PduType.SERIAL_QUERY
            return encode(SerialQuery(self._version, self._session_id, self._serial))
        return self._query_reset()

    def _query_reset(self) -> bytes:
        self._state = ClientState.AWAITING_RESPONSE
        self._discarding = False
        self._abort_staging()
        self._query = PduType.RESET_QUERY
        return encode(ResetQuery(self._version))

    def _close(
        self,
        reason: str,
        data: bytes = b"",
        *,
        drop_data: bool = False,
        reconnect_now: bool = False,
        protocol_error: bool = False,
    ) -> Disconnect:
        self._state = ClientState.CLOSING
        self._close_reason = reason
        self._abort_staging()
        if drop_data:
            self._drop_data()
        return Disconnect(reason, data, drop_data, reconnect_now, protocol_error)

    def _fatal(self, code: ErrorCode, offending: bytes, text: str) -> Disconnect:
        """Report ``code`` (when our version has it), drop the connection and the data."""
        data = b""
        if error_code_valid(code, self._version):
            data = encode_error_report(self._version, code, offending, text)
        return self._close(text, data, drop_data=True, protocol_error=True)

    def _drop_data(self) -> None:
        self._snapshot = None
        self._session_id = None
        self._serial = None
        self._data.drop_current()

    def _abort_staging(self) -> None:
        self._response_session = None
        self._data.begin()

    def _downgrade(self, new: int, reason: str, *, legacy_aspa: bool = False) -> None:
        """Lower the version; queue a Downgrade and, when data shrinks, a Publish."""
        old = self._version
        self._version = new
        self._pending.append(Downgrade(old, new, reason, legacy_aspa))
        # Session ids are per version (bis §5.1): the next query is a Reset Query.
        self._session_id = None
        self._serial = None
        if self._data.trim(new) and self._snapshot is not None:
            self._snapshot = self._data.snapshot()
            self._pending.append(Publish(self._snapshot, synced=False))
