"""ServerSession: the transition table crossed with every state, PDU type and version."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtr_protocol import (
    NEED_DATA,
    PDU_TYPES_BY_VERSION,
    AspaPdu,
    CacheReset,
    CacheResponse,
    Close,
    CloseReason,
    EndOfData,
    ErrorCode,
    ErrorReport,
    Ipv4Prefix,
    Ipv6Prefix,
    Pdu,
    PduType,
    ResetQuery,
    RouterKeyPdu,
    SendCacheReset,
    SendDelta,
    SendError,
    SendFull,
    SerialNotify,
    SerialQuery,
    ServerSession,
    SessionState,
    Timers,
    decode,
    encode,
    encode_delta_response,
    encode_full_response,
)
from rtr_protocol.actions import Action
from rtr_protocol.framer import NeedData
from snapshot import Aspa, PublishedState, Publisher, RouterKey, Serial, SessionIds, Snapshot, Vrp
from tests.protocol.strategies import frame_chunks

IDS = SessionIds(0x1000, 0x2001, 0x3002)
SKI = bytes(range(20))
SNAP_A = Snapshot.build(
    vrps=[Vrp.parse("192.0.2.0/24", 24, 64496), Vrp.parse("2001:db8::/32", 48, 64497)],
    aspas=[Aspa(64496, (64497,))],
    router_keys=[RouterKey(SKI, 64496, b"\x30\x01\x00")],
)
SNAP_B = Snapshot.build(
    vrps=[Vrp.parse("192.0.2.0/24", 24, 64496), Vrp.parse("198.51.100.0/24", 24, 64498)],
    aspas=[Aspa(64496, (64497, 64498))],
)


def states(*snapshots: Snapshot, ids: SessionIds = IDS) -> list[PublishedState]:
    publisher = Publisher(ids)
    out = []
    for snap in snapshots:
        state = publisher.publish(snap)
        assert state is not None
        out.append(state)
    return out


STATE_A, STATE_B = states(SNAP_A, SNAP_B)


def feed(session: ServerSession, *pdus: bytes) -> None:
    for raw in pdus:
        session.receive_data(raw)


def act(session: ServerSession, state: PublishedState | None = STATE_B) -> Action | NeedData:
    return session.next_action(state)


def reply(action: SendFull | SendDelta, timers: Timers | None = None) -> list[bytes]:
    """The wire chunks of a full or delta reply, as the server's shared encoder makes them."""
    state, timers = action.state, timers or Timers()
    if isinstance(action, SendFull):
        return encode_full_response(
            state.snapshot, action.version, action.session_id, state.serial, timers
        )
    return encode_delta_response(
        action.delta, action.version, action.session_id, state.serial, timers
    )


def error_of(action: Action | NeedData) -> ErrorReport:
    assert isinstance(action, SendError | Close)
    pdu = decode(action.data)
    assert isinstance(pdu, ErrorReport)
    return pdu


def negotiated(version: int, **kwargs: Any) -> ServerSession:
    """A session that answered one Reset Query at ``version`` and is IDLE again."""
    session = ServerSession(**kwargs)
    feed(session, encode(ResetQuery(version)))
    action = act(session)
    assert isinstance(action, SendFull)
    session.response_sent()
    assert session.state is SessionState.IDLE
    return session


# ------------------------------------------------------------------------------- the matrix

ALL_TYPES = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 255]
ALL_VERSIONS = [0, 1, 2, 3]


def raw_pdu(pdu_type: int, version: int) -> bytes:
    """A well-formed PDU of ``pdu_type`` whose version octet is ``version``.

    Types not defined in ``version`` are built with the layout of the version that has them.
    A Serial Query names STATE_B's session and serial, so it is answered with a delta.
    """
    layout = min(version, 2)
    sid = IDS.for_version(layout)
    pdus: dict[int, Pdu] = {
        0: SerialNotify(layout, sid, 5),
        1: SerialQuery(layout, sid, STATE_B.serial.value),
        2: ResetQuery(layout),
        3: CacheResponse(layout, sid),
        4: Ipv4Prefix(layout, 1, 24, 24, 0xC000_0200, 64496),
        6: Ipv6Prefix(layout, 1, 32, 48, 0x2001_0DB8 << 96, 64496),
        7: EndOfData(layout, sid, 5, None if layout == 0 else Timers()),
        8: CacheReset(layout),
        9: RouterKeyPdu(max(layout, 1), 1, SKI, 64496, b"\x30"),
        10: ErrorReport(layout, 1, b"", "oops"),
        11: AspaPdu(2, 0, 64496),
    }
    pdu = pdus.get(pdu_type)
    raw = bytearray(encode(pdu) if pdu is not None else bytes([0, pdu_type, 0, 0, 0, 0, 0, 8]))
    raw[0] = version
    return bytes(raw)


