"""The router session against the cache session, bytes passed in memory: negotiation, deltas,
Cache Reset, session ids, Serial Notify and downgrades (no sockets, no clocks; h11-style pair).

`Pair` plays the I/O layers of both sides: it writes what each session asks for into the other's
receive buffer (the cache's full and delta replies from the server's shared encoder), closes the
"connection" when either side says so, reconnects at once when the router asks for that, and
keeps a transcript of every PDU on the wire. Timers never fire by themselves: a test polls.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rtr_protocol import (
    NEED_DATA,
    Action,
    AspaPdu,
    ClientAction,
    ClientSession,
    ClientState,
    Close,
    Disconnect,
    Downgrade,
    ErrorCode,
    ErrorReport,
    Ipv4Prefix,
    Ipv6Prefix,
    Pdu,
    PduFramer,
    Publish,
    RouterKeyPdu,
    SendCacheReset,
    SendDelta,
    SendError,
    SendFull,
    SerialQuery,
    ServerSession,
    Timers,
    Transmit,
    encode_delta_response,
    encode_full_response,
)
from snapshot import Aspa, Publisher, RouterKey, Serial, SessionIds, Snapshot, Vrp
from snapshot.model import pack_v4, pack_v6
from tests.protocol.strategies import at_version
from tests.snapshot.strategies import FEW, model_of, snapshots

TIMERS = Timers(refresh=1800, retry=300, expire=3600)
IDS = SessionIds(0x1000, 0x2001, 0x3002)
NEW_IDS = SessionIds(0x7000, 0x7001, 0x7002)
SKI = bytes(range(1, 21))
KEY_1 = RouterKey(SKI, 64496, b"\x30\x59\x01")
KEY_2 = RouterKey(bytes(20), 64497, b"\x30\x02")
V4_1 = Vrp.parse("192.0.2.0/24", 24, 64496)
V4_2 = Vrp.parse("198.51.100.0/22", 24, 64498)
V6_1 = Vrp.parse("2001:db8::/32", 48, 64497)
V6_2 = Vrp.parse("2001:db8:1::/48", 48, 64499)
#: Every kind of payload; B keeps some of A, changes an ASPA, withdraws and announces the rest.
SNAP_A = Snapshot.build(
    vrps=[V4_1, V4_2, V6_1], aspas=[Aspa(64500, (64501,)), Aspa(64510, (0,))], router_keys=[KEY_1]
)
SNAP_B = Snapshot.build(
    vrps=[V4_1, V6_1, V6_2], aspas=[Aspa(64500, (64501, 64502))], router_keys=[KEY_2]
)
SNAP_C = Snapshot.build(vrps=[V4_2, V6_2], aspas=[Aspa(64520, (64521,))], router_keys=[KEY_1])
PAYLOAD = (Ipv4Prefix, Ipv6Prefix, RouterKeyPdu, AspaPdu)


def describe(by: str, pdu: Pdu) -> str:
    """One transcript line, e.g. ``cache ErrorReport v1 UNSUPPORTED_PROTOCOL_VERSION``."""
    line = f"{by} {type(pdu).__name__} v{pdu.version}"
    if isinstance(pdu, ErrorReport):
        line += f" {ErrorCode(pdu.code).name}"
    return line


@dataclass(frozen=True)
class Sent:
    """One PDU on the wire."""

    by: str
    connection: int
    pdu: Pdu


class Pair:
    """A `ClientSession` and, per connection, a fresh `ServerSession` serving ``publisher``."""

    #: Connections one `run` may open (a downgrade needs two; more means a loop).
    MAX_CONNECTIONS = 4

    def __init__(
        self,
        router: ClientSession,
        publisher: Publisher,
        *,
        max_version: int = 2,
        min_version: int = 0,
    ) -> None:
        self.router = router
        self.publisher = publisher
        self.max_version = max_version
        self.min_version = min_version
        self.server = ServerSession()
        self.connection = 0
        self.wire: list[Sent] = []
        self.flow: list[str] = []
        self.router_actions: list[ClientAction] = []
        self.cache_actions: list[Action] = []
        self.disconnect: Disconnect | None = None
        self._to_cache = bytearray()
        self._to_router = bytearray()
        self._cache_eof = self._router_eof = False
        self._cache_up = self._router_up = False
        self._framers = {"router": PduFramer(), "cache": PduFramer()}

    # ----------------------------------------------------------------- the test's moves
    def connect(self) -> None:
        """A new connection: a fresh cache session, the router's first query on its way."""
        assert self.router.state is ClientState.DISCONNECTED
        self.connection += 1
        self.flow.append(f"connection {self.connection}")
        self.server = ServerSession(max_version=self.max_version, min_version=self.min_version)
        self._framers = {"router": PduFramer(), "cache": PduFramer()}
        self._to_cache.clear()
        self._to_router.clear()
        self._cache_eof = self._router_eof = False
        self._cache_up = self._router_up = True
        self.disconnect = None
        self._write("router", self.router.connection_made())

    def run(self) -> None:
        """Pass bytes both ways until both sides wait; reconnect when the router asks to."""
        opened = 0
        while True:
            self._pump()
            if self._router_up or self.disconnect is None or not self.disconnect.reconnect_now:
                return
            opened += 1
            assert opened < self.MAX_CONNECTIONS, f"reconnect loop: {self.flow}"
            self.connect()

    def sync(self) -> None:
        """Connect and run (the router's first exchange with the cache)."""
        self.connect()
        self.run()

    def publish(self, snapshot: Snapshot) -> None:
        """The cache publishes ``snapshot`` (the cache session reads it at its next PDU)."""
        self.publisher.publish(snapshot)

    def poll(self) -> None:
        """The router's Refresh timer fires."""
        data = self.router.poll()
        assert data is not None, f"router not IDLE: {self.router.state}"
        self._write("router", data)

    def notify(self) -> None:
        """The cache sends a Serial Notify for its current state (it must be allowed to)."""
        assert self.publisher.current is not None
        data = self.server.serial_notify(self.publisher.current)
        assert data is not None, "the cache may not notify now"
        self._write("cache", data)

    def cache_goes_away(self, code: ErrorCode) -> None:
        """The cache ends the session (Cache Restart / Shutdown) and closes the connection."""
        self._write("cache", self.server.goodbye(code))
        self._cache_up, self._router_eof = False, True
        self.run()

    # ----------------------------------------------------------------- transcript views
    def sent(self, by: str, connection: int | None = None) -> list[Pdu]:
        """The PDUs ``by`` ("router" / "cache") wrote, on one connection or all."""
        return [
            s.pdu
            for s in self.wire
            if s.by == by and (connection is None or s.connection == connection)
        ]

    def published(self) -> list[Publish]:
        """Every Publish the router handed out, in order."""
        return [a for a in self.router_actions if isinstance(a, Publish)]

    # ----------------------------------------------------------------- the I/O layers
    def _write(self, by: str, data: bytes) -> None:
        if not (data and self._router_up and self._cache_up):
            return  # nothing, or a connection already closed at one end: the bytes are lost
        framer = self._framers[by]
        framer.receive_data(data)
        while (pdu := framer.next_pdu()) is not NEED_DATA:
            self.wire.append(Sent(by, self.connection, pdu))
            if not isinstance(pdu, PAYLOAD):
                self.flow.append(describe(by, pdu))
        (self._to_cache if by == "router" else self._to_router).extend(data)

    def _pump(self) -> None:
        while True:
            if self._router_up and (self._to_router or self._router_eof):
                data, eof = bytes(self._to_router), self._router_eof
                self._to_router.clear()
                self._router_eof = False
                self.router.receive_data(data)
                if eof:
                    self.router.receive_data(b"")
                self._drive_router()
            elif self._cache_up and (self._to_cache or self._cache_eof):
                data, eof = bytes(self._to_cache), self._cache_eof
                self._to_cache.clear()
                self._cache_eof = False
                self.server.receive_data(data)
                if eof:
                    self.server.receive_data(b"")
                self._drive_cache()
            else:
                return

    def _drive_router(self) -> None:
        while (action := self.router.next_action()) is not NEED_DATA:
            self.router_actions.append(action)
            if isinstance(action, Transmit):
                self._write("router", action.data)
            elif isinstance(action, Disconnect):
                self._write("router", action.data)
                self.disconnect = action
                self._router_up, self._cache_eof = False, True
                self.router.connection_lost()
                return

    def _drive_cache(self) -> None:
        while (action := self.server.next_action(self.publisher.current)) is not NEED_DATA:
            self.cache_actions.append(action)
            if isinstance(action, SendFull):
                state = action.state
                chunks = encode_full_response(
                    state.snapshot, action.version, action.session_id, state.serial, TIMERS
                )
                self._write("cache", b"".join(chunks))
                self.server.response_sent()
            elif isinstance(action, SendDelta):
                chunks = encode_delta_response(
                    action.delta, action.version, action.session_id, action.state.serial, TIMERS
                )
                self._write("cache", b"".join(chunks))
                self.server.response_sent()
            elif isinstance(action, SendCacheReset | SendError):
                self._write("cache", action.data)
            else:
                assert isinstance(action, Close)
                self._write("cache", action.data)
                self._cache_up, self._router_eof = False, True
                return


