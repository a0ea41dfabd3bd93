"""`ServerSession`: the cache side of one RTR connection as a sans-IO state machine.

Rule 1: every decision about what to answer lives in this file, and every legal
(state, PDU type) pair is one entry of `ServerSession._transitions`. A pair missing from the
table is an Invalid Request (Error 3) and closes the session. One check runs before the table: after
version negotiation a PDU of another version is an Unexpected Protocol Version (bis §7).

Rule 2: nothing here does I/O or reads a clock. The I/O layer pumps::

    session.receive_data(chunk)                  # b"" = EOF
    while (action := session.next_action(publisher.current)) is not NEED_DATA:
        SendFull / SendDelta        -> write the shared encoded reply, then response_sent()
        SendCacheReset / SendError  -> write action.data
        Hold                        -> nothing to write yet (see below)
        Close                       -> write action.data, then close the transport

and asks `ServerSession.serial_notify` / `ServerSession.goodbye` for unsolicited PDUs (rate
limiting Serial Notify by time is the I/O layer's job).

Arrival before data: with ``hold=True`` a query that arrives while there is no data is held
(`Hold`, state HELD) instead of answered with No Data Available. The next `next_action` with a
state answers it; the I/O layer owns the time bound and calls `hold_expired` for the No Data
answer. A v0 session that got No Data and never data says `wants_redial`; `redial` closes it
(a v0 router may ignore a Serial Notify for serial 0 while its own serial is 0).

Decisions taken where the digest leaves room: No Data Available (Error 2) carries no
encapsulated PDU; an error PDU whose type octet says Error Report is never answered, even when
it is malformed; Error Reports we send use the negotiated version, or before negotiation the
offending PDU's version when we support it, else our highest version; a code that does not
exist in that version closes the session without an Error Report; a Serial Query received whole
before our previous answer began, naming another session id, is answered from that answer's
serial (`rtr_protocol.session_pipelined`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

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
from rtr_protocol.constants import (
    MAX_PDU_SIZE,
    MAX_VERSION,
    ErrorCode,
    PduType,
    error_code_valid,
)
from rtr_protocol.encoder import (
    encode_cache_reset,
    encode_error_report,
    encode_serial_notify,
)
from rtr_protocol.errors import RtrProtocolError
from rtr_protocol.framer import NEED_DATA, NeedData, PduFramer
from rtr_protocol.pdu import ErrorReport, Pdu, ResetQuery, SerialQuery
from rtr_protocol.session_pipelined import PipelinedQueries
from rtr_protocol.session_state import SessionState
from snapshot import Serial

if TYPE_CHECKING:
    from snapshot import PublishedState


#: Octets a router may send while its query is held (routers send nothing while they wait).
HELD_BUFFER_LIMIT = 65_536


_Handler = Callable[["ServerSession", Pdu, "PublishedState | None"], Action]


# ------------------------------------------------------------------------------- session


class ServerSession(PipelinedQueries):
    """The cache side of one RTR connection (its parts: `PipelinedQueries`, `HandoverAdoption`).

    Args:
        max_version: highest protocol version offered; the Error 4 reply carries it.
        min_version: lowest version accepted; a lower query gets Error 4 and a close.
        max_pdu_size: largest inbound PDU accepted by the framer.
        hold: hold a query that arrives before there is data (`Hold`) instead of answering
            No Data Available at once.
    """

    __slots__ = (
        "_close_detail",
        "_close_reason",
        "_framer",
        "_held",
        "_hold",
        "_no_data_sent",
        "_pending",
        "_state",
        "_version",
        "max_version",
        "min_version",
    )

    def __init__(
        self,
        *,
        max_version: int = MAX_VERSION,
        min_version: int = 0,
        max_pdu_size: int = MAX_PDU_SIZE,
        hold: bool = False,
    ) -> None:
        """Start in AWAITING_QUERY."""
        if not 0 <= min_version <= max_version <= MAX_VERSION:
            raise ValueError(
                f"need 0 <= min_version ({min_version}) <= max_version ({max_version}) "
                f"<= {MAX_VERSION}"
            )
        self.max_version = max_version
        self.min_version = min_version
        self._framer = PduFramer(max_pdu_size)
        self._state = SessionState.AWAITING_QUERY
        self._version: int | None = None
        self._session_id: int | None = None
        self._last_serial: Serial | None = None
        self._pending: tuple[int, Serial] | None = None
        self._hold = hold
        self._held: SerialQuery | ResetQuery | None = None
        self._no_data_sent = False
        self._close_reason = CloseReason.UNKNOWN
        self._close_detail = ""
        self._adopted = None
        self._adopt_reset = None
        self._ahead = 0
        self._sent_early = False

    # ----------------------------------------------------------------- read-only views
    @property
    def state(self) -> SessionState:
        """The current `SessionState`."""
        return self._state

    @property
    def version(self) -> int | None:
        """The negotiated protocol version, None before negotiation."""
        return self._version

    @property
    def session_id(self) -> int | None:
        """The session id given to the router in the last Cache Response, if any."""
        return self._session_id

    @property
    def last_serial(self) -> Serial | None:
        """The serial of the last complete response written on this connection."""
        return self._last_serial

    @property
    def may_notify(self) -> bool:
        """True when a Serial Notify may be sent now: negotiated and between responses."""
        return self._version is not None and self._state is SessionState.IDLE

    @property
    def held(self) -> bool:
        """True while a query waits for the first data (state HELD)."""
        return self._state is SessionState.HELD

    @property
    def wants_redial(self) -> bool:
        """True for an idle v0 session that got No Data Available and never any data.

        At the first publish the I/O layer closes it with `redial`: a v0 router may ignore a
        Serial Notify for serial 0 while its own serial is 0 (GoBGP 3.10 does), and reconnecting
        makes it ask again.
        """
        return (
            self._no_data_sent
            and self._last_serial is None
            and self._version == 0
            and self._state is SessionState.IDLE
        )

    @property
    def at_boundary(self) -> bool:
        """True when nothing is half read or half answered: the session may be handed over."""
        idle = self._state in (SessionState.AWAITING_QUERY, SessionState.IDLE)
        return idle and self._framer.buffered == 0 and not self._framer.eof

    def adopt(self, version: int, known: tuple[int, Serial] | None = None) -> None:
        """Start at ``version`` (handed over); RuntimeError if started, ValueError: bad version.

        ``known``: the router's (session id, serial), None when it holds no data of ours; what
        such a router is sent first is `rtr_protocol.session_handover`'s.
        """
        if self._state is not SessionState.AWAITING_QUERY or self._framer.buffered:
            raise RuntimeError("adopt() after the session started")
        if not self.min_version <= version <= self.max_version:
            raise ValueError(f"version {version} is outside {self.min_version}..{self.max_version}")
        self._version = version
        self._state = SessionState.IDLE
        self._adopted = known  # not `_session_id`: Cache Reset to its Serial Queries, unless
        # `confirm_kept` finds it in the session this image continued

    # ----------------------------------------------------------------- input
    def receive_data(self, data: bytes) -> None:
        """Feed received bytes; ``b""`` means the router closed its side.

        Raises:
            RuntimeError: when data is fed after EOF.
        """
        if self._state is SessionState.CLOSED:
            return
        self._framer.receive_data(data)

    def next_action(self, state: PublishedState | None) -> Action | NeedData:
        """Process the next buffered PDU and say what to do about it.

        Args:
            state: the currently published data (None while there is none yet).

        Returns:
            One action per received PDU, `NEED_DATA` when no complete PDU is buffered, and
            `Close` again (with no data) once the session is closed.

        Raises:
            RuntimeError: when called while RESPONDING (call `response_sent` first).
        """
        if self._state is SessionState.RESPONDING:
            raise RuntimeError("next_action() while a response is being written")
        if self._state is SessionState.CLOSED:
            return Close(self._close_reason, self._close_detail)
        if self._state is SessionState.HELD:
            return self._on_held(state)
        try:
            pdu = self._framer.next_pdu()
        except RtrProtocolError as exc:
            return self._on_framing_error(exc)
        if pdu is NEED_DATA:
            if self._framer.eof:
                return self._close(CloseReason.PEER_CLOSED, "peer closed")
            return NEED_DATA
        self._pdu_taken()
        if self._adopt_reset == "sent":
            self._adopt_reset = "asked"
        if (
            self._version is not None
            and pdu.version != self._version
            and pdu.TYPE is not PduType.ERROR_REPORT
        ):
            return self._unexpected_version(pdu.version, self._framer.last_pdu_bytes)
        handler = self._transitions.get((self._state, pdu.TYPE))
        if handler is None:
            return self._fatal(
                ErrorCode.INVALID_REQUEST,
                self._framer.last_pdu_bytes,
                f"{pdu.TYPE.name} PDU is not a valid request to a cache",
                pdu.version,
            )
        return handler(self, pdu, state)

    def response_sent(self) -> None:
        """The I/O layer finished writing a SendFull/SendDelta reply; back to IDLE.

        Raises:
            RuntimeError: when no response was being written.
        """
        if self._state is not SessionState.RESPONDING or self._pending is None:
            raise RuntimeError("response_sent() without a response in progress")
        self._session_id, self._last_serial = self._pending
        self._pending = None
        self._state = SessionState.IDLE

    def hold_expired(self) -> SendError:
        """The I/O layer's hold time ran out: answer the held query with No Data Available.

        Raises:
            RuntimeError: when no query is held.
        """
        held = self._held
        if self._state is not SessionState.HELD or held is None:
            raise RuntimeError("hold_expired() without a held query")
        self._held = None
        self._state = SessionState.IDLE
        return self._no_data(held.version)

    def redial(self) -> Close:
        """Close a session that `wants_redial` (no Error Report: the router should come back).

        Raises:
            RuntimeError: when the session does not want a redial.
        """
        if not self.wants_redial:
            raise RuntimeError("redial() on a session that does not want one")
        return self._close(CloseReason.REDIAL, "closed at the first data so the router redials")

    # ----------------------------------------------------------------- output
    def serial_notify(self, state: PublishedState) -> bytes | None:
        """A Serial Notify for ``state`` at the negotiated version, or None when not allowed.

        Never before negotiation (bis §7), never inside a response (digest P16), never after
        close. Rate limiting (one per minute, bis §8.2) is the caller's job.
        """
        if not self.may_notify or self._version is None:
            return None
        version = self._version
        if self.kept_unconfirmed:
            return self._adopted_notify(version, state)
        return encode_serial_notify(version, state.session_ids.for_version(version), state.serial)

    def goodbye(self, code: ErrorCode, text: str = "") -> bytes:
        """End the session from our side; returns the Error Report to flush (maybe b"").

        For TRANSPORT_FAILURE (write stall), CACHE_RESTART and CACHE_SHUTDOWN. Returns b""
        when the version is not negotiated, the session is already closed, or ``code`` does
        not exist in the negotiated version (v0/v1 have no codes 9-13).
        """
        if self._state is SessionState.CLOSED:
            return b""
        version = self._version
        data = b""
        if version is not None and error_code_valid(code, version):
            data = encode_error_report(version, code, b"", text)
        self._close(CloseReason.SHUTDOWN, f"goodbye: {ErrorCode(code).name}")
        return data

    # ----------------------------------------------------------------- helpers
    def _close(
        self,
        reason: CloseReason,
        detail: str,
        data: bytes = b"",
        error: ErrorCode | None = None,
    ) -> Close:
        self._state = SessionState.CLOSED
        self._close_reason = reason
        self._close_detail = detail
        self._pending = None
        return Close(reason, detail, data, error if data else None)

    def _reply_version(self, pdu_version: int | None) -> int:
        if self._version is not None:
            return self._version
        if pdu_version is not None and self.min_version <= pdu_version <= self.max_version:
            return pdu_version
        return self.max_version

    def _error(self, version: int, code: ErrorCode, offending: bytes, text: str) -> bytes:
        return encode_error_report(version, code, offending, text)

    def _fatal(
        self, code: ErrorCode, offending: bytes, text: str, pdu_version: int | None
    ) -> Close:
        """Close with an Error Report, if ``code`` exists in the reply version."""
        version = self._reply_version(pdu_version)
        data = b""
        if error_code_valid(code, version):
            data = self._error(version, code, offending, text)
        return self._close(CloseReason.PROTOCOL_ERROR, text, data, code)

    def _unexpected_version(self, pdu_version: int | None, offending: bytes) -> Close:
        text = f"PDU of version {pdu_version} on a version {self._version} session"
        # Error 8 does not exist in v0 (RFC 6810): _fatal then closes without a report.
        return self._fatal(ErrorCode.UNEXPECTED_PROTOCOL_VERSION, offending, text, None)

    def _unsupported_version(self, offending: bytes, text: str) -> SendError:
        """Error 4 carrying our highest version (bis §7, digest P1); the router may retry."""
        code = ErrorCode.UNSUPPORTED_PROTOCOL_VERSION
        return SendError(code, self._error(self.max_version, code, offending, text))

    def _on_framing_error(self, exc: RtrProtocolError) -> Action:
        if exc.pdu_type == PduType.ERROR_REPORT:
            # Never answer an Error Report, not even a malformed one (bis §5.8, §12).
            return self._close(
                CloseReason.PROTOCOL_ERROR, f"malformed Error Report received: {exc.text}"
            )
        if exc.recoverable and self._version is not None and exc.version != self._version:
            return self._unexpected_version(exc.version, exc.offending)
        if exc.code is ErrorCode.UNSUPPORTED_PROTOCOL_VERSION and self._version is None:
            return self._unsupported_version(exc.offending, exc.text)
        return self._fatal(exc.code, exc.offending, exc.text, exc.version)

    def _negotiate(self, pdu: SerialQuery | ResetQuery) -> Action | None:
        """Fix the session version from the first query, or answer Error 4."""
        q = pdu.version
        raw = self._framer.last_pdu_bytes
        if q > self.max_version:
            return self._unsupported_version(
                raw, f"version {q} is not supported; highest is {self.max_version}"
            )
        if q < self.min_version:
            text = f"version {q} is no longer supported; lowest is {self.min_version}"
            code = ErrorCode.UNSUPPORTED_PROTOCOL_VERSION
            data = self._error(self.max_version, code, raw, text)
            return self._close(CloseReason.PROTOCOL_ERROR, text, data, code)
        self._version = q
        self._state = SessionState.IDLE
        return None

    def _no_data(self, version: int) -> SendError:
        self._no_data_sent = True
        code = ErrorCode.NO_DATA_AVAILABLE
        return SendError(code, self._error(version, code, b"", "No data available"))

    def _hold_query(self, pdu: SerialQuery | ResetQuery) -> Hold:
        self._held = pdu
        self._state = SessionState.HELD
        return Hold(pdu.version, isinstance(pdu, SerialQuery))

    def _on_held(self, state: PublishedState | None) -> Action | NeedData:
        """HELD: answer the held query once there is data; until then read only for EOF."""
        held = self._held
        assert held is not None
        if state is None:
            if self._framer.eof:
                return self._close(CloseReason.PEER_CLOSED, "peer closed")
            if self._framer.buffered > HELD_BUFFER_LIMIT:
                return self._close(
                    CloseReason.PROTOCOL_ERROR, "router kept sending while its query was held"
                )
            return NEED_DATA
        self._held = None
        self._state = SessionState.IDLE
        if isinstance(held, SerialQuery):
            return self._on_serial_query(held, state)
        return self._on_reset_query(held, state)

    def _respond(self, action: SendFull | SendDelta) -> SendFull | SendDelta:
        self._pending = (action.session_id, action.state.serial)
        self._state = SessionState.RESPONDING
        self._answer_began()
        return action

    # ----------------------------------------------------------------- PDU handlers
    def _on_first_query(self, pdu: Pdu, state: PublishedState | None) -> Action:
        assert isinstance(pdu, SerialQuery | ResetQuery)
        refused = self._negotiate(pdu)
        if refused is not None:
            return refused
        if isinstance(pdu, SerialQuery):
            return self._on_serial_query(pdu, state)
        return self._on_reset_query(pdu, state)

    def _on_reset_query(self, pdu: Pdu, state: PublishedState | None) -> Action:
        assert isinstance(pdu, ResetQuery)
        version = pdu.version
        if state is None:
            return self._hold_query(pdu) if self._hold else self._no_data(version)
        return self._respond(SendFull(version, state))

    def _on_serial_query(self, pdu: Pdu, state: PublishedState | None) -> Action:
        assert isinstance(pdu, SerialQuery)
        version = pdu.version
        if state is None:
            return self._hold_query(pdu) if self._hold else self._no_data(version)
        if self.kept_unconfirmed and not self.confirm_kept(state):  # the old image's data
            return SendCacheReset(version, encode_cache_reset(version))
        if self._session_id is not None and pdu.session_id != self._session_id:
            if early := self._early_serial_query(pdu, state):
                return self._respond(early) if isinstance(early, SendDelta) else early
            return self._fatal(
                ErrorCode.CORRUPT_DATA,
                self._framer.last_pdu_bytes,
                f"session id {pdu.session_id} differs from the {self._session_id} we gave",
                version,
            )
        if pdu.session_id != state.session_ids.for_version(version):
            return SendCacheReset(version, encode_cache_reset(version))
        from_serial = Serial(pdu.serial)
        delta = state.delta_since(from_serial)
        if delta is None:
            return SendCacheReset(version, encode_cache_reset(version))
        return self._respond(SendDelta(version, state, from_serial, delta))

    def _on_error_report(self, pdu: Pdu, _state: PublishedState | None) -> Action:
        assert isinstance(pdu, ErrorReport)
        code = pdu.error_code
        name = code.name if code is not None else f"unknown code {pdu.code}"
        return self._close(
            CloseReason.ROUTER_ERROR, f"router sent Error Report {name}: {pdu.text!r}"
        )

    #: The transition table: every (state, PDU type) pair the cache accepts. RESPONDING and
    #: CLOSED have no entries because `next_action` never consults the table in those states.
    _transitions: ClassVar[dict[tuple[SessionState, PduType], _Handler]] = {
        (SessionState.AWAITING_QUERY, PduType.SERIAL_QUERY): _on_first_query,
        (SessionState.AWAITING_QUERY, PduType.RESET_QUERY): _on_first_query,
        (SessionState.AWAITING_QUERY, PduType.ERROR_REPORT): _on_error_report,
        (SessionState.IDLE, PduType.SERIAL_QUERY): _on_serial_query,
        (SessionState.IDLE, PduType.RESET_QUERY): _on_reset_query,
        (SessionState.IDLE, PduType.ERROR_REPORT): _on_error_report,
    }