def expected(state: SessionState, pdu_type: int, version: int) -> tuple[str, tuple[int, int]]:
    """The rules of the digest §5, written as a table: (action, (error code, its version))."""
    nothing = (-1, -1)
    if state is SessionState.RESPONDING:
        return "raise", nothing
    if state is SessionState.CLOSED:
        return "close", nothing
    session_version = 1 if state is SessionState.IDLE else None
    if pdu_type == PduType.ERROR_REPORT:
        return "close", nothing  # never answer an Error Report
    if session_version is not None and version != session_version:
        return "close", (ErrorCode.UNEXPECTED_PROTOCOL_VERSION, session_version)
    if session_version is None and version > 2:
        return "send", (ErrorCode.UNSUPPORTED_PROTOCOL_VERSION, 2)  # our max; keep reading
    reply_version = version if session_version is None else session_version
    if pdu_type not in PDU_TYPES_BY_VERSION[version]:
        return "close", (ErrorCode.UNSUPPORTED_PDU_TYPE, reply_version)
    if pdu_type == PduType.SERIAL_QUERY:
        return "delta", nothing
    if pdu_type == PduType.RESET_QUERY:
        return "full", nothing
    return "close", (ErrorCode.INVALID_REQUEST, reply_version)


def session_in(state: SessionState) -> ServerSession:
    if state is SessionState.AWAITING_QUERY:
        return ServerSession()
    session = negotiated(1)
    if state is SessionState.RESPONDING:
        feed(session, encode(ResetQuery(1)))
        assert isinstance(act(session), SendFull)
    elif state is SessionState.CLOSED:
        session.goodbye(ErrorCode.INTERNAL_ERROR, "bye")
    assert session.state is state
    return session


NEXT_STATE = {
    "send": SessionState.AWAITING_QUERY,
    "delta": SessionState.RESPONDING,
    "full": SessionState.RESPONDING,
    "close": SessionState.CLOSED,
}


@pytest.mark.parametrize("version", ALL_VERSIONS)
@pytest.mark.parametrize("pdu_type", ALL_TYPES)
# HELD parses nothing until the held query is answered (tests/protocol/test_session_hold.py).
@pytest.mark.parametrize(
    "state", [s for s in SessionState if s is not SessionState.HELD], ids=lambda s: s.name
)
def test_transition_matrix(state: SessionState, pdu_type: int, version: int) -> None:
    session = session_in(state)
    raw = raw_pdu(pdu_type, version)
    kind, (code, error_version) = expected(state, pdu_type, version)
    session.receive_data(raw)
    if kind == "raise":
        with pytest.raises(RuntimeError):
            act(session)
        assert session.state is SessionState.RESPONDING
        return
    action = act(session)
    assert session.state is NEXT_STATE[kind]
    if kind == "delta":
        assert isinstance(action, SendDelta)
        assert action.version == version
        assert action.delta.is_empty()
        assert session.version == version
    elif kind == "full":
        assert isinstance(action, SendFull)
        assert action.version == version
        assert session.version == version
    elif kind == "send":
        assert isinstance(action, SendError)
        assert session.version is None
    else:
        assert isinstance(action, Close)
        if code < 0:
            assert action.data == b""
    if code < 0:
        return
    report = error_of(action)
    assert (report.code, report.version) == (code, error_version)
    assert report.pdu == raw


def test_transition_table_entries() -> None:
    assert set(ServerSession._transitions) == {
        (s, t)
        for s in (SessionState.AWAITING_QUERY, SessionState.IDLE)
        for t in (PduType.SERIAL_QUERY, PduType.RESET_QUERY, PduType.ERROR_REPORT)
    }


# ------------------------------------------------------------------------------- negotiation


def test_error_4_carries_max_version_digest_vector() -> None:
    session = ServerSession(max_version=1)
    feed(session, encode(ResetQuery(2)))
    text = b"version 2 is not supported; highest is 1"
    # The digest vector (version 1, code 4, the v2 query echoed) plus our diagnostic text.
    # fmt: off
    assert act(session) == SendError(ErrorCode.UNSUPPORTED_PROTOCOL_VERSION, bytes([
        0x01, 0x0A, 0x00, 0x04,  0, 0, 0, 24 + len(text),  0, 0, 0, 8,
        0x02, 0x02, 0x00, 0x00,  0x00, 0x00, 0x00, 0x08,  0, 0, 0, len(text),
    ]) + text)
    # fmt: on
    assert session.state is SessionState.AWAITING_QUERY
    assert session.version is None
    assert not session.may_notify


