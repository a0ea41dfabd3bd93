"""`PipelinedQueries`: a Serial Query that was buffered, whole, before our answer to the query
ahead of it began was sent without knowing that answer; one naming another session id is
answered as from the serial that answer gave. One read after the answer began is Corrupt Data.

The shape is OpenBGPD's (7.7 in the interop suite): after a Cache Reset its retry timer sent a
Reset Query and its refresh timer, in the same second, a Serial Query with session 65535."""

from __future__ import annotations

import pytest

from rtr_protocol import (
    Close,
    ErrorCode,
    SendCacheReset,
    SendDelta,
    SendFull,
    SerialQuery,
    ServerSession,
    encode,
)
from snapshot import SessionIds
from tests.protocol.test_session import SNAP_B, STATE_A, STATE_B, act, error_of, feed, states
from tests.server.rtr_client import reset_query, serial_query

OPENBGPD_NO_SESSION = 0xFFFF  # its session id -1, sent as 16 bits
OLD_SERIAL = 41


def full_then_next(version: int, *, together: bool) -> tuple[ServerSession, SendFull]:
    """A Reset Query answered with STATE_A; the stray Serial Query fed with it or after."""
    session = ServerSession()
    stray = serial_query(version, OPENBGPD_NO_SESSION, OLD_SERIAL)
    feed(session, reset_query(version) + (stray if together else b""))
    full = act(session, STATE_A)
    assert isinstance(full, SendFull)
    session.response_sent()
    if not together:
        feed(session, stray)
    return session, full


@pytest.mark.parametrize("version", [0, 1, 2])
def test_a_query_sent_with_the_reset_query_gets_the_empty_delta(version: int) -> None:
    session, full = full_then_next(version, together=True)
    answer = act(session, STATE_A)
    assert isinstance(answer, SendDelta)
    assert (answer.session_id, answer.from_serial) == (full.session_id, STATE_A.serial)
    assert answer.named_session == OPENBGPD_NO_SESSION
    assert answer.delta.counts()["vrp_announce"] == 0
    session.response_sent()
    assert (session.session_id, session.last_serial) == (full.session_id, STATE_A.serial)


def test_a_publish_in_between_is_in_the_delta() -> None:
    session, _ = full_then_next(1, together=True)
    answer = act(session, STATE_B)
    assert isinstance(answer, SendDelta)
    assert (answer.from_serial, answer.state.serial) == (STATE_A.serial, STATE_B.serial)
    assert answer.delta == STATE_B.delta_since(STATE_A.serial)
    # Once answered, the next query is an ordinary one again: another id is Corrupt Data.
    session.response_sent()
    feed(session, serial_query(1, OPENBGPD_NO_SESSION, OLD_SERIAL))
    assert isinstance(act(session, STATE_B), Close)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_a_query_read_after_the_answer_began_keeps_the_rule(version: int) -> None:
    session, _ = full_then_next(version, together=False)
    action = act(session, STATE_A)
    assert isinstance(action, Close)
    assert error_of(action).code == ErrorCode.CORRUPT_DATA


def test_new_session_ids_since_that_answer_get_cache_reset() -> None:
    session, _ = full_then_next(1, together=True)
    (restarted,) = states(SNAP_B, ids=SessionIds(0x0A0A, 0x0B0B, 0x0C0C))
    assert isinstance(act(session, restarted), SendCacheReset)


def test_only_the_octets_buffered_before_the_answer_count() -> None:
    """A query buffered whole with the Reset Query is early; one buffered in part is not."""
    session = ServerSession()
    early = serial_query(1, OPENBGPD_NO_SESSION, OLD_SERIAL)
    feed(session, reset_query(1) + early + early[:5])
    assert isinstance(act(session, STATE_A), SendFull)
    session.response_sent()
    first = act(session, STATE_A)
    assert isinstance(first, SendDelta)
    assert first.named_session == OPENBGPD_NO_SESSION
    session.response_sent()
    feed(session, early[5:])
    # Its first 5 octets were there when the answer to `first` began, not all of it.
    assert isinstance(act(session, STATE_A), Close)


def test_an_early_query_in_our_own_session_is_an_ordinary_one() -> None:
    session = ServerSession()
    own = encode(SerialQuery(1, STATE_A.session_ids.v1, STATE_A.serial.value))
    feed(session, reset_query(1) + own)
    assert isinstance(act(session, STATE_A), SendFull)
    session.response_sent()
    answer = act(session, STATE_A)
    assert isinstance(answer, SendDelta)
    assert answer.named_session is None
