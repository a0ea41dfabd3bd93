"""ClientSession: transition table, downgrades, legacy ASPA, staging, Error 2/4/6/7, fast path."""

from __future__ import annotations

import itertools
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtr_protocol import (
    NEED_DATA,
    AspaPdu,
    CacheReset,
    CacheResponse,
    ClientAction,
    ClientSession,
    ClientState,
    Disconnect,
    Downgrade,
    EndOfData,
    ErrorCode,
    ErrorReport,
    Ipv4Prefix,
    Ipv6Prefix,
    Pdu,
    PduType,
    PollAfter,
    Publish,
    ResetQuery,
    RouterKeyPdu,
    RtrProtocolError,
    SerialNotify,
    SerialQuery,
    Timers,
    Transmit,
    decode,
    encode,
    encode_delta_response,
    encode_full_response,
    is_legacy_aspa,
)
from snapshot import Aspa, RouterKey, Serial, Snapshot, Vrp, compute_delta
from snapshot.model import pack_v4, pack_v6
from snapshot.packed import splice as _splice
from tests.protocol.strategies import at_version

SID = 0x1234
OTHER_SID = 0x4321
TIMERS = Timers(refresh=1800, retry=300, expire=3600)
SKI = bytes(range(1, 21))
KEY_A = RouterKey(SKI, 64496, b"\x30\x59\x01")
VRP_A = Vrp.parse("192.0.2.0/24", 24, 64496)
VRP_B = Vrp.parse("2001:db8::/32", 48, 64497)
VRP_C = Vrp.parse("198.51.100.0/24", 24, 64498)
SNAP_A = Snapshot.build(vrps=[VRP_A, VRP_B], aspas=[Aspa(64500, (64501,))], router_keys=[KEY_A])
SNAP_B = Snapshot.build(vrps=[VRP_A, VRP_C], aspas=[Aspa(64500, (64501, 64502)), Aspa(64510, (0,))])

#: StayRTR 0.5.1 ``-protocol 2`` answering a v2 Reset Query (captured on loopback): Cache
#: Response, an IPv6 and an IPv4 prefix, two ASPA PDUs in the draft-10 layout (flags octet 8,
#: AFI octet 9 = 0 / 1, provider count octets 10-11), End of Data (refresh 30, retry 10,
#: expire 600).
STAYRTR_V2 = bytes.fromhex(
    """
    0203fddd 00000008
    02060000 00000020 01203000 20010db8 00000000 00000000 00000000 0000fbf1
    02040000 00000014 01181800 c0000200 0000fbf0
    020b0000 00000018 01000002 0000fbf4 0000fbf5 0000fbf6
    020b0000 00000014 01010001 0000fbf4 0000fbf7
    0207fddd 00000018 00000000 0000001e 0000000a 00000258
    """
)
LEGACY_ASPA_V4 = STAYRTR_V2[60:84]


# ------------------------------------------------------------------------------- helpers


def drain(session: ClientSession) -> list[ClientAction]:
    """Every action until NEED_DATA (or the first Disconnect)."""
    out: list[ClientAction] = []
    while (action := session.next_action()) is not NEED_DATA:
        out.append(action)
        if isinstance(action, Disconnect):
            break
    return out


def kinds(actions: list[ClientAction]) -> list[str]:
    return [type(a).__name__ for a in actions]


def feed(session: ClientSession, *chunks: bytes) -> list[ClientAction]:
    """Feed ``chunks`` as one piece (b"" alone is EOF) and drain."""
    session.receive_data(b"".join(chunks))
    return drain(session)


def eod(version: int, serial: int = 1, session_id: int = SID) -> bytes:
    return encode(EndOfData(version, session_id, serial, None if version == 0 else TIMERS))


def full(snapshot: Snapshot, version: int = 2, serial: int = 1, session_id: int = SID) -> bytes:
    """A cache's whole reply to a Reset Query, from the server's own encoder."""
    return b"".join(encode_full_response(snapshot, version, session_id, Serial(serial), TIMERS))


def delta(
    old: Snapshot, new: Snapshot, version: int = 2, serial: int = 2, session_id: int = SID
) -> bytes:
    """A cache's reply to a Serial Query from ``old`` to ``new``."""
    return b"".join(
        encode_delta_response(compute_delta(old, new), version, session_id, Serial(serial), TIMERS)
    )


def synced(snapshot: Snapshot = SNAP_A, version: int = 2, serial: int = 1) -> ClientSession:
    """A session that received one full reply and is IDLE."""
    session = ClientSession(max_version=version)
    assert session.connection_made() == encode(ResetQuery(version))
    actions = feed(session, full(snapshot, version, serial))
    assert kinds(actions) == ["Publish", "PollAfter"]
    assert session.state is ClientState.IDLE
    return session


def error_of(action: ClientAction) -> ErrorReport:
    assert isinstance(action, Disconnect), action
    pdu = decode(action.data)
    assert isinstance(pdu, ErrorReport)
    return pdu


def only_publish(actions: list[ClientAction]) -> Publish:
    publishes = [a for a in actions if isinstance(a, Publish)]
    assert len(publishes) == 1, actions
    return publishes[0]


def v4_pdu(vrp: Vrp, *, announce: bool = True, version: int = 2) -> bytes:
    net = vrp.prefix
    cls = Ipv4Prefix if vrp.is_ipv4 else Ipv6Prefix
    return encode(
        cls(
            version, int(announce), net.prefixlen, vrp.max_length, int(net.network_address), vrp.asn
        )
    )


# ------------------------------------------------------------------------------- the matrix

STATES = ["disconnected", "awaiting", "receiving", "idle", "closing"]
TYPES = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 255]


def raw_pdu(pdu_type: int) -> bytes:
    """A well-formed v2 PDU of ``pdu_type`` (a bare header for types v2 does not define)."""
    pdus: dict[int, Pdu] = {
        0: SerialNotify(2, SID, 5),
        1: SerialQuery(2, SID, 5),
        2: ResetQuery(2),
        3: CacheResponse(2, SID),
        4: Ipv4Prefix(2, 1, 24, 24, 0xCB00_7100, 64499),
        6: Ipv6Prefix(2, 1, 48, 48, 0x2001_0DB8_0009 << 80, 64499),
        7: EndOfData(2, SID, 5, TIMERS),
        8: CacheReset(2),
        9: RouterKeyPdu(2, 1, bytes(20), 64499, b"\x30"),
        10: ErrorReport(2, ErrorCode.INTERNAL_ERROR, b"", "oops"),
        11: AspaPdu(2, 1, 64499, (64496,)),
    }
    pdu = pdus.get(pdu_type)
    return encode(pdu) if pdu is not None else bytes([2, pdu_type, 0, 0, 0, 0, 0, 8])


def session_in(state: str) -> ClientSession:
    if state == "disconnected":
        return ClientSession()
    if state == "idle":
        return synced()
    session = ClientSession()
    session.connection_made()
    if state == "receiving":
        assert feed(session, encode(CacheResponse(2, SID))) == []
    elif state == "closing":
        assert kinds(feed(session, b"")) == ["Disconnect"]
    return session