def test_retry_after_error_4_on_same_connection() -> None:
    session = ServerSession(max_version=1)
    feed(session, encode(SerialQuery(2, IDS.v2, 1)), encode(ResetQuery(1)))
    assert error_of(act(session)).code == ErrorCode.UNSUPPORTED_PROTOCOL_VERSION
    action = act(session)
    assert action == SendFull(1, STATE_B)
    assert session.version == 1


def test_unknown_version_gets_error_4_and_session_stays_usable() -> None:
    session = ServerSession()
    feed(session, bytes([7, 2, 0, 0, 0, 0, 0, 8]), encode(ResetQuery(2)))
    report = error_of(act(session))
    assert (report.version, report.code) == (2, ErrorCode.UNSUPPORTED_PROTOCOL_VERSION)
    assert report.pdu == bytes([7, 2, 0, 0, 0, 0, 0, 8])
    assert isinstance(act(session), SendFull)


def test_version_below_min_gets_error_4_then_close() -> None:
    session = ServerSession(min_version=1, max_version=2)
    feed(session, encode(ResetQuery(0)))
    action = act(session)
    assert isinstance(action, Close)
    report = error_of(action)
    assert (report.version, report.code) == (2, ErrorCode.UNSUPPORTED_PROTOCOL_VERSION)
    assert report.pdu == encode(ResetQuery(0))
    assert session.state is SessionState.CLOSED


@pytest.mark.parametrize("version", [0, 1, 2])
def test_downgrade_accepted(version: int) -> None:
    session = ServerSession()
    feed(session, encode(ResetQuery(version)))
    assert act(session) == SendFull(version, STATE_B)
    assert session.version == version


def test_v0_version_change_closes_without_error() -> None:
    session = negotiated(0)
    feed(session, encode(ResetQuery(1)))
    action = act(session)
    assert isinstance(action, Close)
    assert (action.reason, action.data, action.error) == (CloseReason.PROTOCOL_ERROR, b"", None)
    assert session.state is SessionState.CLOSED
    assert act(session) == Close(CloseReason.PROTOCOL_ERROR, action.detail)  # stays closed


@pytest.mark.parametrize(("have", "got"), [(1, 2), (2, 1), (1, 0), (2, 0)])
def test_error_8_on_v1_v2(have: int, got: int) -> None:
    session = negotiated(have)
    raw = encode(SerialQuery(got, IDS.for_version(got), 0))
    feed(session, raw)
    action = act(session)
    assert isinstance(action, Close)
    report = error_of(action)
    assert (report.version, report.code, report.pdu) == (
        have,
        ErrorCode.UNEXPECTED_PROTOCOL_VERSION,
        raw,
    )


def test_error_report_of_other_version_closes_silently() -> None:
    session = negotiated(2)
    feed(session, encode(ErrorReport(1, ErrorCode.INTERNAL_ERROR, b"", "x")))
    action = act(session)
    assert isinstance(action, Close)
    assert action.data == b""
    assert action.reason is CloseReason.ROUTER_ERROR
    assert "INTERNAL_ERROR" in action.detail


def test_malformed_error_report_closes_silently() -> None:
    session = negotiated(2)
    feed(session, bytes([2, 10, 0, 0, 0, 0, 0, 16, 0, 0, 0, 9, 0, 0, 0, 0]))
    action = act(session)
    assert isinstance(action, Close)
    assert action.data == b""


def test_unknown_error_code_closes_silently() -> None:
    session = ServerSession()
    feed(session, bytes([2, 10, 0, 99, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0]))
    action = act(session)
    assert isinstance(action, Close)
    assert action.data == b""
    assert "unknown code 99" in action.detail


# ------------------------------------------------------------------------------- serial query


def test_serial_query_unknown_session_on_fresh_connection_is_cache_reset() -> None:
    session = ServerSession()
    feed(session, encode(SerialQuery(1, 0xDEAD, STATE_B.serial.value)))
    assert act(session) == SendCacheReset(1, encode(CacheReset(1)))
    assert session.state is SessionState.IDLE
    assert session.version == 1
    assert session.session_id is None