def pair_at(
    router_version: int = 2,
    snapshot: Snapshot = SNAP_A,
    *,
    publisher: Publisher | None = None,
    max_version: int = 2,
    min_version: int = 0,
) -> Pair:
    """A router of ``router_version`` and a cache that published ``snapshot``; not connected."""
    publisher = publisher or Publisher(IDS)
    publisher.publish(snapshot)
    router = ClientSession(max_version=router_version)
    return Pair(router, publisher, max_version=max_version, min_version=min_version)


def synced_pair(
    router_version: int = 2, snapshot: Snapshot = SNAP_A, *, publisher: Publisher | None = None
) -> Pair:
    """A pair whose router completed a Reset Query exchange and holds ``snapshot``."""
    pair = pair_at(router_version, snapshot, publisher=publisher)
    pair.sync()
    assert_holds(pair, snapshot, router_version)
    return pair


def assert_holds(pair: Pair, snapshot: Snapshot, version: int) -> None:
    """The router holds exactly the cache's current data at ``version``, serial and session."""
    expected = at_version(snapshot, version)
    held = pair.router.snapshot
    assert held is not None
    assert model_of(held) == model_of(expected)
    assert held == expected
    state = pair.publisher.current
    assert state is not None
    assert state.snapshot == snapshot
    assert pair.router.serial == state.serial.value
    assert pair.router.session_id == state.session_ids.for_version(version)
    assert pair.router.version == version
    assert pair.router.state is ClientState.IDLE


