"""`ClientSession`: the router side of RTR (v0-v2) as a sans-IO state machine keeping its data."""

# Rule 1: every decision about what the router does lives in this file, and every legal
# (state, PDU type) pair is one entry of `ClientSession._transitions`. A pair missing from the
# table is Corrupt Data (Error 0): we drop the connection and this cache's data. Two checks run
# before the table: after negotiation a PDU of another version is an Unexpected Protocol Version
# (Error 8; bis §7), and before it a lower-version Cache Response or Cache Reset is the cache's
# implicit downgrade (digest P3) while a Serial Notify is ignored whatever its version (§7).
#
# Rule 2: nothing here does I/O or reads a clock; the session lives as long as the source (its
# version, session id, serial and data outlive each TCP connection). The I/O layer pumps::
#
#     write(session.connection_made())            # the first query of a new connection
#     session.receive_data(chunk)                 # b"" = EOF
#     while (action := session.next_action()) is not NEED_DATA:
#         Transmit       -> write action.data
#         Publish        -> hand action.snapshot on (complete data); action.synced starts Expire
#         PollAfter      -> after action.delay seconds write session.poll() (if not None)
#         Downgrade      -> log it (a legacy-ASPA downgrade deserves a warning)
#         Disconnect     -> write action.data, close; reconnect now or after a backoff
#     session.connection_lost()                   # on every path out of a connection
#
# and calls `ClientSession.expire` when the data outlived Expire without a successful sync.
#
# Decisions taken where the digest leaves room: the first query of a connection is a Serial
# Query when we hold data of the current version (so a cache restart shows up as Cache Reset),
# else a Reset Query. An Error 4 makes us reconnect at once at the version the cache names
# (one below ours when it names ours or higher; at v0 there is nothing lower and we retry with
# backoff). A v2 ASPA PDU in the pre-standard draft-10..13 layout (StayRTR 0.5, Routinator
# 0.13.0) pins the session at v1 for good: one Downgrade(legacy_aspa=True), a Corrupt Data
# report, reconnect at v1. Payload is staged and applied only at End of Data; duplicates and
# unknown withdrawals are judged against current + staged data. Error 2 keeps the data and polls
# again after Retry (before any End of Data after `no_data_retry`); Error 12 keeps the data;
# every other Error Report from the cache, and every error we report, drops the data.
#
# Hostile caches (issue 12). A Cache Reset answers only a Serial Query: answering a Reset
# Query with it is a protocol error, Disconnect(protocol_error=True), that keeps the data of
# the last End of Data and sends no Error Report (every report we could send is fatal and
# would oblige us to drop good data); the I/O layer backs off before it reconnects. Only a
# lower-version Cache Reset before negotiation (the implicit downgrade) gets one Reset Query at
# that version. One unfinished reply is bounded in memory (`client_bounds`).
#
# The parts: `client_actions` (what the I/O layer is told), `client_staging` (data held and
# staged), `client_runs` (the fast path for runs of prefix PDUs), `client_bounds` (the reply
# bounds); bytes are framed by the shared `PduFramer`.

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, TypeVar

from rtr_protocol.client_actions import (
    ClientAction,
    ClientState,
    Disconnect,
    PollAfter,
    Publish,
    Transmit,
)
from rtr_protocol.client_core import ClientCore
from rtr_protocol.client_runs import V4_PDU_SIZE, V4_RUN, V6_PDU_SIZE, V6_RUN, stage_run
from rtr_protocol.client_staging import KeyStaging
from rtr_protocol.constants import (
    ErrorCode,
    PduType,
)
from rtr_protocol.encoder import encode_error_report
from rtr_protocol.errors import RtrProtocolError, TruncatedPduError
from rtr_protocol.framer import NEED_DATA, NeedData
from rtr_protocol.pdu import (
    AspaPdu,
    CacheResponse,
    EndOfData,
    ErrorReport,
    Ipv4Prefix,
    Ipv6Prefix,
    Pdu,
    RouterKeyPdu,
    SerialNotify,
)
from snapshot.model import Aspa, PayloadError, RouterKey, pack_v4, pack_v6

__all__ = ["LEGACY_ASPA_FIXED", "ClientSession", "is_legacy_aspa"]

