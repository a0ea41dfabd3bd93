"""`ServerSession.confirm_kept`: a router kept through ``kill -USR2`` whose session this image
continued (same content, `snapshot.Continuation`) is one of ours: no unasked Cache Reset, a
Serial Notify in its own session, a delta to its Serial Query. One holding another id, or a
serial the diff log no longer has, gets the reset path as before."""

from __future__ import annotations

import pytest

from rtr_protocol import SendCacheReset, SendDelta, ServerSession
from rtr_protocol.pdu import SerialNotify
from rtr_protocol.pdu_decode import decode
from snapshot import Serial
from tests.protocol.test_session import IDS, STATE_A, STATE_B, act, feed
from tests.server.rtr_client import serial_query


@pytest.mark.parametrize("version", [0, 1, 2])
def test_a_router_holding_the_continued_serial_is_sent_nothing(version: int) -> None:
    session = ServerSession()
    session.adopt(version, (IDS.for_version(version), STATE_A.serial))
    assert session.confirm_kept(STATE_A)
    assert (session.session_id, session.last_serial) == (IDS.for_version(version), STATE_A.serial)
    assert session.handover_reset() is None
    assert not session.awaits_reset_query
    assert not session.confirm_kept(STATE_A)  # once: it is an ordinary session now
    feed(session, serial_query(version, IDS.for_version(version), int(STATE_A.serial)))
    delta = act(session, STATE_A)
    assert isinstance(delta, SendDelta)
    assert (delta.from_serial, delta.delta.is_empty()) == (STATE_A.serial, True)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_a_router_one_serial_behind_is_notified_in_its_session_and_gets_the_delta(
    version: int,
) -> None:
    session = ServerSession()
    session.adopt(version, (IDS.for_version(version), STATE_A.serial))
    assert session.confirm_kept(STATE_B)  # STATE_B's diff log still has STATE_A's serial
    data = session.serial_notify(STATE_B)
    assert data is not None
    notify = decode(data)
    assert isinstance(notify, SerialNotify)
    assert (notify.session_id, notify.serial) == (IDS.for_version(version), int(STATE_B.serial))
    feed(session, serial_query(version, IDS.for_version(version), int(STATE_A.serial)))
    delta = act(session, STATE_B)
    assert isinstance(delta, SendDelta)
    assert delta.from_serial == STATE_A.serial
    assert not delta.delta.is_empty()


def test_a_serial_query_held_or_read_before_the_notify_confirms_too() -> None:
    session = ServerSession()
    session.adopt(2, (IDS.v2, STATE_A.serial))
    feed(session, serial_query(2, IDS.v2, int(STATE_A.serial)))
    delta = act(session, STATE_B)
    assert isinstance(delta, SendDelta)
    assert delta.from_serial == STATE_A.serial


@pytest.mark.parametrize(
    "known",
    [(0x4444, STATE_A.serial), (IDS.v2, STATE_A.serial.add(7)), (IDS.v1, STATE_A.serial)],
    ids=["other id", "serial not in the log", "the id of another version"],
)
def test_a_router_not_in_the_continued_session_gets_the_reset_path(
    known: tuple[int, Serial],
) -> None:
    session = ServerSession()
    session.adopt(2, known)
    assert not session.confirm_kept(STATE_B)
    assert session.handover_reset() is not None
    feed(session, serial_query(2, known[0], int(known[1])))
    assert isinstance(act(session, STATE_B), SendCacheReset)


def test_a_router_adopted_without_data_confirms_nothing() -> None:
    session = ServerSession()
    session.adopt(1)
    assert not session.confirm_kept(STATE_A)
    assert session.last_serial is None


def test_a_held_query_is_confirmed_before_it_is_answered() -> None:
    session = ServerSession(hold=True)
    session.adopt(2, (IDS.v2, STATE_A.serial))
    feed(session, serial_query(2, IDS.v2, int(STATE_A.serial)))
    act(session, None)  # held: no data yet
    assert session.held
    assert session.confirm_kept(STATE_A)  # the I/O layer confirms (and logs) first
    delta = act(session, STATE_A)
    assert isinstance(delta, SendDelta)
    assert delta.delta.is_empty()


def test_a_router_told_no_data_is_not_confirmed() -> None:
    session = ServerSession()  # no holding: No Data Available at once
    session.adopt(2, (IDS.v2, STATE_A.serial))
    feed(session, serial_query(2, IDS.v2, int(STATE_A.serial)))
    act(session, None)  # No Data Available: a router may have flushed its table on it
    assert not session.confirm_kept(STATE_A)
    assert session.handover_reset() is not None