def vrp_changes(pdus: list[Pdu]) -> tuple[set[Vrp], set[Vrp]]:
    """(announced, withdrawn) VRPs among ``pdus``."""
    announced: set[Vrp] = set()
    withdrawn: set[Vrp] = set()
    for pdu in pdus:
        if isinstance(pdu, Ipv4Prefix | Ipv6Prefix):
            pack = pack_v4 if isinstance(pdu, Ipv4Prefix) else pack_v6
            vrp = Vrp.from_key(pack(pdu.prefix, pdu.prefix_length, pdu.max_length, pdu.asn))
            (announced if pdu.flags & 1 else withdrawn).add(vrp)
    return announced, withdrawn


def reply_flow(version: int, *, by_router: str = "ResetQuery") -> list[str]:
    """The non-payload PDUs of one query answered with data, at ``version``."""
    return [
        f"router {by_router} v{version}",
        f"cache CacheResponse v{version}",
        f"cache EndOfData v{version}",
    ]


# ------------------------------------------------------------------------------- negotiation


@pytest.mark.parametrize("cache_version", [0, 1, 2])
@pytest.mark.parametrize("router_version", [0, 1, 2])
def test_negotiation_settles_on_the_lower_version_and_the_table_arrives(
    router_version: int, cache_version: int
) -> None:
    """Q <= C: the session runs at Q at once. Q > C: Error 4 carrying C (non-fatal; the cache
    keeps the connection), the router downgrades to C and reconnects with a Reset Query."""
    pair = pair_at(router_version, max_version=cache_version)
    pair.sync()
    version = min(router_version, cache_version)
    if router_version <= cache_version:
        assert pair.flow == ["connection 1", *reply_flow(version)]
        assert not any(isinstance(a, Downgrade) for a in pair.router_actions)
    else:
        assert pair.flow == [
            "connection 1",
            f"router ResetQuery v{router_version}",
            f"cache ErrorReport v{cache_version} UNSUPPORTED_PROTOCOL_VERSION",
            "connection 2",
            *reply_flow(version),
        ]
        downgrades = [a for a in pair.router_actions if isinstance(a, Downgrade)]
        assert [(d.old, d.new) for d in downgrades] == [(router_version, cache_version)]
        assert isinstance(pair.cache_actions[0], SendError)  # not a Close: the cache waited
    assert {pdu.version for pdu in pair.sent("router", pair.connection)} == {version}
    assert {pdu.version for pdu in pair.sent("cache", pair.connection)} == {version}
    assert pair.server.version == version
    assert pair.router.negotiated
    assert_holds(pair, SNAP_A, version)
    assert pair.published()[-1].synced


