"""ServerSession with ``hold=True``: queries before the first data are held, then answered."""

from __future__ import annotations

import pytest

from rtr_protocol import (
    NEED_DATA,
    Close,
    CloseReason,
    ErrorCode,
    Hold,
    ResetQuery,
    SendCacheReset,
    SendDelta,
    SendError,
    SendFull,
    SerialQuery,
    ServerSession,
    SessionState,
    encode,
)
from rtr_protocol.session import HELD_BUFFER_LIMIT
from tests.protocol.test_session import IDS, STATE_A, STATE_B, error_of, feed


def held(version: int = 1, query: bytes | None = None) -> ServerSession:
    session = ServerSession(hold=True)
    feed(session, query if query is not None else encode(ResetQuery(version)))
    action = session.next_action(None)
    assert isinstance(action, Hold)
    assert session.state is SessionState.HELD
    assert session.held
    return session


@pytest.mark.parametrize("version", [0, 1, 2])
def test_reset_query_before_data_is_held_then_answered_in_full(version: int) -> None:
    session = held(version)
    assert session.version == version
    assert not session.may_notify  # no Serial Notify while a query waits
    assert session.serial_notify(STATE_A) is None
    assert session.next_action(None) is NEED_DATA  # still no data: still held
    action = session.next_action(STATE_A)
    assert action == SendFull(version, STATE_A)
    assert session.state is SessionState.RESPONDING
    session.response_sent()
    assert (session.session_id, session.last_serial) == (
        IDS.for_version(version),
        STATE_A.serial,
    )
    assert not session.wants_redial


def test_hold_names_the_query_kind() -> None:
    session = ServerSession(hold=True)
    feed(session, encode(SerialQuery(2, 7, 3)))
    assert session.next_action(None) == Hold(2, True)
    session = ServerSession(hold=True)
    feed(session, encode(ResetQuery(2)))
    assert session.next_action(None) == Hold(2, False)


def test_held_serial_query_of_a_foreign_session_gets_cache_reset() -> None:
    session = held(query=encode(SerialQuery(1, 0x4444, 9)))
    action = session.next_action(STATE_A)
    assert isinstance(action, SendCacheReset)
    assert action.version == 1
    assert session.state is SessionState.IDLE


def test_held_serial_query_of_our_session_gets_the_delta() -> None:
    query = encode(SerialQuery(1, IDS.for_version(1), STATE_A.serial.value))
    session = held(query=query)
    action = session.next_action(STATE_B)
    assert isinstance(action, SendDelta)
    assert (action.from_serial, action.state) == (STATE_A.serial, STATE_B)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_hold_expired_answers_no_data(version: int) -> None:
    session = held(version)
    action = session.hold_expired()
    assert isinstance(action, SendError)
    assert action.code is ErrorCode.NO_DATA_AVAILABLE
    assert error_of(action).version == version
    assert session.state is SessionState.IDLE
    with pytest.raises(RuntimeError, match="without a held query"):
        session.hold_expired()


def test_v0_session_that_got_no_data_wants_a_redial_v1_does_not() -> None:
    v0, v1 = held(0), held(1)
    v0.hold_expired()
    v1.hold_expired()
    assert v0.wants_redial
    assert not v1.wants_redial
    with pytest.raises(RuntimeError, match="does not want one"):
        v1.redial()
    close = v0.redial()
    assert close == Close(CloseReason.REDIAL, close.detail)
    assert close.data == b""
    assert v0.state is SessionState.CLOSED


def test_v0_session_that_got_data_after_no_data_wants_no_redial() -> None:
    session = held(0)
    session.hold_expired()
    feed(session, encode(ResetQuery(0)))
    action = session.next_action(STATE_A)
    assert isinstance(action, SendFull)
    session.response_sent()
    assert not session.wants_redial


def test_without_hold_no_data_is_answered_at_once_and_v0_wants_a_redial() -> None:
    session = ServerSession()
    feed(session, encode(ResetQuery(0)))
    action = session.next_action(None)
    assert isinstance(action, SendError)
    assert action.code is ErrorCode.NO_DATA_AVAILABLE
    assert session.wants_redial


def test_eof_while_held_closes() -> None:
    session = held()
    session.receive_data(b"")
    action = session.next_action(None)
    assert isinstance(action, Close)
    assert action.reason is CloseReason.PEER_CLOSED


def test_bytes_sent_while_held_wait_until_the_answer() -> None:
    session = held()
    feed(session, encode(ResetQuery(1)))  # a second query is kept, not parsed, while held
    assert session.next_action(None) is NEED_DATA
    first = session.next_action(STATE_A)
    assert isinstance(first, SendFull)
    session.response_sent()
    second = session.next_action(STATE_A)
    assert isinstance(second, SendFull)


def test_a_router_that_floods_while_held_is_closed() -> None:
    session = held()
    feed(session, encode(ResetQuery(1)) * (HELD_BUFFER_LIMIT // 8 + 1))
    action = session.next_action(None)
    assert isinstance(action, Close)
    assert action.reason is CloseReason.PROTOCOL_ERROR