#: The rules, written out: per state, what each PDU type leads to (anything else is Corrupt
#: Data; undefined types are Unsupported PDU Type; a cache's Error Report ends the session).
#: "awaiting" has sent a Reset Query, which a Cache Reset must not answer (the Serial Query
#: case is `test_cache_reset_answers_with_reset_query_and_keeps_data`).
RULES: dict[str, dict[int, str]] = {
    "awaiting": {0: "nothing", 3: "nothing", 8: "refused"},
    "receiving": {0: "nothing", 4: "nothing", 6: "nothing", 9: "nothing", 11: "nothing", 7: "eod"},
    "idle": {0: "query"},
}
NEXT_STATE = {
    ("awaiting", 3): ClientState.RECEIVING,
    ("receiving", 7): ClientState.IDLE,
    ("idle", 0): ClientState.AWAITING_RESPONSE,
}


@pytest.mark.parametrize("pdu_type", TYPES)
@pytest.mark.parametrize("state", STATES)
def test_transition_matrix(state: str, pdu_type: int) -> None:
    session = session_in(state)
    raw = raw_pdu(pdu_type)
    if state == "disconnected":
        with pytest.raises(RuntimeError):
            session.receive_data(raw)
        with pytest.raises(RuntimeError):
            session.next_action()
        return
    before = session.state
    actions = feed(session, raw)
    if state == "closing":
        assert len(actions) == 1
        assert isinstance(actions[0], Disconnect)
        assert actions[0].data == b""
        return
    if pdu_type in (5, 12, 255):
        rule = "unsupported"
    elif pdu_type == 10:
        rule = "peer error"
    else:
        rule = RULES[state].get(pdu_type, "corrupt")
    if rule == "nothing":
        assert actions == []
        assert session.state is NEXT_STATE.get((state, pdu_type), before)
    elif rule == "query":
        assert kinds(actions) == ["Transmit"]
        sent = decode(actions[0].data)  # type: ignore[union-attr]
        assert sent == SerialQuery(2, SID, 1)
        assert session.state is NEXT_STATE[(state, pdu_type)]
    elif rule == "refused":
        refusal(actions)
        assert session.state is ClientState.CLOSING
    elif rule == "eod":
        assert kinds(actions) == ["Publish", "PollAfter"]
        assert session.state is ClientState.IDLE
    elif rule == "peer error":
        assert kinds(actions) == ["Disconnect"]
        action = actions[0]
        assert isinstance(action, Disconnect)
        assert action.data == b""
        assert action.drop_data
        assert session.state is ClientState.CLOSING
    else:
        code = ErrorCode.UNSUPPORTED_PDU_TYPE if rule == "unsupported" else ErrorCode.CORRUPT_DATA
        report = error_of(actions[-1])
        assert (report.version, report.code, report.pdu) == (2, code, raw)
        assert actions[-1].drop_data  # type: ignore[union-attr]
        assert session.state is ClientState.CLOSING
        assert session.snapshot is None


def test_transition_table_entries() -> None:
    table = set(ClientSession._transitions)
    expected = {
        (ClientState.AWAITING_RESPONSE, t)
        for t in (PduType.CACHE_RESPONSE, PduType.CACHE_RESET, PduType.SERIAL_NOTIFY)
    }
    expected |= {
        (ClientState.RECEIVING, t)
        for t in (
            PduType.IPV4_PREFIX,
            PduType.IPV6_PREFIX,
            PduType.ROUTER_KEY,
            PduType.ASPA,
            PduType.END_OF_DATA,
            PduType.SERIAL_NOTIFY,
        )
    }
    expected |= {(ClientState.IDLE, PduType.SERIAL_NOTIFY)}
    expected |= {
        (s, PduType.ERROR_REPORT)
        for s in (ClientState.AWAITING_RESPONSE, ClientState.RECEIVING, ClientState.IDLE)
    }
    assert table == expected


def test_closing_repeats_disconnect_without_data() -> None:
    session = session_in("closing")
    session.receive_data(raw_pdu(3))
    again = session.next_action()
    assert isinstance(again, Disconnect)
    assert again.data == b""


def test_connection_made_twice_is_a_bug() -> None:
    session = ClientSession()
    session.connection_made()
    with pytest.raises(RuntimeError):
        session.connection_made()


def test_constructor_validation() -> None:
    with pytest.raises(ValueError, match="max_version"):
        ClientSession(max_version=3)
    with pytest.raises(ValueError, match="no_data_retry"):
        ClientSession(no_data_retry=0)
    with pytest.raises(ValueError, match="max_pdu_size"):
        ClientSession(max_pdu_size=7)


# ------------------------------------------------------------------------------- queries


@pytest.mark.parametrize("version", [0, 1, 2])
def test_first_query_is_a_reset_query(version: int) -> None:
    session = ClientSession(max_version=version)
    assert session.connection_made() == bytes([version, 2, 0, 0, 0, 0, 0, 8])
    assert session.state is ClientState.AWAITING_RESPONSE
    assert session.busy


def test_refresh_poll_sends_serial_query_and_reconnect_resumes_with_it() -> None:
    session = synced(serial=7)
    assert session.poll() == encode(SerialQuery(2, SID, 7))
    assert session.poll() is None  # a query is out already
    session.connection_lost()
    assert session.snapshot == SNAP_A  # a lost connection keeps the data
    assert session.connection_made() == encode(SerialQuery(2, SID, 7))


def test_poll_after_end_of_data_uses_refresh_and_v0_defaults() -> None:
    session = ClientSession(max_version=1)
    session.connection_made()
    actions = feed(session, full(SNAP_A, 1))
    assert actions[-1] == PollAfter(1800.0, "refresh")
    assert session.timers == TIMERS
    v0 = ClientSession(max_version=0, default_timers=Timers(100, 10, 1000))
    v0.connection_made()
    actions = feed(v0, full(SNAP_A, 0))
    assert actions[-1] == PollAfter(100.0, "refresh")
    assert v0.timers == Timers(100, 10, 1000)


def test_cache_reset_answers_with_reset_query_and_keeps_data() -> None:
    session = synced()
    session.poll()
    actions = feed(session, encode(CacheReset(2)))
    assert actions == [Transmit(encode(ResetQuery(2)))]
    assert session.snapshot == SNAP_A
    # The new session id of the full reply is taken as it is.
    actions = feed(session, full(SNAP_B, 2, serial=1, session_id=OTHER_SID))
    assert only_publish(actions).snapshot == SNAP_B
    assert session.session_id == OTHER_SID


def refusal(actions: list[ClientAction]) -> Disconnect:
    """The one Disconnect of a Reset Query answered with Cache Reset (issue 12, item 14)."""
    assert kinds(actions) == ["Disconnect"], actions
    close = actions[0]
    assert isinstance(close, Disconnect)
    assert (close.data, close.drop_data, close.reconnect_now) == (b"", False, False)
    assert close.protocol_error
    assert "Cache Reset" in close.reason
    assert "Reset Query" in close.reason
    return close


def test_cache_reset_answering_a_reset_query_is_an_error_that_keeps_the_data() -> None:
    # A cache that answers every query with Cache Reset made us send Reset Queries in a
    # tight loop; Cache Reset answers only a Serial Query.
    session = synced(serial=3)
    session.poll()
    assert feed(session, encode(CacheReset(2))) == [Transmit(encode(ResetQuery(2)))]
    refusal(feed(session, encode(CacheReset(2))))
    assert session.state is ClientState.CLOSING
    assert (session.snapshot, session.session_id, session.serial) == (SNAP_A, SID, 3)
    session.connection_lost()
    assert session.connection_made() == encode(SerialQuery(2, SID, 3))