def test_a_cache_that_dropped_v0_ends_a_v0_router_without_a_loop() -> None:
    """Q < C and Q unsupported: Error 4 (version C) and a close; at v0 the router gives up."""
    pair = pair_at(0, min_version=1)
    pair.sync()
    assert pair.flow == [
        "connection 1",
        "router ResetQuery v0",
        "cache ErrorReport v2 UNSUPPORTED_PROTOCOL_VERSION",
    ]
    assert pair.router.state is ClientState.DISCONNECTED
    assert pair.disconnect is not None
    assert not pair.disconnect.reconnect_now
    assert pair.router.snapshot is None
    assert pair.published() == []


def test_a_v1_router_refused_by_a_v2_only_cache_steps_down_once_and_stops() -> None:
    """Error 4 naming a version above ours: one step down (to v0), refused again, no loop."""
    pair = pair_at(1, min_version=2)
    pair.sync()
    assert pair.flow == [
        "connection 1",
        "router ResetQuery v1",
        "cache ErrorReport v2 UNSUPPORTED_PROTOCOL_VERSION",
        "connection 2",
        "router ResetQuery v0",
        "cache ErrorReport v2 UNSUPPORTED_PROTOCOL_VERSION",
    ]
    assert pair.router.version == 0
    assert pair.router.state is ClientState.DISCONNECTED
    assert pair.router.snapshot is None


def test_a_downgraded_cache_trims_the_held_data_then_serves_the_new_table() -> None:
    """A v2 router holding data meets a v1 cache after a restart: its Serial Query gets
    Error 4 (v1); it drops the ASPA it can no longer speak about (an unsynced Publish),
    forgets the v2 session and serial, reconnects with a v1 Reset Query and converges."""
    pair = synced_pair(2, SNAP_A)
    pair.cache_goes_away(ErrorCode.CACHE_RESTART)
    assert pair.router.snapshot == SNAP_A  # Cache Restart keeps the data
    pair.max_version = 1
    pair.publish(SNAP_B)
    before = len(pair.router_actions)
    pair.sync()
    assert pair.flow[-7:] == [
        "connection 2",
        "router SerialQuery v2",
        "cache ErrorReport v1 UNSUPPORTED_PROTOCOL_VERSION",
        "connection 3",
        *reply_flow(1),
    ]
    published = [a for a in pair.router_actions[before:] if isinstance(a, Publish)]
    assert [(p.snapshot, p.synced) for p in published] == [
        (at_version(SNAP_A, 1), False),
        (at_version(SNAP_B, 1), True),
    ]
    assert_holds(pair, SNAP_B, 1)


# ------------------------------------------------------------------------------- queries


@pytest.mark.parametrize("version", [0, 1, 2])
def test_reset_query_brings_exactly_the_cache_table(version: int) -> None:
    """Every IPv4/IPv6 VRP, the router keys from v1, the ASPAs on v2: nothing more or less."""
    pair = synced_pair(version, SNAP_A)
    announced, withdrawn = vrp_changes(pair.sent("cache"))
    assert announced == set(SNAP_A.vrps())
    assert not withdrawn
    keys = {(p.ski, p.asn, p.spki) for p in pair.sent("cache") if isinstance(p, RouterKeyPdu)}
    assert keys == ({(k.ski, k.asn, k.spki) for k in SNAP_A.router_keys} if version else set())
    aspas = {(p.customer, p.providers) for p in pair.sent("cache") if isinstance(p, AspaPdu)}
    expected = {(a.customer, a.providers) for a in SNAP_A.aspas} if version == 2 else set()
    assert aspas == expected


@pytest.mark.parametrize("version", [0, 1, 2])
def test_serial_query_applies_the_delta_and_ends_on_the_new_snapshot(version: int) -> None:
    pair = synced_pair(version, SNAP_A)
    pair.publish(SNAP_B)
    start = len(pair.wire)
    pair.poll()
    pair.run()
    assert pair.flow[-3:] == reply_flow(version, by_router="SerialQuery")
    query = pair.wire[start].pdu
    assert isinstance(query, SerialQuery)
    assert (query.session_id, query.serial) == (IDS.for_version(version), 0)
    reply = [s.pdu for s in pair.wire[start:] if s.by == "cache"]
    announced, withdrawn = vrp_changes(reply)
    assert announced == set(SNAP_B.vrps()) - set(SNAP_A.vrps())
    assert withdrawn == set(SNAP_A.vrps()) - set(SNAP_B.vrps())
    assert isinstance(pair.cache_actions[-1], SendDelta)
    assert_holds(pair, SNAP_B, version)
    assert pair.connection == 1