#: Fixed part of a pre-standard (draft ~-10 … -13) ASPA PDU: header, flags, AFI flags, provider
#: count (2 octets), customer ASN.
LEGACY_ASPA_FIXED = 16

_K = TypeVar("_K", bytes, RouterKey)
_Handler = Callable[["ClientSession", Pdu], "ClientAction | None"]


def is_legacy_aspa(raw: bytes) -> bool:
    """True when ``raw`` is a v2 ASPA PDU in the pre-standard draft-10..13 layout.

    That layout keeps header octets 2-3 zero and has a 16-octet fixed part (flags, AFI flags,
    16-bit provider count, customer) before the providers, so Length = 16 + 4·count. The current
    layout has the flags in octet 2 and no count; a withdraw with octet 2 zero is 12 octets.
    """
    if len(raw) < LEGACY_ASPA_FIXED or raw[0] != 2 or raw[1] != PduType.ASPA or raw[2] or raw[3]:
        return False
    length = int.from_bytes(raw[4:8], "big")
    count = int.from_bytes(raw[10:12], "big")
    return length == len(raw) == LEGACY_ASPA_FIXED + 4 * count


class ClientSession(ClientCore):
    """The router side of RTR for one cache, across reconnects: `ClientCore` reading PDUs.

    Constructed with `ClientCore`'s arguments; the I/O layer pumps it as the module comment
    says. Every legal (state, PDU type) pair is one entry of `_transitions`.
    """

    def next_action(self) -> ClientAction | NeedData:
        """Process buffered PDUs until one of them calls for an action.

        Returns:
            The next action, `NEED_DATA` when no complete PDU is buffered, and a Disconnect
            again (with no data) once the session is CLOSING.

        Raises:
            RuntimeError: when DISCONNECTED.
        """
        if self._pending:
            return self._pending.popleft()
        state = self._state
        if state is ClientState.DISCONNECTED:
            raise RuntimeError("next_action() without a connection")
        if state is ClientState.CLOSING:
            return Disconnect(self._close_reason)
        transitions, framer = self._transitions, self._framer
        while True:
            if self._state is ClientState.RECEIVING:
                over = self._check_bounds()
                if over is not None:
                    return over
                if self.fast_path and not self._discarding:
                    action = self._prefix_runs()
                    if action is not None:
                        return action
            try:
                pdu = framer.next_pdu()
            except TruncatedPduError as exc:
                return self._close(
                    f"the cache closed the connection inside a PDU ({exc.pending} octets pending)"
                )
            except RtrProtocolError as exc:
                return self._on_framing_error(exc)
            if pdu is NEED_DATA:
                if framer.eof:
                    return self._close("the cache closed the connection")
                return NEED_DATA
            self._raw = framer.last_pdu_bytes
            if pdu.TYPE is not PduType.ERROR_REPORT and pdu.version != self._version:
                action = self._version_mismatch(pdu)
                if action is not None:
                    return action
                if pdu.TYPE is PduType.SERIAL_NOTIFY:
                    continue  # ignored during negotiation, whatever its version (bis §7)
            handler = transitions.get((self._state, pdu.TYPE))
            if handler is None:
                return self._fatal(
                    ErrorCode.CORRUPT_DATA,
                    self._raw,
                    f"{pdu.TYPE.name} PDU unexpected while {self._state.name}",
                )
            action = handler(self, pdu)
            if action is not None:
                return action
            if self._pending:
                return self._pending.popleft()

    def _prefix_runs(self) -> ClientAction | None:
        """Stage whole runs of well-formed prefix PDUs straight from the buffer (`client_runs`)."""
        version, framer = self._version, self._framer
        while True:
            v6 = False
            run = framer.match(V4_RUN[version])
            if not run:
                v6, run = True, framer.match(V6_RUN[version])
                if not run:
                    return None
            keys = self._data.v6 if v6 else self._data.v4
            consumed, announce = stage_run(keys, run, v6=v6)
            framer.skip(consumed)
            if announce is not None:
                size = V6_PDU_SIZE if v6 else V4_PDU_SIZE
                self._raw = run[consumed - size : consumed]
                return self._staging_error(announce=announce)
            if consumed != len(run):
                return None  # a PDU left for the general path
            over = self._check_bounds()
            if over is not None:
                return over

    def _check_bounds(self) -> Disconnect | None:
        """Disconnect when the reply outgrew its bounds (checked only when one could be passed)."""
        offset = self._framer.consumed
        if not self._bounds.due(offset):
            return None
        reason = self._bounds.check(offset, self._data.staged())
        return None if reason is None else self._close(reason, protocol_error=True)

    def _version_mismatch(self, pdu: Pdu) -> ClientAction | None:
        """A non-Error-Report PDU whose version is not ours; None to go on with it."""
        raw = self._raw
        if self._negotiated:
            return self._unexpected_version(pdu.version, raw)
        if pdu.TYPE is PduType.SERIAL_NOTIFY:
            return None
        if pdu.version < self._version and pdu.TYPE in (
            PduType.CACHE_RESPONSE,
            PduType.CACHE_RESET,
        ):
            return self._implicit_downgrade(pdu)
        return self._unexpected_version(pdu.version, raw)

    def _unexpected_version(self, version: int | None, offending: bytes) -> Disconnect:
        text = f"PDU of version {version} on a version {self._version} session"
        # Error 8 does not exist in v0 (RFC 6810): _fatal then closes without a report.
        return self._fatal(ErrorCode.UNEXPECTED_PROTOCOL_VERSION, offending, text)

    def _implicit_downgrade(self, pdu: Pdu) -> ClientAction | None:
        """The cache answered our first query at a lower version (StayRTR, digest P3)."""
        query = self._query
        self._downgrade(
            pdu.version,
            f"the cache answered a version {self._version} query with a version "
            f"{pdu.version} {pdu.TYPE.name}",
        )
        if query is PduType.SERIAL_QUERY:
            # Our session id and serial belong to the old version: start again with a Reset.
            self._pending.append(
                self._close(f"version changed to {pdu.version}", reconnect_now=True)
            )
            return self._pending.popleft()
        if pdu.TYPE is PduType.CACHE_RESET:
            # The downgrade came as a Cache Reset: one Reset Query at the cache's version.
            self._negotiated = True
            self._pending.append(Transmit(self._query_reset()))
            return self._pending.popleft()
        return None  # go on: the reply is the full data at the new version

    def _on_framing_error(self, exc: RtrProtocolError) -> ClientAction:
        if exc.pdu_type == PduType.ERROR_REPORT:
            # Never answer an Error Report, not even a malformed one; the router flushes.
            return self._close(f"malformed Error Report received: {exc.text}", drop_data=True)
        if exc.recoverable and self._version == 2 and is_legacy_aspa(exc.offending):
            return self._on_legacy_aspa(exc.offending)
        if exc.recoverable and exc.version is not None and exc.version != self._version:
            return self._unexpected_version(exc.version, exc.offending)
        return self._fatal(exc.code, exc.offending, exc.text)

    def _on_legacy_aspa(self, raw: bytes) -> ClientAction:
        self.legacy_aspa = True
        text = "pre-standard ASPA PDU layout (draft-ietf-sidrops-8210bis-10..13) at version 2"
        data = encode_error_report(2, ErrorCode.CORRUPT_DATA, raw, text)
        self._abort_staging()
        self._downgrade(
            1,
            "the cache sends ASPA PDUs in the pre-standard layout at version 2 (StayRTR 0.5.x, "
            "Routinator 0.13.0); continuing at version 1 without ASPA",
            legacy_aspa=True,
        )
        self._pending.append(self._close(text, data, reconnect_now=True))
        return self._pending.popleft()

    # ----------------------------------------------------------------- PDU handlers
    def _on_cache_response(self, pdu: Pdu) -> ClientAction | None:
        assert isinstance(pdu, CacheResponse)
        self._negotiated = True
        if (
            self._query is PduType.SERIAL_QUERY
            and not self._discarding
            and pdu.session_id != self._session_id
        ):
            return self._fatal(
                ErrorCode.CORRUPT_DATA,
                self._raw,
                f"Cache Response names session {pdu.session_id}; ours is {self._session_id}",
            )
        self._response_session = pdu.session_id
        self._data.begin(full=self._query is PduType.RESET_QUERY)
        self._bounds.start(self._framer.consumed, *self._data.held())
        self._state = ClientState.RECEIVING
        return None

    def _on_cache_reset(self, _pdu: Pdu) -> ClientAction:
        self._negotiated = True
        if self._query is PduType.RESET_QUERY:
            # Cache Reset answers only a Serial Query (a Reset Query gets the data or Error 2,
            # digest section 5.4): asking again would loop against a cache serving nothing.
            return self._close(
                "the cache answered a Reset Query with Cache Reset (which answers only a "
                "Serial Query): it serves no data",
                protocol_error=True,
            )
        return Transmit(self._query_reset())

    def _on_prefix(self, pdu: Pdu) -> ClientAction | None:
        assert isinstance(pdu, Ipv4Prefix | Ipv6Prefix)
        if self._discarding:
            return None
        try:
            if isinstance(pdu, Ipv4Prefix):
                keys = self._data.v4
                key = pack_v4(pdu.prefix, pdu.prefix_length, pdu.max_length, pdu.asn)
            else:
                keys = self._data.v6
                key = pack_v6(pdu.prefix, pdu.prefix_length, pdu.max_length, pdu.asn)
        except PayloadError as exc:  # pragma: no cover - the decoder checks the same rules
            return self._fatal(ErrorCode.CORRUPT_DATA, self._raw, str(exc))
        return self._stage(keys, key, bool(pdu.flags & 1))

    def _on_router_key(self, pdu: Pdu) -> ClientAction | None:
        assert isinstance(pdu, RouterKeyPdu)
        if self._discarding:
            return None
        try:
            key = RouterKey(pdu.ski, pdu.asn, pdu.spki)
        except PayloadError as exc:  # pragma: no cover - the decoder checks the same rules
            return self._fatal(ErrorCode.CORRUPT_DATA, self._raw, str(exc))
        return self._stage(self._data.keys, key, bool(pdu.flags & 1))

    def _stage(self, keys: KeyStaging[_K], key: _K, announce: bool) -> ClientAction | None:
        if keys.announce(key) if announce else keys.withdraw(key):
            return None
        return self._staging_error(announce=announce)

    def _staging_error(self, *, announce: int | bool) -> Disconnect:
        if announce:
            return self._fatal(
                ErrorCode.DUPLICATE_ANNOUNCEMENT,
                self._raw,
                "announcement of a record already held",
            )
        return self._fatal(
            ErrorCode.WITHDRAWAL_OF_UNKNOWN_RECORD, self._raw, "withdrawal of a record not held"
        )

    def _on_aspa(self, pdu: Pdu) -> ClientAction | None:
        assert isinstance(pdu, AspaPdu)
        if self._discarding:
            return None
        if pdu.announce:
            try:
                self._data.aspas.announce(Aspa(pdu.customer, pdu.providers))
            except PayloadError as exc:
                return self._fatal(ErrorCode.CORRUPT_DATA, self._raw, str(exc))
            return None
        if not self._data.aspas.withdraw(pdu.customer):
            return self._fatal(
                ErrorCode.WITHDRAWAL_OF_UNKNOWN_RECORD,
                self._raw,
                f"withdrawal of the ASPA of AS{pdu.customer}, which is not held",
            )
        return None

    def _on_end_of_data(self, pdu: Pdu) -> ClientAction:
        assert isinstance(pdu, EndOfData)
        if pdu.session_id != self._response_session:
            return self._fatal(
                ErrorCode.CORRUPT_DATA,
                self._raw,
                f"End of Data names session {pdu.session_id}; the Cache Response named "
                f"{self._response_session}",
            )
        if self._discarding:
            # The data expired while this incremental reply was on the way: start afresh.
            self._discarding = False
            return Transmit(self._query_reset())
        changed = self._data.apply()
        self._response_session = None
        self._session_id = pdu.session_id
        self._serial = pdu.serial
        self._timers = pdu.timers if pdu.timers is not None else self.default_timers
        self._synced_once = True
        snapshot = self._snapshot
        if snapshot is None or changed:
            new = self._data.snapshot()
            changed = snapshot is None or new != snapshot
            snapshot = self._snapshot = new
        self._state = ClientState.IDLE
        self._query = None
        self._pending.append(Publish(snapshot, synced=True, changed=changed))
        notified, self._notified = self._notified, None
        if notified is not None and notified != (pdu.session_id, pdu.serial):
            self._pending.append(Transmit(self._query_now()))
        else:
            self._pending.append(PollAfter(float(self._timers.refresh), "refresh"))
        return self._pending.popleft()

    def _on_notify(self, pdu: Pdu) -> ClientAction | None:
        assert isinstance(pdu, SerialNotify)
        if pdu.session_id == self._session_id and pdu.serial == self._serial:
            return None  # we have that already
        if pdu.session_id != self._session_id:
            return Transmit(self._query_reset())  # an unknown session: start afresh
        return Transmit(self._query_now())

    def _on_notify_while_busy(self, pdu: Pdu) -> None:
        assert isinstance(pdu, SerialNotify)
        if self._negotiated:
            self._notified = (pdu.session_id, pdu.serial)  # checked after End of Data
        # Before negotiation a Serial Notify MUST be ignored (bis §7).

    def _on_error_report(self, pdu: Pdu) -> ClientAction:
        assert isinstance(pdu, ErrorReport)
        code = pdu.error_code
        name = code.name if code is not None else f"unknown code {pdu.code}"
        text = f"the cache sent Error Report {name}" + (f": {pdu.text!r}" if pdu.text else "")
        if code is ErrorCode.NO_DATA_AVAILABLE:
            self._negotiated = self._negotiated or pdu.version == self._version
            self._state = ClientState.IDLE
            self._query = None
            self._discarding = False
            self._abort_staging()
            delay = self._timers.retry if self._synced_once else self.no_data_retry
            return PollAfter(float(delay), text, no_data=True)
        if code is ErrorCode.UNSUPPORTED_PROTOCOL_VERSION and not self._negotiated:
            return self._on_unsupported_version(pdu, text)
        if code in (ErrorCode.UNSUPPORTED_PROTOCOL_VERSION, ErrorCode.CACHE_RESTART):
            return self._close(text)  # non-fatal (bis §12): keep the data
        return self._close(text, drop_data=True)

    def _on_unsupported_version(self, pdu: ErrorReport, text: str) -> ClientAction:
        old = self._version
        if old == 0:
            return self._close(f"{text}; the cache speaks no version we do (lowest is 0)")
        new = pdu.version if pdu.version < old else old - 1
        self._downgrade(new, text)
        self._pending.append(
            self._close(f"{text}; reconnecting at version {new}", reconnect_now=True)
        )
        return self._pending.popleft()

    #: The transition table: every (state, PDU type) pair the router accepts. DISCONNECTED and
    #: CLOSING have no entries because `next_action` never consults the table in those states.
    _transitions: ClassVar[dict[tuple[ClientState, PduType], _Handler]] = {
        (ClientState.AWAITING_RESPONSE, PduType.CACHE_RESPONSE): _on_cache_response,
        (ClientState.AWAITING_RESPONSE, PduType.CACHE_RESET): _on_cache_reset,
        (ClientState.AWAITING_RESPONSE, PduType.SERIAL_NOTIFY): _on_notify_while_busy,
        (ClientState.AWAITING_RESPONSE, PduType.ERROR_REPORT): _on_error_report,
        (ClientState.RECEIVING, PduType.IPV4_PREFIX): _on_prefix,
        (ClientState.RECEIVING, PduType.IPV6_PREFIX): _on_prefix,
        (ClientState.RECEIVING, PduType.ROUTER_KEY): _on_router_key,
        (ClientState.RECEIVING, PduType.ASPA): _on_aspa,
        (ClientState.RECEIVING, PduType.END_OF_DATA): _on_end_of_data,
        (ClientState.RECEIVING, PduType.SERIAL_NOTIFY): _on_notify_while_busy,
        (ClientState.RECEIVING, PduType.ERROR_REPORT): _on_error_report,
        (ClientState.IDLE, PduType.SERIAL_NOTIFY): _on_notify,
        (ClientState.IDLE, PduType.ERROR_REPORT): _on_error_report,
    }