def test_cache_reset_answering_the_first_reset_query_is_an_error() -> None:
    session = ClientSession()
    session.connection_made()
    refusal(feed(session, encode(CacheReset(2))))
    assert session.snapshot is None


def test_cache_reset_answering_a_reset_query_after_a_notify_is_an_error() -> None:
    session = synced()
    assert feed(session, encode(SerialNotify(2, OTHER_SID, 9))) == [Transmit(encode(ResetQuery(2)))]
    refusal(feed(session, encode(CacheReset(2))))
    assert session.snapshot == SNAP_A


def test_lower_version_cache_reset_to_a_reset_query_asks_once_at_that_version() -> None:
    # The implicit downgrade (digest P3) may come as a Cache Reset: one Reset Query at the
    # cache's version, and a second Cache Reset is the error.
    session = ClientSession()
    session.connection_made()
    actions = feed(session, encode(CacheReset(1)))
    assert kinds(actions) == ["Downgrade", "Transmit"]
    assert actions[1] == Transmit(encode(ResetQuery(1)))
    refusal(feed(session, encode(CacheReset(1))))
    assert session.version == 1


def test_new_session_after_reconnect_comes_by_cache_reset() -> None:
    session = synced(serial=4)
    session.connection_lost()
    assert decode(session.connection_made()) == SerialQuery(2, SID, 4)
    assert feed(session, encode(CacheReset(2))) == [Transmit(encode(ResetQuery(2)))]
    feed(session, full(SNAP_B, 2, serial=0, session_id=OTHER_SID))
    assert (session.session_id, session.serial, session.snapshot) == (OTHER_SID, 0, SNAP_B)


# ------------------------------------------------------------------------------- Serial Notify


def test_notify_of_new_serial_sends_serial_query() -> None:
    session = synced(serial=3)
    actions = feed(session, encode(SerialNotify(2, SID, 4)))
    assert actions == [Transmit(encode(SerialQuery(2, SID, 3)))]


def test_notify_of_held_serial_is_ignored() -> None:
    session = synced(serial=3)
    assert feed(session, encode(SerialNotify(2, SID, 3))) == []
    assert session.state is ClientState.IDLE


def test_notify_with_unknown_session_sends_reset_query() -> None:
    session = synced(serial=3)
    actions = feed(session, encode(SerialNotify(2, OTHER_SID, 3)))
    assert actions == [Transmit(encode(ResetQuery(2)))]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_notify_during_negotiation_is_ignored_whatever_its_version(version: int) -> None:
    session = ClientSession()
    session.connection_made()
    assert feed(session, encode(SerialNotify(version, SID, 9))) == []
    actions = feed(session, full(SNAP_A))
    assert kinds(actions) == ["Publish", "PollAfter"]  # not remembered


def test_notify_inside_a_response_is_acted_on_after_end_of_data() -> None:
    session = synced(serial=1)
    session.poll()
    reply = delta(SNAP_A, SNAP_B, serial=2)
    cut = len(encode(CacheResponse(2, SID)))
    actions = feed(session, reply[:cut], encode(SerialNotify(2, SID, 3)), reply[cut:])
    assert kinds(actions) == ["Publish", "Transmit"]
    assert actions[1] == Transmit(encode(SerialQuery(2, SID, 2)))


def test_notify_inside_a_response_for_that_serial_changes_nothing() -> None:
    session = synced(serial=1)
    session.poll()
    reply = delta(SNAP_A, SNAP_B, serial=2)
    cut = len(encode(CacheResponse(2, SID)))
    actions = feed(session, reply[:cut], encode(SerialNotify(2, SID, 2)), reply[cut:])
    assert kinds(actions) == ["Publish", "PollAfter"]


# ------------------------------------------------------------------------------- staging


def test_full_reply_is_applied_only_at_end_of_data() -> None:
    session = ClientSession()
    session.connection_made()
    reply = full(SNAP_A)
    assert feed(session, reply[:-24]) == []
    assert session.snapshot is None
    assert session.state is ClientState.RECEIVING
    publish = only_publish(feed(session, reply[-24:]))
    assert publish.snapshot == SNAP_A
    assert publish.synced
    assert publish.changed
    assert (session.session_id, session.serial) == (SID, 1)
    assert session.negotiated


def test_delta_is_applied_atomically_at_end_of_data() -> None:
    session = synced()
    session.poll()
    reply = delta(SNAP_A, SNAP_B)
    assert feed(session, reply[:-24]) == []
    assert session.snapshot == SNAP_A  # nothing of the delta shows before End of Data
    publish = only_publish(feed(session, reply[-24:]))
    assert publish.snapshot == SNAP_B
    assert (session.serial, session.snapshot) == (2, SNAP_B)


def test_empty_delta_publishes_unchanged() -> None:
    session = synced()
    session.poll()
    publish = only_publish(feed(session, delta(SNAP_A, SNAP_A)))
    assert not publish.changed
    assert publish.synced
    assert publish.snapshot is session.snapshot


def test_full_reply_with_the_same_content_is_unchanged() -> None:
    session = synced()
    session.connection_lost()
    session.connection_made()
    feed(session, encode(CacheReset(2)))
    assert not only_publish(feed(session, full(SNAP_A))).changed


def test_connection_lost_discards_the_staged_reply() -> None:
    session = synced()
    session.poll()
    feed(session, delta(SNAP_A, SNAP_B)[:-24])
    session.connection_lost()
    assert session.snapshot == SNAP_A
    assert session.serial == 1
    session.connection_made()
    # The old staging is gone: a fresh delta applies to SNAP_A without duplicate errors.
    assert only_publish(feed(session, delta(SNAP_A, SNAP_B))).snapshot == SNAP_B


def test_aspa_announce_replaces_the_provider_set() -> None:
    session = synced()
    session.poll()
    feed(
        session,
        encode(CacheResponse(2, SID)),
        encode(AspaPdu(2, 1, 64500, (64502, 64503))),
        encode(AspaPdu(2, 1, 64500, (64504,))),  # replaced again in the same reply
        encode(AspaPdu(2, 1, 64520, (64521,))),
        eod(2, 2),
    )
    assert session.snapshot is not None
    assert session.snapshot.aspas == (Aspa(64500, (64504,)), Aspa(64520, (64521,)))


def test_withdraw_then_announce_in_one_delta() -> None:
    session = synced()
    session.poll()
    publish = only_publish(
        feed(
            session,
            encode(CacheResponse(2, SID)),
            v4_pdu(VRP_A, announce=False),
            v4_pdu(VRP_A),
            encode(AspaPdu(2, 0, 64500)),
            encode(AspaPdu(2, 1, 64500, (1,))),
            eod(2, 2),
        )
    )
    assert publish.snapshot.v4 == SNAP_A.v4
    assert publish.snapshot.aspas == (Aspa(64500, (1,)),)


# ------------------------------------------------------------------------------- Error 6 / 7