def test_a_serial_query_at_the_current_serial_changes_nothing() -> None:
    pair = synced_pair(2, SNAP_A)
    pair.poll()
    pair.run()
    assert pair.flow[-3:] == reply_flow(2, by_router="SerialQuery")
    assert pair.published()[-1].changed is False
    assert_holds(pair, SNAP_A, 2)


def test_a_serial_too_old_for_the_diff_log_gets_cache_reset_then_the_full_table() -> None:
    publisher = Publisher(IDS, max_entries=2)
    pair = synced_pair(2, SNAP_A, publisher=publisher)
    for snapshot in (SNAP_B, SNAP_C, SNAP_B):
        pair.publish(snapshot)
    state = publisher.current
    assert state is not None
    assert state.delta_since(Serial(0)) is None
    pair.poll()
    pair.run()
    assert pair.flow[-5:] == [
        "router SerialQuery v2",
        "cache CacheReset v2",
        *reply_flow(2),
    ]
    assert pair.connection == 1
    assert_holds(pair, SNAP_B, 2)


def test_a_serial_still_in_the_diff_log_gets_a_delta_not_a_reset() -> None:
    """The contrast to the Cache Reset test: one publish behind with the same small log."""
    publisher = Publisher(IDS, max_entries=2)
    pair = synced_pair(2, SNAP_A, publisher=publisher)
    pair.publish(SNAP_C)
    pair.poll()
    pair.run()
    assert "cache CacheReset v2" not in pair.flow
    assert pair.flow[-3:] == reply_flow(2, by_router="SerialQuery")
    assert_holds(pair, SNAP_C, 2)


# ------------------------------------------------------------------------------- session ids


def test_a_cache_restarted_with_new_session_ids_answers_the_old_serial_with_cache_reset() -> None:
    """Same serial number, other session: never an (empty) delta, always a Cache Reset."""
    pair = synced_pair(2, SNAP_A)
    pair.cache_goes_away(ErrorCode.CACHE_RESTART)
    pair.publisher = Publisher(NEW_IDS)
    pair.publish(SNAP_B)
    pair.sync()
    assert pair.flow[-6:] == [
        "connection 2",
        "router SerialQuery v2",
        "cache CacheReset v2",
        *reply_flow(2),
    ]
    query = pair.sent("router", 2)[0]
    assert isinstance(query, SerialQuery)
    assert query.session_id == IDS.v2
    assert pair.router.session_id == NEW_IDS.v2
    assert_holds(pair, SNAP_B, 2)


def test_cache_shutdown_drops_the_data() -> None:
    pair = synced_pair(2, SNAP_A)
    pair.cache_goes_away(ErrorCode.CACHE_SHUTDOWN)
    assert pair.flow[-1] == "cache ErrorReport v2 CACHE_SHUTDOWN"
    assert pair.router.snapshot is None
    assert pair.router.serial is None
    assert pair.disconnect is not None
    assert pair.disconnect.drop_data
    pair.sync()
    assert pair.flow[-4:] == ["connection 2", *reply_flow(2)]
    assert_holds(pair, SNAP_A, 2)


def test_a_notify_naming_a_new_session_makes_the_router_start_afresh() -> None:
    """The cache's state changes session ids on an open connection: the Notify names the new
    one, the router answers with a Reset Query, and later Serial Queries use the new id."""
    pair = synced_pair(2, SNAP_A)
    pair.publisher = Publisher(NEW_IDS)
    pair.publish(SNAP_C)
    pair.notify()
    pair.run()
    assert pair.flow[-4:] == ["cache SerialNotify v2", *reply_flow(2)]
    assert_holds(pair, SNAP_C, 2)
    pair.publish(SNAP_B)
    pair.poll()
    pair.run()
    assert pair.flow[-3:] == reply_flow(2, by_router="SerialQuery")
    assert_holds(pair, SNAP_B, 2)
    assert pair.connection == 1


# ------------------------------------------------------------------------------- Serial Notify