def test_serial_query_session_mismatch_on_established_session_is_error_0() -> None:
    session = negotiated(1)
    assert session.session_id == IDS.v1
    raw = encode(SerialQuery(1, 0xDEAD, STATE_B.serial.value))
    feed(session, raw)
    action = act(session)
    assert isinstance(action, Close)
    report = error_of(action)
    assert (report.version, report.code, report.pdu) == (1, ErrorCode.CORRUPT_DATA, raw)


def test_serial_query_after_cache_restart_with_new_session_ids_is_cache_reset() -> None:
    session = negotiated(2)
    (restarted,) = states(SNAP_B, ids=SessionIds(0x0A0A, 0x0B0B, 0x0C0C))
    feed(session, encode(SerialQuery(2, IDS.v2, STATE_B.serial.value)))
    assert act(session, restarted) == SendCacheReset(2, encode(CacheReset(2)))
    assert session.state is SessionState.IDLE


@pytest.mark.parametrize("serial", [2, 100, 0x8000_0000, 0xFFFF_FFFF])
def test_serial_outside_window_is_cache_reset(serial: int) -> None:
    session = ServerSession()
    feed(session, encode(SerialQuery(2, IDS.v2, serial)))
    assert act(session) == SendCacheReset(2, encode(CacheReset(2)))


def test_serial_current_gives_empty_delta() -> None:
    session = ServerSession()
    feed(session, encode(SerialQuery(1, IDS.v1, STATE_B.serial.value)))
    action = act(session)
    assert isinstance(action, SendDelta)
    assert action.delta.is_empty()
    assert action.from_serial == STATE_B.serial
    chunks = reply(action)
    assert frame_chunks(chunks) == [
        CacheResponse(1, IDS.v1),
        EndOfData(1, IDS.v1, STATE_B.serial.value, Timers()),
    ]
    session.response_sent()
    assert session.last_serial == STATE_B.serial
    assert session.session_id == IDS.v1


def test_serial_in_window_gives_delta() -> None:
    session = ServerSession()
    feed(session, encode(SerialQuery(2, IDS.v2, STATE_A.serial.value)))
    action = act(session)
    assert isinstance(action, SendDelta)
    assert action.delta == STATE_B.delta_since(STATE_A.serial)
    assert not action.delta.is_empty()
    assert action.session_id == IDS.v2
    out = frame_chunks(reply(action, Timers(60, 30, 600)))
    assert out[0] == CacheResponse(2, IDS.v2)
    assert out[-1] == EndOfData(2, IDS.v2, STATE_B.serial.value, Timers(60, 30, 600))
    assert AspaPdu(2, 1, 64496, (64497, 64498)) in out


@pytest.mark.parametrize("query", [ResetQuery(1), SerialQuery(1, IDS.v1, 0)])
def test_no_data_is_error_2_and_stays_open(query: ResetQuery | SerialQuery) -> None:
    session = ServerSession()
    feed(session, encode(query))
    action = act(session, None)
    assert isinstance(action, SendError)
    assert action.code is ErrorCode.NO_DATA_AVAILABLE
    assert decode(action.data) == ErrorReport(
        1, ErrorCode.NO_DATA_AVAILABLE, b"", "No data available"
    )
    assert session.state is SessionState.IDLE
    assert session.version == 1
    assert session.may_notify
    feed(session, encode(ResetQuery(1)))
    assert act(session) == SendFull(1, STATE_B)


def test_full_response_round_trip() -> None:
    session = ServerSession()
    feed(session, encode(ResetQuery(2)))
    action = act(session, STATE_A)
    assert isinstance(action, SendFull)
    assert action.session_id == IDS.v2
    out = frame_chunks(reply(action))
    assert out[0] == CacheResponse(2, IDS.v2)
    assert out[-1] == EndOfData(2, IDS.v2, STATE_A.serial.value, Timers())
    assert len(out) == 2 + 2 + 1 + 1
    session.response_sent()
    assert session.last_serial == STATE_A.serial


# ------------------------------------------------------------------------------- lifecycle


def test_next_action_while_responding_is_a_bug() -> None:
    session = ServerSession()
    feed(session, encode(ResetQuery(1)))
    assert isinstance(act(session), SendFull)
    assert session.state is SessionState.RESPONDING
    feed(session, encode(ResetQuery(1)))  # buffering is fine
    with pytest.raises(RuntimeError):
        act(session)
    session.response_sent()
    assert isinstance(act(session), SendFull)