def records(kind: str, *, announce: bool) -> bytes:
    """One PDU of ``kind`` for a record held in SNAP_A (``held``) or not (``new``)."""
    flags = int(announce)
    return {
        "v4 held": v4_pdu(VRP_A, announce=announce),
        "v6 held": v4_pdu(VRP_B, announce=announce),
        "key held": encode(RouterKeyPdu(2, flags, KEY_A.ski, KEY_A.asn, KEY_A.spki)),
        "v4 new": v4_pdu(VRP_C, announce=announce),
        "v6 new": v4_pdu(Vrp.parse("2001:db8:1::/48", 48, 1), announce=announce),
        "key new": encode(RouterKeyPdu(2, flags, SKI, 1, b"\x01")),
        "aspa new": encode(AspaPdu(2, 0, 64999)),
    }[kind]


@pytest.mark.parametrize("kind", ["v4 held", "v6 held", "key held"])
def test_announce_of_held_record_in_delta_is_error_7(kind: str) -> None:
    session = synced()
    session.poll()
    raw = records(kind, announce=True)
    actions = feed(session, encode(CacheResponse(2, SID)), raw)
    report = error_of(actions[-1])
    assert (report.code, report.pdu) == (ErrorCode.DUPLICATE_ANNOUNCEMENT, raw)
    assert actions[-1].drop_data  # type: ignore[union-attr]
    assert session.snapshot is None


@pytest.mark.parametrize("kind", ["v4 new", "v6 new", "key new"])
def test_duplicate_announce_in_one_full_reply_is_error_7(kind: str) -> None:
    session = ClientSession()
    session.connection_made()
    raw = records(kind, announce=True)
    report = error_of(feed(session, encode(CacheResponse(2, SID)), raw, raw)[-1])
    assert (report.code, report.pdu) == (ErrorCode.DUPLICATE_ANNOUNCEMENT, raw)


@pytest.mark.parametrize("kind", ["v4 new", "v6 new", "key new", "aspa new"])
def test_withdraw_of_unknown_record_is_error_6(kind: str) -> None:
    session = synced()
    session.poll()
    raw = records(kind, announce=False)
    report = error_of(feed(session, encode(CacheResponse(2, SID)), raw)[-1])
    assert (report.code, report.pdu) == (ErrorCode.WITHDRAWAL_OF_UNKNOWN_RECORD, raw)
    assert session.snapshot is None


@pytest.mark.parametrize("kind", ["v4 held", "v6 held", "key held"])
def test_withdraw_in_a_full_reply_is_error_6(kind: str) -> None:
    # A Reset Query's reply replaces everything: nothing is held for it to withdraw.
    session = synced()
    session.connection_lost()
    session.connection_made()
    feed(session, encode(CacheReset(2)))
    raw = records(kind, announce=False)
    report = error_of(feed(session, encode(CacheResponse(2, SID)), raw)[-1])
    assert report.code == ErrorCode.WITHDRAWAL_OF_UNKNOWN_RECORD


def test_errors_6_and_7_see_current_plus_staged() -> None:
    session = synced()
    session.poll()
    withdraw_a = v4_pdu(VRP_A, announce=False)
    # Withdrawn once in this reply: a second withdraw is of a record no longer held.
    actions = feed(session, encode(CacheResponse(2, SID)), withdraw_a, withdraw_a)
    assert error_of(actions[-1]).code == ErrorCode.WITHDRAWAL_OF_UNKNOWN_RECORD
    session = synced()
    session.poll()
    announce_c = v4_pdu(VRP_C)
    actions = feed(session, encode(CacheResponse(2, SID)), announce_c, announce_c)
    assert error_of(actions[-1]).code == ErrorCode.DUPLICATE_ANNOUNCEMENT
    session = synced()
    session.poll()
    aspa_gone = encode(AspaPdu(2, 0, 64500))
    actions = feed(session, encode(CacheResponse(2, SID)), aspa_gone, aspa_gone)
    assert error_of(actions[-1]).code == ErrorCode.WITHDRAWAL_OF_UNKNOWN_RECORD


def test_announce_then_withdraw_in_one_delta_cancels() -> None:
    session = synced()
    session.poll()
    reply = (encode(CacheResponse(2, SID)), v4_pdu(VRP_C), v4_pdu(VRP_C, announce=False))
    publish = only_publish(feed(session, *reply, eod(2, 2)))
    assert publish.snapshot == SNAP_A


def test_aspa_withdraw_in_delta() -> None:
    session = synced(SNAP_B)
    session.poll()
    publish = only_publish(feed(session, delta(SNAP_B, SNAP_A)))
    assert publish.snapshot == SNAP_A
    assert [a.customer for a in publish.snapshot.aspas] == [64500]


def test_aspa_reannounce_is_not_a_duplicate() -> None:
    session = synced()
    session.poll()
    again = encode(AspaPdu(2, 1, 64500, (64501,)))
    publish = only_publish(feed(session, encode(CacheResponse(2, SID)), again, again, eod(2, 2)))
    assert publish.snapshot == SNAP_A
    assert not publish.changed


# ------------------------------------------------------------------------------- Error 2


def test_no_data_before_any_sync_polls_after_no_data_retry() -> None:
    session = ClientSession(no_data_retry=42)
    session.connection_made()
    error = encode(ErrorReport(2, ErrorCode.NO_DATA_AVAILABLE, b"", "No data available"))
    actions = feed(session, error)
    assert len(actions) == 1
    assert isinstance(actions[0], PollAfter)
    assert (actions[0].delay, actions[0].no_data) == (42.0, True)
    assert session.state is ClientState.IDLE
    assert session.poll() == encode(ResetQuery(2))


def test_no_data_keeps_old_data_and_retries_after_retry() -> None:
    session = synced()
    session.poll()
    actions = feed(session, encode(ErrorReport(2, ErrorCode.NO_DATA_AVAILABLE)))
    assert actions == [PollAfter(300.0, actions[0].reason, no_data=True)]  # type: ignore[union-attr]
    assert session.snapshot == SNAP_A
    assert session.poll() == encode(SerialQuery(2, SID, 1))


def test_notify_after_no_data_gets_a_reset_query() -> None:
    session = ClientSession()
    session.connection_made()
    feed(session, encode(ErrorReport(2, ErrorCode.NO_DATA_AVAILABLE)))
    actions = feed(session, encode(SerialNotify(2, SID, 0)))
    assert actions == [Transmit(encode(ResetQuery(2)))]


# ------------------------------------------------------------------------------- Error 4


def reconnect(session: ClientSession) -> bytes:
    session.connection_lost()
    return session.connection_made()


def test_error_4_downgrades_v2_v1_v0_and_never_below_0() -> None:
    session = ClientSession()
    assert session.connection_made() == encode(ResetQuery(2))
    assert not session.negotiated
    actions = feed(session, encode(ErrorReport(1, ErrorCode.UNSUPPORTED_PROTOCOL_VERSION)))
    assert kinds(actions) == ["Downgrade", "Disconnect"]
    assert (actions[0].old, actions[0].new) == (2, 1)  # type: ignore[union-attr]
    assert actions[1].reconnect_now  # type: ignore[union-attr]
    assert not actions[1].drop_data  # type: ignore[union-attr]
    assert reconnect(session) == encode(ResetQuery(1))
    actions = feed(session, encode(ErrorReport(0, ErrorCode.UNSUPPORTED_PROTOCOL_VERSION)))
    assert kinds(actions) == ["Downgrade", "Disconnect"]
    assert reconnect(session) == encode(ResetQuery(0))
    actions = feed(session, encode(ErrorReport(0, ErrorCode.UNSUPPORTED_PROTOCOL_VERSION)))
    assert kinds(actions) == ["Disconnect"]
    assert not actions[0].reconnect_now  # type: ignore[union-attr]
    assert session.version == 0
    assert reconnect(session) == encode(ResetQuery(0))