@pytest.mark.parametrize("version", [0, 1, 2])
def test_a_notify_of_a_new_serial_brings_the_delta_without_waiting_for_refresh(
    version: int,
) -> None:
    pair = synced_pair(version, SNAP_A)
    pair.publish(SNAP_B)
    pair.notify()
    pair.run()
    assert pair.flow[-4:] == [
        f"cache SerialNotify v{version}",
        *reply_flow(version, by_router="SerialQuery"),
    ]
    assert_holds(pair, SNAP_B, version)


def test_a_notify_of_the_serial_held_is_ignored() -> None:
    pair = synced_pair(2, SNAP_A)
    sent = len(pair.sent("router"))
    pair.notify()
    pair.run()
    assert pair.flow[-1] == "cache SerialNotify v2"
    assert len(pair.sent("router")) == sent
    assert_holds(pair, SNAP_A, 2)


def test_a_notify_while_a_query_is_out_is_remembered_not_answered_twice() -> None:
    """The Notify overtakes the cache's reading of our query; the reply reaches its serial,
    so the router does not query again."""
    pair = synced_pair(2, SNAP_A)
    pair.poll()  # the Serial Query is on its way, not yet read by the cache
    pair.publish(SNAP_B)
    pair.notify()
    pair.run()
    assert pair.flow[-4:] == [
        "router SerialQuery v2",
        "cache SerialNotify v2",
        "cache CacheResponse v2",
        "cache EndOfData v2",
    ]
    assert_holds(pair, SNAP_B, 2)


def test_a_notify_older_than_the_reply_costs_one_empty_serial_query() -> None:
    """The Notify (for B) overtakes our query; the cache answers it at C. The router compares
    the Notify with the End of Data after the reply and, as they differ, asks once more: an
    empty delta, no change, nothing further."""
    pair = synced_pair(2, SNAP_A)
    pair.poll()
    pair.publish(SNAP_B)
    pair.notify()
    pair.publish(SNAP_C)
    pair.run()
    assert pair.flow[-7:] == [
        "router SerialQuery v2",
        "cache SerialNotify v2",
        "cache CacheResponse v2",
        "cache EndOfData v2",
        *reply_flow(2, by_router="SerialQuery"),
    ]
    assert [p.changed for p in pair.published()[-2:]] == [True, False]
    assert_holds(pair, SNAP_C, 2)


def test_the_cache_never_notifies_before_negotiation() -> None:
    pair = pair_at(2)
    assert pair.publisher.current is not None
    assert pair.server.serial_notify(pair.publisher.current) is None
    pair.sync()
    assert pair.server.serial_notify(pair.publisher.current) is not None


# ------------------------------------------------------------------------------- properties


@FEW
@given(old=snapshots(), new=snapshots(), version=st.integers(0, 2))
def test_a_router_synced_at_a_that_serial_queries_ends_equal_to_b(
    old: Snapshot, new: Snapshot, version: int
) -> None:
    pair = synced_pair(version, old)
    pair.publish(new)
    start = len(pair.wire)
    pair.poll()
    pair.run()
    assert pair.flow[-3:] == reply_flow(version, by_router="SerialQuery")
    announced, withdrawn = vrp_changes([s.pdu for s in pair.wire[start:] if s.by == "cache"])
    assert announced == set(new.vrps()) - set(old.vrps())
    assert withdrawn == set(old.vrps()) - set(new.vrps())
    assert_holds(pair, new, version)
    assert pair.connection == 1


@FEW
@given(
    sequence=st.lists(st.tuples(snapshots(), st.booleans()), min_size=1, max_size=6),
    max_entries=st.integers(1, 3),
    version=st.integers(0, 2),
)
def test_a_router_polling_at_random_converges_by_delta_or_cache_reset(
    sequence: list[tuple[Snapshot, bool]], max_entries: int, version: int
) -> None:
    """Publishes with polls in between (or not), a small diff log: the router ends on the last
    snapshot after each poll, with a Cache Reset exactly when its serial fell out of the log."""
    publisher = Publisher(IDS, max_entries=max_entries)
    pair = synced_pair(version, Snapshot(), publisher=publisher)
    for snapshot, poll in sequence:
        pair.publish(snapshot)
        if not poll:
            continue
        state = publisher.current
        assert state is not None
        assert pair.router.serial is not None
        resets = pair.flow.count(f"cache CacheReset v{version}")
        expect_reset = state.delta_since(Serial(pair.router.serial)) is None
        pair.poll()
        pair.run()
        assert pair.flow.count(f"cache CacheReset v{version}") == resets + expect_reset
        assert_holds(pair, snapshot, version)
    assert pair.connection == 1