def test_response_sent_without_response_is_a_bug() -> None:
    session = ServerSession()
    with pytest.raises(RuntimeError):
        session.response_sent()


def test_pipelined_queries_are_answered_in_order() -> None:
    session = ServerSession()
    feed(session, encode(ResetQuery(1)) + encode(SerialQuery(1, IDS.v1, STATE_A.serial.value)))
    assert isinstance(act(session), SendFull)
    session.response_sent()
    assert isinstance(act(session), SendDelta)
    session.response_sent()
    assert act(session) is NEED_DATA


def test_need_data_then_eof_closes() -> None:
    session = ServerSession()
    assert act(session) is NEED_DATA
    feed(session, encode(ResetQuery(1))[:5])
    assert act(session) is NEED_DATA
    session.receive_data(encode(ResetQuery(1))[5:])
    assert isinstance(act(session), SendFull)
    session.response_sent()
    session.receive_data(b"")
    assert act(session) == Close(CloseReason.PEER_CLOSED, "peer closed")
    assert session.state is SessionState.CLOSED
    assert act(session) == Close(CloseReason.PEER_CLOSED, "peer closed")  # idempotent
    session.receive_data(b"ignored after close")


def test_eof_inside_pdu_is_corrupt_data() -> None:
    session = negotiated(2)
    feed(session, encode(ResetQuery(2))[:6], b"")
    action = act(session)
    assert isinstance(action, Close)
    report = error_of(action)
    assert (report.version, report.code) == (2, ErrorCode.CORRUPT_DATA)


def test_oversized_pdu_is_corrupt_data_with_header_only() -> None:
    session = ServerSession(max_pdu_size=100)
    header = bytes([1, 1, 0, 0, 0, 0, 0, 101])
    feed(session, header)
    action = act(session)
    assert isinstance(action, Close)
    report = error_of(action)
    assert (report.version, report.code, report.pdu) == (1, ErrorCode.CORRUPT_DATA, header)


@pytest.mark.parametrize(("max_version", "pdu_version", "reply"), [(2, 1, 1), (1, 2, 1), (2, 7, 2)])
def test_framing_error_version_before_negotiation(
    max_version: int, pdu_version: int, reply: int
) -> None:
    session = ServerSession(max_version=max_version)
    feed(session, bytes([pdu_version, 2, 0, 0, 0, 0, 0, 3]))  # length below the header
    report = error_of(act(session))
    assert (report.version, report.code) == (reply, ErrorCode.CORRUPT_DATA)


def test_long_offending_pdu_is_truncated_in_the_report() -> None:
    session = negotiated(2)
    raw = encode(RouterKeyPdu(2, 1, SKI, 1, bytes(1000)))
    feed(session, raw)
    report = error_of(act(session))
    assert report.code == ErrorCode.INVALID_REQUEST
    assert report.pdu == raw[:256]


# ------------------------------------------------------------------------------- notify/goodbye


def test_may_notify_and_serial_notify() -> None:
    session = ServerSession()
    assert (session.may_notify, session.serial_notify(STATE_B)) == (False, None)  # not negotiated
    feed(session, encode(ResetQuery(2)))
    assert isinstance(act(session), SendFull)
    assert (session.may_notify, session.serial_notify(STATE_B)) == (False, None)  # in a response
    session.response_sent()
    assert session.may_notify
    assert session.serial_notify(STATE_B) == encode(SerialNotify(2, IDS.v2, STATE_B.serial.value))
    session.goodbye(ErrorCode.CACHE_RESTART)
    assert (session.may_notify, session.serial_notify(STATE_B)) == (False, None)  # after close


@pytest.mark.parametrize("version", [0, 1])
def test_serial_notify_uses_negotiated_version(version: int) -> None:
    session = negotiated(version)
    assert session.serial_notify(STATE_A) == encode(
        SerialNotify(version, IDS.for_version(version), STATE_A.serial.value)
    )


@pytest.mark.parametrize(
    ("version", "code", "sent"),
    [
        (2, ErrorCode.CACHE_SHUTDOWN, True),
        (2, ErrorCode.CACHE_RESTART, True),
        (2, ErrorCode.TRANSPORT_FAILURE, True),
        (1, ErrorCode.CACHE_SHUTDOWN, False),
        (1, ErrorCode.TRANSPORT_FAILURE, False),
        (0, ErrorCode.CACHE_RESTART, False),
        (1, ErrorCode.INTERNAL_ERROR, True),
        (0, ErrorCode.INTERNAL_ERROR, True),
    ],
)
def test_goodbye(version: int, code: ErrorCode, sent: bool) -> None:
    session = negotiated(version)
    data = session.goodbye(code, "going away")
    if sent:
        assert decode(data) == ErrorReport(version, code, b"", "going away")
    else:
        assert data == b""
    assert session.state is SessionState.CLOSED
    assert session.goodbye(code) == b""
    assert isinstance(act(session), Close)