def test_error_4_naming_our_version_steps_down_one() -> None:
    session = ClientSession()
    session.connection_made()
    feed(session, encode(ErrorReport(2, ErrorCode.UNSUPPORTED_PROTOCOL_VERSION)))
    assert session.version == 1


def test_error_4_naming_v0_goes_straight_to_v0() -> None:
    # StayRTR 0.6 answers with version 0 whatever it speaks (digest P1).
    session = ClientSession()
    session.connection_made()
    feed(session, encode(ErrorReport(0, ErrorCode.UNSUPPORTED_PROTOCOL_VERSION)))
    assert session.version == 0


def test_downgrade_from_v2_removes_aspas_at_once() -> None:
    session = synced(SNAP_A)
    assert reconnect(session) == encode(SerialQuery(2, SID, 1))
    actions = feed(session, encode(ErrorReport(1, ErrorCode.UNSUPPORTED_PROTOCOL_VERSION)))
    assert kinds(actions) == ["Downgrade", "Publish", "Disconnect"]
    publish = actions[1]
    assert isinstance(publish, Publish)
    assert publish.snapshot == at_version(SNAP_A, 1)
    assert not publish.synced
    assert session.snapshot == at_version(SNAP_A, 1)
    # Session ids are per version: the v1 connection starts with a Reset Query.
    assert reconnect(session) == encode(ResetQuery(1))


def test_downgrade_to_v0_removes_router_keys_too() -> None:
    session = synced(SNAP_A)
    reconnect(session)
    actions = feed(session, encode(ErrorReport(0, ErrorCode.UNSUPPORTED_PROTOCOL_VERSION)))
    assert only_publish(actions).snapshot == at_version(SNAP_A, 0)


def test_error_4_after_negotiation_keeps_data_and_backs_off() -> None:
    session = synced()
    session.poll()
    actions = feed(session, encode(ErrorReport(2, ErrorCode.UNSUPPORTED_PROTOCOL_VERSION)))
    assert kinds(actions) == ["Disconnect"]
    assert not actions[0].reconnect_now  # type: ignore[union-attr]
    assert session.version == 2
    assert session.snapshot == SNAP_A


@pytest.mark.parametrize("version", [0, 1])
def test_lower_version_cache_response_is_an_implicit_downgrade(version: int) -> None:
    # StayRTR answered BIRD's v2 query with a v1 Cache Response (digest P3).
    session = ClientSession()
    session.connection_made()
    actions = feed(session, full(SNAP_A, version))
    assert kinds(actions) == ["Downgrade", "Publish", "PollAfter"]
    assert (actions[0].old, actions[0].new) == (2, version)  # type: ignore[union-attr]
    assert session.version == version
    assert only_publish(actions).snapshot == at_version(SNAP_A, version)
    assert session.poll() == encode(SerialQuery(version, SID, 1))


def test_implicit_downgrade_after_serial_query_reconnects_with_reset() -> None:
    session = synced(SNAP_A)
    reconnect(session)
    actions = feed(session, full(SNAP_B, 1))
    assert kinds(actions) == ["Downgrade", "Publish", "Disconnect"]
    assert actions[2].reconnect_now  # type: ignore[union-attr]
    assert reconnect(session) == encode(ResetQuery(1))


def test_higher_version_reply_is_unexpected_version() -> None:
    session = ClientSession(max_version=1)
    session.connection_made()
    raw = encode(CacheResponse(2, SID))
    report = error_of(feed(session, raw)[-1])
    assert (report.version, report.code, report.pdu) == (
        1,
        ErrorCode.UNEXPECTED_PROTOCOL_VERSION,
        raw,
    )


@pytest.mark.parametrize(("have", "got"), [(1, 2), (2, 1), (1, 0), (2, 0)])
def test_other_version_after_negotiation_is_error_8(have: int, got: int) -> None:
    session = synced(version=have)
    raw = encode(SerialNotify(got, SID, 9))
    report = error_of(feed(session, raw)[-1])
    assert (report.version, report.code, report.pdu) == (
        have,
        ErrorCode.UNEXPECTED_PROTOCOL_VERSION,
        raw,
    )
    assert session.snapshot is None


def test_malformed_pdu_of_other_version_is_error_8() -> None:
    session = synced(version=2)
    raw = bytes.fromhex("01040000 00000014 01181800 c0000201 0000fbf0")  # v1, host bits
    report = error_of(feed(session, raw)[-1])
    assert (report.version, report.code, report.pdu) == (
        2,
        ErrorCode.UNEXPECTED_PROTOCOL_VERSION,
        raw,
    )


def test_other_version_on_v0_closes_without_report() -> None:
    session = synced(version=0)
    actions = feed(session, encode(SerialNotify(1, SID, 9)))
    assert kinds(actions) == ["Disconnect"]
    assert actions[0].data == b""  # type: ignore[union-attr]
    assert actions[0].drop_data  # type: ignore[union-attr]


# ------------------------------------------------------------------------------- legacy ASPA


def test_is_legacy_aspa_vectors() -> None:
    legacy = bytes.fromhex("020b0000 00000018 01000002 0000fbf0 0000fbf1 0000fbf2")
    assert is_legacy_aspa(legacy)  # the digest's draft-10 vector
    assert is_legacy_aspa(LEGACY_ASPA_V4)
    assert is_legacy_aspa(bytes.fromhex("020b0000 00000010 00000000 0000fbf0"))  # no providers
    assert not is_legacy_aspa(encode(AspaPdu(2, 1, 64496, (64497, 64498))))
    assert not is_legacy_aspa(encode(AspaPdu(2, 0, 64496)))
    assert not is_legacy_aspa(b"\x01" + legacy[1:])  # not version 2
    assert not is_legacy_aspa(legacy[:-4])  # Length says 24
    bad_count = bytearray(legacy)
    bad_count[11] = 3
    assert not is_legacy_aspa(bytes(bad_count))


def test_stayrtr_legacy_aspa_means_v1_with_one_downgrade() -> None:
    session = synced(SNAP_A)  # held ASPAs must go at once
    assert reconnect(session) == encode(SerialQuery(2, SID, 1))
    feed(session, encode(CacheReset(2)))
    actions = feed(session, STAYRTR_V2)
    assert kinds(actions) == ["Downgrade", "Publish", "Disconnect"]
    downgrade, publish, close = actions
    assert isinstance(downgrade, Downgrade)
    assert (downgrade.old, downgrade.new, downgrade.legacy_aspa) == (2, 1, True)
    assert isinstance(publish, Publish)
    assert publish.snapshot == at_version(SNAP_A, 1)
    assert isinstance(close, Disconnect)
    assert close.reconnect_now
    assert not close.drop_data
    report = error_of(close)
    assert (report.version, report.code, report.pdu) == (2, ErrorCode.CORRUPT_DATA, LEGACY_ASPA_V4)
    assert session.legacy_aspa
    # Reconnect at v1 and stay there: StayRTR's v1 reply has no ASPA, nothing more happens.
    assert reconnect(session) == encode(ResetQuery(1))
    stay_v1 = bytearray(STAYRTR_V2[:60] + STAYRTR_V2[-24:])  # the same reply without ASPA
    for offset in (0, 8, 40, 60):  # each PDU's version octet
        stay_v1[offset] = 1
    actions = feed(session, bytes(stay_v1))
    assert kinds(actions) == ["Publish", "PollAfter"]
    assert session.version == 1
    assert reconnect(session) == encode(SerialQuery(1, 0xFDDD, 0))


