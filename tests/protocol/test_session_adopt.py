"""`ServerSession.adopt`: a session handed over by the previous process image starts at its
version; a router holding data is sent one unasked Cache Reset (`handover_reset`); Serial Notify
carries the router's own session id and another serial until it got a response here; its Serial
Query with that id gets Cache Reset, its Reset Query the table."""

from __future__ import annotations

import pytest

from rtr_protocol import CacheReset, SendCacheReset, SendDelta, SendFull, ServerSession
from rtr_protocol.pdu import SerialNotify
from rtr_protocol.pdu_decode import decode
from snapshot import Serial
from tests.protocol.test_session import STATE_A, act, feed
from tests.server.rtr_client import reset_query, serial_query

OLD_ID = 0x4444


def notify_of(session: ServerSession) -> SerialNotify:
    data = session.serial_notify(STATE_A)
    assert data is not None
    pdu = decode(data)
    assert isinstance(pdu, SerialNotify)
    return pdu


@pytest.mark.parametrize("version", [0, 1, 2])
def test_adopted_session_is_told_its_own_id_then_reset(version: int) -> None:
    session = ServerSession()
    session.adopt(version, (OLD_ID, STATE_A.serial))
    assert session.may_notify
    notify = notify_of(session)
    # The router's id, and a serial other than the one it holds (equal ones are skipped).
    assert (notify.version, notify.session_id) == (version, OLD_ID)
    assert notify.serial == int(STATE_A.serial.add(1))
    feed(session, serial_query(version, OLD_ID, int(STATE_A.serial)))
    assert isinstance(act(session, STATE_A), SendCacheReset)
    # Any other id gets Cache Reset too (OpenBGPD 7.7 sent 65535 after the Cache Reset).
    feed(session, serial_query(version, 0xFFFF, 0))
    assert isinstance(act(session, STATE_A), SendCacheReset)
    feed(session, reset_query(version))
    full = act(session, STATE_A)
    assert isinstance(full, SendFull)
    session.response_sent()
    # From the first response on: the new ids, as for any session.
    assert notify_of(session).session_id == STATE_A.session_ids.for_version(version)


def test_adopted_without_data_notifies_the_new_id_and_refuses_a_late_adopt() -> None:
    session = ServerSession()
    session.adopt(1)
    assert notify_of(session).session_id == STATE_A.session_ids.for_version(1)
    with pytest.raises(RuntimeError):
        session.adopt(1)
    with pytest.raises(ValueError, match="outside"):
        ServerSession(max_version=1).adopt(2, (OLD_ID, Serial(0)))


def awaits(session: ServerSession) -> bool:
    """`ServerSession.awaits_reset_query`, read anew (not narrowed by an earlier assert)."""
    return session.awaits_reset_query


@pytest.mark.parametrize("version", [0, 1, 2])
def test_a_kept_router_is_sent_one_unasked_cache_reset(version: int) -> None:
    session = ServerSession()
    session.adopt(version, (OLD_ID, STATE_A.serial))
    assert not awaits(session)
    reset = session.handover_reset()
    assert reset is not None
    assert decode(reset) == CacheReset(version)
    assert awaits(session)
    assert session.handover_reset() is None  # once
    # A router that ignores it is told by Serial Notify, in the new id: one that took the
    # reset holds no id, and OpenBGPD 8 then takes the Notify's (and checks our answer by it).
    new_id = STATE_A.session_ids.for_version(version)
    assert (notify_of(session).session_id, notify_of(session).serial) == (
        new_id,
        int(STATE_A.serial),
    )
    assert awaits(session)
    feed(session, reset_query(version))
    full = act(session, STATE_A)
    assert isinstance(full, SendFull)
    assert not awaits(session)  # it asked
    session.response_sent()
    assert session.handover_reset() is None


def test_no_unasked_cache_reset_without_data_or_inside_a_response() -> None:
    fresh = ServerSession()
    fresh.adopt(1)  # it holds nothing of ours: the Notify under the new id is enough
    assert fresh.handover_reset() is None
    assert ServerSession().handover_reset() is None  # not adopted, not negotiated
    busy = ServerSession()
    busy.adopt(1, (OLD_ID, STATE_A.serial))
    feed(busy, reset_query(1))
    assert isinstance(act(busy, STATE_A), SendFull)
    assert busy.handover_reset() is None  # RESPONDING
    busy.response_sent()
    assert busy.handover_reset() is None  # it has the new table


@pytest.mark.parametrize("version", [0, 1, 2])
def test_a_serial_query_in_the_new_id_before_a_response_gets_cache_reset(version: int) -> None:
    """OpenBGPD 8 took the new id from the Notify while it held nothing, then asked with its
    old serial: a delta would leave it empty and "current". Cache Reset until a response."""
    session = ServerSession()
    session.adopt(version, (OLD_ID, STATE_A.serial))
    assert session.handover_reset() is not None
    new_id = STATE_A.session_ids.for_version(version)
    feed(session, serial_query(version, new_id, int(STATE_A.serial)))
    assert isinstance(act(session, STATE_A), SendCacheReset)
    feed(session, reset_query(version))
    assert isinstance(act(session, STATE_A), SendFull)
    session.response_sent()
    feed(session, serial_query(version, new_id, int(STATE_A.serial)))
    assert isinstance(act(session, STATE_A), SendDelta)  # now it holds ours