def test_goodbye_before_negotiation_sends_nothing() -> None:
    session = ServerSession()
    assert session.goodbye(ErrorCode.CACHE_SHUTDOWN) == b""
    assert session.state is SessionState.CLOSED


def test_goodbye_while_responding() -> None:
    session = ServerSession()
    feed(session, encode(ResetQuery(2)))
    assert isinstance(act(session), SendFull)
    data = session.goodbye(ErrorCode.TRANSPORT_FAILURE, "stalled")
    assert decode(data) == ErrorReport(2, ErrorCode.TRANSPORT_FAILURE, b"", "stalled")
    assert session.state is SessionState.CLOSED
    with pytest.raises(RuntimeError):
        session.response_sent()


@pytest.mark.parametrize(
    "kwargs",
    [{"max_version": 3}, {"min_version": 2, "max_version": 1}, {"min_version": -1}],
)
def test_constructor_validation(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="min_version"):
        ServerSession(**kwargs)


def test_the_first_published_serial_is_0() -> None:
    assert Serial(0) == STATE_A.serial


# ------------------------------------------------------------------------------- fuzz

_raw_pdus = st.builds(raw_pdu, st.sampled_from(ALL_TYPES), st.sampled_from(ALL_VERSIONS))
_serial_queries = st.builds(
    lambda v, sid, serial: encode(SerialQuery(v, sid, serial)),
    st.integers(0, 2),
    st.sampled_from([IDS.v0, IDS.v1, IDS.v2, 0xDEAD]),
    st.sampled_from([STATE_A.serial.value, STATE_B.serial.value, 99]),
)
_conversations = st.lists(
    st.one_of(_raw_pdus, _serial_queries, st.binary(max_size=12)), max_size=8
).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(
    data=_conversations,
    versions=st.sampled_from([(0, 2), (0, 1), (1, 2), (2, 2), (0, 0)]),
    have_data=st.booleans(),
)
def test_session_fuzz(data: bytes, versions: tuple[int, int], have_data: bool) -> None:
    """Any input ends in Close; everything we write decodes, at one version, never answering
    an Error Report with an Error Report."""
    session = ServerSession(min_version=versions[0], max_version=versions[1])
    session.receive_data(data)
    session.receive_data(b"")
    written: list[Pdu] = []
    for _ in range(len(data) + 2):
        action = session.next_action(STATE_B if have_data else None)
        assert action is not NEED_DATA  # EOF was fed: the session always decides
        if isinstance(action, SendFull | SendDelta):
            assert have_data
            chunks = reply(action)
            written += [p for p in frame_chunks(chunks) if not isinstance(p, tuple)]
            session.response_sent()
            continue
        assert isinstance(action, SendError | SendCacheReset | Close)
        if action.data:
            pdu = decode(action.data)
            assert isinstance(pdu, ErrorReport | CacheReset)
            if isinstance(pdu, ErrorReport):
                assert pdu.pdu[1:2] != b"\x0a"  # never echo (answer) an Error Report
                # The action's facts are those of its bytes: nobody re-parses them.
                assert isinstance(action, SendError | Close)
                assert (action.code if isinstance(action, SendError) else action.error) == (
                    pdu.code
                )
            else:
                assert isinstance(action, SendCacheReset)
                assert action.version == pdu.version
            written.append(pdu)
        elif isinstance(action, Close):
            assert action.error is None
        if isinstance(action, Close):
            break
    assert session.state is SessionState.CLOSED
    if session.version is not None:
        # Once negotiated, everything after the first query's reply carries that version;
        # only an Error 4 (carrying our max version) can precede negotiation.
        negotiated_pdus = [
            p
            for p in written
            if not (isinstance(p, ErrorReport) and p.code == ErrorCode.UNSUPPORTED_PROTOCOL_VERSION)
        ]
        assert {p.version for p in negotiated_pdus} <= {session.version}
    for pdu in written:
        if isinstance(pdu, ErrorReport) and pdu.code == ErrorCode.UNSUPPORTED_PROTOCOL_VERSION:
            assert pdu.version == versions[1]