def test_legacy_layout_on_v1_session_is_not_legacy() -> None:
    session = synced(version=1)
    session.poll()
    raw = b"\x01" + LEGACY_ASPA_V4[1:]
    actions = feed(session, encode(CacheResponse(1, SID)), raw)
    report = error_of(actions[-1])
    assert report.code == ErrorCode.UNSUPPORTED_PDU_TYPE
    assert not session.legacy_aspa


# ------------------------------------------------------------------------------- fatal errors


MALFORMED = {
    "host bits": ("02040000 00000014 01181800 c0000201 0000fbf0", ErrorCode.CORRUPT_DATA),
    "max < len": ("02040000 00000014 01181000 c0000200 0000fbf0", ErrorCode.CORRUPT_DATA),
    "len > 32": ("02040000 00000014 01212100 c0000200 0000fbf0", ErrorCode.CORRUPT_DATA),
    "bad length": ("02040000 00000015 01181800 c0000200 0000fbf0 00", ErrorCode.CORRUPT_DATA),
    "v6 host bits": (
        "02060000 00000020 01202000 20010db8 00000000 00000000 00000001 0000fbf0",
        ErrorCode.CORRUPT_DATA,
    ),
    "unsorted providers": (
        "020b0100 00000014 0000fbf0 0000fbf2 0000fbf1",
        ErrorCode.ASPA_PROVIDER_LIST_ERROR,
    ),
    "no providers": ("020b0100 0000000c 0000fbf0", ErrorCode.ASPA_PROVIDER_LIST_ERROR),
    "bad timers": (
        "02071234 00000018 00000001 00000000 0000012c 00000e10",
        ErrorCode.CORRUPT_DATA,
    ),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_pdu_is_reported_and_data_dropped(case: str) -> None:
    text, code = MALFORMED[case]
    raw = bytes.fromhex(text)
    session = synced()
    session.poll()
    actions = feed(session, encode(CacheResponse(2, SID)), raw)
    report = error_of(actions[-1])
    assert (report.code, report.pdu) == (code, raw)
    assert actions[-1].drop_data  # type: ignore[union-attr]
    assert session.snapshot is None
    assert reconnect(session) == encode(ResetQuery(2))


def test_length_field_beyond_limit_is_corrupt_data_with_header_only() -> None:
    session = ClientSession()
    session.connection_made()
    header = bytes.fromhex("0203123400100000")
    report = error_of(feed(session, header)[-1])
    assert (report.code, report.pdu) == (ErrorCode.CORRUPT_DATA, header)


def test_end_of_data_session_mismatch_is_corrupt_data() -> None:
    session = ClientSession()
    session.connection_made()
    raw = eod(2, session_id=OTHER_SID)
    report = error_of(feed(session, encode(CacheResponse(2, SID)), raw)[-1])
    assert (report.code, report.pdu) == (ErrorCode.CORRUPT_DATA, raw)


def test_serial_reply_naming_another_session_is_corrupt_data() -> None:
    session = synced()
    session.poll()
    report = error_of(feed(session, encode(CacheResponse(2, OTHER_SID)))[-1])
    assert report.code == ErrorCode.CORRUPT_DATA
    assert session.snapshot is None


@pytest.mark.parametrize("code", [0, 1, 3, 5, 6, 7, 8, 9, 10, 11, 13])
def test_fatal_error_from_cache_drops_data_and_is_not_answered(code: int) -> None:
    session = synced()
    actions = feed(session, encode(ErrorReport(2, code, b"", "bad")))
    assert kinds(actions) == ["Disconnect"]
    assert actions[0].data == b""  # type: ignore[union-attr]
    assert actions[0].drop_data  # type: ignore[union-attr]
    assert session.snapshot is None


def test_cache_restart_keeps_data() -> None:
    session = synced()
    actions = feed(session, encode(ErrorReport(2, ErrorCode.CACHE_RESTART)))
    assert kinds(actions) == ["Disconnect"]
    assert not actions[0].drop_data  # type: ignore[union-attr]
    assert session.snapshot == SNAP_A


def test_malformed_error_report_is_not_answered() -> None:
    session = synced()
    raw = bytes.fromhex("020a0001 00000010 00000005 00000000")
    actions = feed(session, raw)
    assert kinds(actions) == ["Disconnect"]
    assert actions[0].data == b""  # type: ignore[union-attr]
    assert session.snapshot is None


def test_aspa_for_customer_as0_is_corrupt_data() -> None:
    session = synced()
    session.poll()
    raw = encode(AspaPdu(2, 1, 0, (64496,)))
    report = error_of(feed(session, encode(CacheResponse(2, SID)), raw)[-1])
    assert (report.code, report.pdu) == (ErrorCode.CORRUPT_DATA, raw)


def test_unknown_error_code_drops_data() -> None:
    session = synced()
    actions = feed(session, struct.pack(">BBHIII", 2, 10, 99, 16, 0, 0))
    assert actions[0].drop_data  # type: ignore[union-attr]


def test_router_key_on_v0_is_unsupported_pdu_type() -> None:
    session = ClientSession(max_version=0)
    session.connection_made()
    raw = b"\x00" + encode(RouterKeyPdu(1, 1, SKI, 1, b"\x01"))[1:]
    report = error_of(feed(session, encode(CacheResponse(0, SID)), raw)[-1])
    assert (report.version, report.code) == (0, ErrorCode.UNSUPPORTED_PDU_TYPE)


# ------------------------------------------------------------------------------- EOF, expiry


def test_eof_keeps_data() -> None:
    session = synced()
    actions = feed(session, b"")
    assert kinds(actions) == ["Disconnect"]
    assert not actions[0].drop_data  # type: ignore[union-attr]
    assert session.snapshot == SNAP_A
    session.receive_data(b"ignored while closing")
    assert kinds(drain(session)) == ["Disconnect"]


def test_eof_inside_a_reply_keeps_old_data() -> None:
    session = synced()
    session.poll()
    assert feed(session, delta(SNAP_A, SNAP_B)[:-3]) == []
    actions = feed(session, b"")
    assert kinds(actions) == ["Disconnect"]
    assert "inside a PDU" in actions[0].reason  # type: ignore[union-attr]
    assert session.snapshot == SNAP_A


def test_data_after_eof_is_a_bug() -> None:
    session = ClientSession()
    session.connection_made()
    session.receive_data(b"\x02")
    session.receive_data(b"")
    session.receive_data(b"")  # EOF twice is harmless
    with pytest.raises(RuntimeError):
        session.receive_data(b"\x03")


def test_expire_drops_data_and_next_query_is_reset() -> None:
    session = synced()
    assert session.expire()
    assert not session.expire()
    assert session.snapshot is None
    assert session.poll() == encode(ResetQuery(2))


def test_expire_during_a_delta_discards_it_and_resets() -> None:
    session = synced()
    session.poll()
    reply = delta(SNAP_A, SNAP_B)
    feed(session, reply[:20])
    assert session.expire()
    actions = feed(session, reply[20:])
    assert actions == [Transmit(encode(ResetQuery(2)))]
    assert only_publish(feed(session, full(SNAP_B, serial=2))).snapshot == SNAP_B


def test_expire_during_a_full_reply_keeps_staging() -> None:
    session = synced()
    session.connection_lost()
    session.connection_made()
    feed(session, encode(CacheReset(2)))
    reply = full(SNAP_B, serial=2)
    feed(session, reply[:30])
    session.expire()
    assert only_publish(feed(session, reply[30:])).snapshot == SNAP_B


# ------------------------------------------------------------------------------- reply bounds

#: SNAP_A on the wire at v2: 4 records in 20 + 32 + (32 + 3) + (12 + 4) octets.
SNAP_A_RECORDS, SNAP_A_OCTETS = 4, 103


def bounded(**kwargs: Any) -> ClientSession:
    """A session holding SNAP_A (serial 1) whose Serial Query is out."""
    session = ClientSession(**kwargs)
    session.connection_made()
    assert kinds(feed(session, full(SNAP_A))) == ["Publish", "PollAfter"]
    assert session.poll() == encode(SerialQuery(2, SID, 1))
    return session


def host_routes(count: int, *, start: int = 0) -> bytes:
    """``count`` distinct IPv4 /32 announcements (10.0.0.0 upwards)."""
    return b"".join(
        encode(Ipv4Prefix(2, 1, 32, 32, 0x0A00_0000 + i, 64496)) for i in range(start, count)
    )


def over_bound(actions: list[ClientAction], what: str) -> Disconnect:
    assert kinds(actions) == ["Disconnect"], actions
    close = actions[0]
    assert isinstance(close, Disconnect)
    assert (close.data, close.drop_data, close.reconnect_now) == (b"", False, False)
    assert close.protocol_error
    assert what in close.reason
    assert "without End of Data" in close.reason
    return close


def test_reply_bound_defaults() -> None:
    session = ClientSession()
    assert (session.reply_record_floor, session.reply_byte_floor, session.reply_growth) == (
        3_000_000,
        128 * 1024 * 1024,
        4,
    )
    with pytest.raises(ValueError, match="reply_record_floor"):
        ClientSession(reply_record_floor=0)
    with pytest.raises(ValueError, match="reply_byte_floor"):
        ClientSession(reply_byte_floor=0)
    with pytest.raises(ValueError, match="reply_growth"):
        ClientSession(reply_growth=0)


@pytest.mark.parametrize("fast_path", [True, False])
def test_reply_staging_more_records_than_the_floor_is_dropped_and_the_data_stays(
    fast_path: bool,
) -> None:
    # A reply that never reaches End of Data grew memory without bound (issue 12, item 15).
    session = bounded(reply_record_floor=20, fast_path=fast_path)
    start = encode(CacheResponse(2, SID))
    assert feed(session, start, host_routes(20)) == []
    close = over_bound(feed(session, host_routes(21, start=20)), "20 records")
    assert session.state is ClientState.CLOSING
    assert (session.snapshot, session.serial) == (SNAP_A, 1)
    session.connection_lost()
    # The bound is per reply: the next one goes through.
    assert session.connection_made() == encode(SerialQuery(2, SID, 1))
    assert only_publish(feed(session, delta(SNAP_A, SNAP_B))).snapshot == SNAP_B
    assert "max(20, 4 x the records held)" in close.reason


def test_reply_record_bound_grows_with_the_data_held() -> None:
    session = bounded(reply_record_floor=SNAP_A_RECORDS)
    bound = 4 * SNAP_A_RECORDS
    assert feed(session, encode(CacheResponse(2, SID)), host_routes(bound)) == []
    over_bound(feed(session, host_routes(bound + 1, start=bound)), f"{bound} records")
    assert session.snapshot == SNAP_A


def test_aspa_providers_count_as_records() -> None:
    # An ASPA's memory grows with its providers (up to 16,380 in one PDU).
    session = bounded(reply_record_floor=20)
    big = encode(AspaPdu(2, 1, 64600, tuple(range(65000, 65021))))
    over_bound(feed(session, encode(CacheResponse(2, SID)), big), "20 records")
    assert session.snapshot == SNAP_A


def test_full_reply_counts_against_the_bound_too() -> None:
    session = bounded(reply_record_floor=50)
    session.connection_lost()
    session.connection_made()
    assert feed(session, encode(CacheReset(2))) == [Transmit(encode(ResetQuery(2)))]
    actions = feed(session, encode(CacheResponse(2, OTHER_SID)), host_routes(51), eod(2))
    over_bound(actions, "50 records")
    assert (session.snapshot, session.session_id) == (SNAP_A, SID)


@pytest.mark.parametrize("fast_path", [True, False])
def test_reply_taking_more_octets_than_its_bound_is_dropped(fast_path: bool) -> None:
    # Announce + withdraw of one record stages nothing, forever: only the octets show it.
    session = bounded(reply_byte_floor=200, fast_path=fast_path)
    bound = 4 * SNAP_A_OCTETS
    churn = v4_pdu(VRP_C) + v4_pdu(VRP_C, announce=False)
    assert feed(session, encode(CacheResponse(2, SID)), churn * (bound // 40)) == []
    over_bound(feed(session, churn), f"{bound:,} octets")
    assert session.snapshot == SNAP_A


def test_reply_bounds_checked_across_many_small_receives() -> None:
    session = bounded(reply_record_floor=300)
    session.receive_data(encode(CacheResponse(2, SID)))
    assert drain(session) == []
    routes = host_routes(400)
    actions: list[ClientAction] = []
    for offset in range(0, len(routes), 7):
        session.receive_data(routes[offset : offset + 7])
        actions += drain(session)
        if actions:
            break
    over_bound(actions, "300 records")
    # Caught at the PDU that passed the bound, not later.
    assert offset < 301 * 20 <= offset + 7


# ------------------------------------------------------------------------------- properties


def naive(pdus: list[bytes], base: set[Any] | None) -> tuple[str, Any]:
    """An independent strict router: decode each PDU with `decode`, sets for state.

    Returns ("ok", (v4 keys, v6 keys)) or ("error", (code, offending PDU)).
    """
    held: set[Any] = set(base or ())
    for raw in pdus:
        try:
            pdu = decode(raw)
        except RtrProtocolError as exc:
            return "error", (exc.code, exc.offending)
        assert isinstance(pdu, Ipv4Prefix | Ipv6Prefix)
        pack = pack_v4 if isinstance(pdu, Ipv4Prefix) else pack_v6
        key = pack(pdu.prefix, pdu.prefix_length, pdu.max_length, pdu.asn)
        if pdu.flags & 1:
            if key in held:
                return "error", (ErrorCode.DUPLICATE_ANNOUNCEMENT, raw)
            held.add(key)
        else:
            if key not in held:
                return "error", (ErrorCode.WITHDRAWAL_OF_UNKNOWN_RECORD, raw)
            held.remove(key)
    return "ok", held


#: Prefix PDUs from small pools (frequent duplicates), some deliberately invalid.
V4_CHOICES = [0xC000_0200, 0xC000_0201, 0x0A00_0000, 0]
V6_CHOICES = [0x2001_0DB8 << 96, (0x2001_0DB8 << 96) | 1, 0]


@st.composite
def prefix_bytes(draw: st.DrawFn, *, valid_only: bool) -> bytes:
    v6 = draw(st.booleans())
    bits = 128 if v6 else 32
    plen = draw(
        st.sampled_from([0, 8, 24, bits - 1, bits] if valid_only else [0, 8, 24, bits, bits + 1])
    )
    mlen = draw(st.sampled_from([plen, bits] if valid_only else [plen, bits, max(plen - 1, 0)]))
    address = draw(st.sampled_from(V6_CHOICES if v6 else V4_CHOICES))
    if valid_only:
        address &= ~((1 << (bits - min(plen, bits))) - 1)
    flags = draw(st.sampled_from([1, 1, 1, 0, 3, 0x81] if not valid_only else [1, 1, 0]))
    asn = draw(st.sampled_from([0, 64496]))
    if v6:
        return (
            struct.pack(">BBHIBBBB", 2, 6, 0, 32, flags, plen, mlen, 0)
            + address.to_bytes(16, "big")
            + asn.to_bytes(4, "big")
        )
    return struct.pack(
        ">BBHIBBBBII", 2, 4, draw(st.sampled_from([0, 7])), 20, flags, plen, mlen, 0, address, asn
    )


def run_reply(
    pdus: list[bytes], cuts: list[int], *, full_reply: bool, fast_path: bool = True
) -> list[ClientAction]:
    """Feed ``pdus`` as one reply (full, or a delta to SNAP_A), cut at ``cuts``."""
    if full_reply:
        session = ClientSession(fast_path=fast_path)
        session.connection_made()
    else:
        session = synced(SNAP_A)
        session.fast_path = fast_path
        session.poll()
    stream = encode(CacheResponse(2, SID)) + b"".join(pdus) + eod(2, 2)
    bounds = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    actions: list[ClientAction] = []
    for start, end in itertools.pairwise(bounds):
        session.receive_data(stream[start:end])
        actions += drain(session)
        if actions and isinstance(actions[-1], Disconnect):
            break
    return actions


@settings(max_examples=300, deadline=None)
@given(
    pdus=st.lists(prefix_bytes(valid_only=False), max_size=30),
    cuts=st.lists(st.integers(0, 2000), max_size=6),
    full_reply=st.booleans(),
    fast_path=st.booleans(),
)
def test_prefix_staging_agrees_with_a_naive_router(
    pdus: list[bytes], cuts: list[int], full_reply: bool, fast_path: bool
) -> None:
    """Both the column-wise fast path and the per-PDU path behave like a naive strict router."""
    base = None if full_reply else set(split(SNAP_A.v4, 10)) | set(split(SNAP_A.v6, 22))
    outcome, detail = naive(pdus, base)
    actions = run_reply(pdus, cuts, full_reply=full_reply, fast_path=fast_path)
    if outcome == "ok":
        publish = only_publish(actions)
        got = set(split(publish.snapshot.v4, 10)) | set(split(publish.snapshot.v6, 22))
        assert got == detail
        assert publish.snapshot.v4 == b"".join(sorted(split(publish.snapshot.v4, 10), reverse=True))
        assert publish.snapshot.v6 == b"".join(sorted(split(publish.snapshot.v6, 22), reverse=True))
    else:
        report = error_of(actions[-1])
        assert (report.code, report.pdu) == detail


@settings(max_examples=100, deadline=None)
@given(
    pdus=st.lists(prefix_bytes(valid_only=True), min_size=1, max_size=200, unique=True),
    fast_path=st.booleans(),
)
def test_valid_full_reply_matches_pack_functions(pdus: list[bytes], fast_path: bool) -> None:
    announced = [p for p in pdus if p[8] & 1]
    outcome, detail = naive(announced, None)
    actions = run_reply(announced, [], full_reply=True, fast_path=fast_path)
    if outcome == "ok":
        publish = only_publish(actions)
        assert set(split(publish.snapshot.v4, 10)) | set(split(publish.snapshot.v6, 22)) == detail
    else:
        assert (error_of(actions[-1]).code, error_of(actions[-1]).pdu) == detail


KEY_POOL = sorted(
    {
        pack_v4(address << 8, 24, max_length, asn)
        for address in range(0, 4000, 7)
        for max_length in (24, 25)
        for asn in (0, 64496)
    },
    reverse=True,
)


@settings(max_examples=200, deadline=None)
@given(
    held=st.sets(st.sampled_from(KEY_POOL), min_size=0, max_size=400),
    gone=st.sets(st.sampled_from(KEY_POOL), max_size=20),
    new=st.sets(st.sampled_from(KEY_POOL), max_size=20),
)
def test_splice_equals_set_arithmetic(held: set[bytes], gone: set[bytes], new: set[bytes]) -> None:
    removed = gone & held
    added = dict.fromkeys(new - held)
    packed = b"".join(sorted(held, reverse=True))
    expected = b"".join(sorted((held - removed) | added.keys(), reverse=True))
    assert _splice(packed, 10, removed, added) == expected


@settings(max_examples=50, deadline=None)
@given(
    held=st.sets(st.sampled_from(KEY_POOL), min_size=100, max_size=600),
    changes=st.lists(st.tuples(st.sampled_from(KEY_POOL), st.booleans()), max_size=40),
)
def test_deltas_on_a_big_table_agree_with_a_naive_router(
    held: set[bytes], changes: list[tuple[bytes, bool]]
) -> None:
    """Small deltas are spliced, larger ones rebuilt: both must equal the naive result."""
    table = Snapshot(b"".join(sorted(held, reverse=True)))
    session = synced(table)
    session.poll()
    pdus = []
    for key, announce in changes:
        vrp = Vrp.from_key(key)
        pdus.append(v4_pdu(vrp, announce=announce))
    outcome, detail = naive(pdus, set(held))
    session.receive_data(encode(CacheResponse(2, SID)) + b"".join(pdus) + eod(2, 2))
    actions = drain(session)
    if outcome == "ok":
        assert only_publish(actions).snapshot.v4 == b"".join(sorted(detail, reverse=True))
    else:
        assert (error_of(actions[-1]).code, error_of(actions[-1]).pdu) == detail


def split(packed: bytes, width: int) -> list[bytes]:
    return [packed[i : i + width] for i in range(0, len(packed), width)]


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300), max_version=st.integers(0, 2), synced_first=st.booleans())
def test_garbage_only_gives_actions(data: bytes, max_version: int, synced_first: bool) -> None:
    """Whatever a cache sends, the session answers with actions, never an exception."""
    session = (
        synced(version=max_version) if synced_first else ClientSession(max_version=max_version)
    )
    if not synced_first:
        session.connection_made()
    session.receive_data(data)
    for _ in range(len(data) + 5):
        action = session.next_action()
        if action is NEED_DATA or isinstance(action, Disconnect):
            break
    session.receive_data(b"")
    final = drain(session)
    assert final
    assert isinstance(final[-1], Disconnect)
