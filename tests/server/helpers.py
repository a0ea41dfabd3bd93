"""Test data (rpki-client JSON exports), an independent model of what a router must hold, the
§8.1 order written out independently of the server's packed keys, and app/server runners.
"""

from __future__ import annotations

import base64
import functools
import ipaddress
import json
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from rtr_protocol import (
    AspaPdu,
    ErrorReport,
    Ipv4Prefix,
    Ipv6Prefix,
    Pdu,
    PduFramer,
    RouterKeyPdu,
    SessionState,
    Timers,
    decode,
)
from rtr_server.app import App
from rtr_server.app_config import AppConfig, make_clock
from rtr_server.connection import RtrConnection
from rtr_server.server import RtrServer
from rtr_server.settings import ListenAddress, ServerSettings
from snapshot.publisher import PublishedState, Publisher, SessionIds
from snapshot.snapshot import Snapshot
from tests.server.rtr_client import TIMEOUT, PayloadPdu, reset_query

#: Far-future expiry (2099-01-01).
FAR = 4_070_908_800
#: An expiry in the past (2001): such entries must never be served.
PAST = 1_000_000_000
#: Non-default timers, so End of Data visibly carries the configured ones.
TIMERS = Timers(refresh=1800, retry=300, expire=3600)

Doc = dict[str, list[dict[str, Any]]]
#: Identity of a prefix: (type 4 or 6, address as int, prefix length, max length, ASN).
PrefixRecord = tuple[int, int, int, int, int]
#: Identity of a router key: (SKI, ASN, SPKI).
KeyRecord = tuple[bytes, int, bytes]


# ------------------------------------------------------------------------------ exports


def roa(prefix: str, max_length: int, asn: int, expires: int = FAR) -> dict[str, Any]:
    """One rpki-client ``roas`` entry."""
    return {"asn": asn, "prefix": prefix, "maxLength": max_length, "expires": expires}


def spki(seed: int, size: int = 91) -> bytes:
    """Deterministic dummy SubjectPublicKeyInfo octets."""
    return bytes((seed * 7 + i) & 0xFF for i in range(size))


def router_key(asn: int, ski: bytes, key: bytes, expires: int = FAR) -> dict[str, Any]:
    """One rpki-client ``bgpsec_keys`` entry."""
    assert len(ski) == 20
    return {
        "asn": asn,
        "ski": ski.hex(),
        "pubkey": base64.b64encode(key).decode(),
        "expires": expires,
    }


def aspa(customer: int, providers: list[int], expires: int = FAR) -> dict[str, Any]:
    """One rpki-client ``aspas`` entry."""
    return {"customer_asid": customer, "providers": providers, "expires": expires}


def export(
    roas: Iterable[dict[str, Any]] = (),
    keys: Iterable[dict[str, Any]] = (),
    aspas: Iterable[dict[str, Any]] = (),
) -> Doc:
    """An rpki-client ``-j`` style document."""
    return {"roas": list(roas), "bgpsec_keys": list(keys), "aspas": list(aspas)}


def write_export(path: Path, doc: Doc | str) -> None:
    """Replace ``path`` atomically (new inode, so the poller always sees the change)."""
    text = doc if isinstance(doc, str) else json.dumps(doc)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


SKI_A = bytes(range(1, 21))
SKI_B = bytes(range(2, 22))
SKI_C = bytes(range(0x80, 0x94))


def base_export() -> Doc:
    """A small export whose §8.1 order is not trivial (ties on every sort column)."""
    return export(
        roas=[
            roa("192.0.2.0/24", 24, 64496),
            roa("192.0.2.0/24", 24, 64496),  # duplicate: one VRP
            roa("192.0.2.0/24", 24, 64497),
            roa("192.0.2.0/24", 26, 64496),
            roa("192.0.2.0/23", 24, 64496),
            roa("10.0.0.0/8", 24, 0),
            roa("10.0.0.0/8", 8, 65000),
            roa("203.0.113.0/24", 24, 4_200_000_000),
            roa("240.0.0.0/4", 32, 0),
            roa("0.0.0.0/0", 0, 0),
            roa("198.51.100.0/24", 24, 64499, expires=PAST),  # expired: never served
            roa("2001:db8::/32", 48, 64497),
            roa("2001:db8::/32", 32, 64497),
            roa("2001:db8:1::/48", 48, 64498),
            roa("fc00::/7", 64, 64496),
            roa("2a00::/12", 48, 64496),
            roa("::/0", 0, 0),
        ],
        keys=[
            router_key(64496, SKI_A, spki(1)),
            router_key(64497, SKI_A, spki(1)),
            router_key(64496, SKI_B, spki(2, 65)),
            router_key(64499, SKI_C, spki(3), expires=PAST),
        ],
        aspas=[
            aspa(64500, [64502, 64501]),
            aspa(64500, [64503]),  # merged with the one above: one PDU
            aspa(64510, [0]),
            aspa(64499, [64496]),
            aspa(4_200_000_001, [0, 65000]),  # AS0 dropped when others exist
            aspa(64520, [64496], expires=PAST),
        ],
    )


def updated_export() -> Doc:
    """`base_export` with VRPs added and removed, an ASPA provider set changed, an ASPA
    customer withdrawn and a router key added."""
    doc = base_export()
    drop = {("192.0.2.0/24", 24, 64497), ("10.0.0.0/8", 8, 65000), ("2001:db8::/32", 32, 64497)}
    doc["roas"] = [r for r in doc["roas"] if (r["prefix"], r["maxLength"], r["asn"]) not in drop]
    doc["roas"] += [
        roa("192.0.2.0/25", 25, 64496),
        roa("100.64.0.0/10", 24, 64501),
        roa("2001:db8:2::/48", 64, 64502),
    ]
    doc["bgpsec_keys"].append(router_key(64501, SKI_B, spki(4)))
    aspas = [a for a in doc["aspas"] if a["customer_asid"] != 64510]  # withdrawn
    for a in aspas:
        if a["customer_asid"] == 64499:
            a["providers"] = [64496, 64497]  # changed: one announce
    aspas.append(aspa(64530, [64531]))
    doc["aspas"] = aspas
    return doc


# ------------------------------------------------------------------------------ the router model


@dataclass(slots=True)
class RouterState:
    """What a router holds from the cache; `apply` checks as a strict router would."""

    prefixes: set[PrefixRecord] = field(default_factory=set)
    keys: set[KeyRecord] = field(default_factory=set)
    aspas: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def copy(self) -> RouterState:
        """An independent copy."""
        return RouterState(set(self.prefixes), set(self.keys), dict(self.aspas))

    def apply(self, payload: Iterable[PayloadPdu]) -> RouterState:
        """Apply announcements and withdrawals; duplicate announce (Error 7) and unknown
        withdraw (Error 6) fail the test. Returns self."""
        for pdu in payload:
            if isinstance(pdu, Ipv4Prefix | Ipv6Prefix):
                rec = (
                    int(pdu.TYPE),
                    pdu.prefix,
                    pdu.prefix_length,
                    pdu.max_length,
                    pdu.asn,
                )
                _toggle(self.prefixes, rec, announce=pdu.announce)
            elif isinstance(pdu, RouterKeyPdu):
                _toggle(self.keys, (pdu.ski, pdu.asn, pdu.spki), announce=pdu.announce)
            else:
                if pdu.announce:
                    assert pdu.providers, f"ASPA announce without providers: {pdu}"
                    self.aspas[pdu.customer] = pdu.providers  # announce replaces
                else:
                    assert not pdu.providers
                    assert pdu.customer in self.aspas, f"withdraw of unknown ASPA {pdu}"
                    del self.aspas[pdu.customer]
        return self


def _toggle(held: set[Any], record: object, *, announce: bool) -> None:
    if announce:
        assert record not in held, f"duplicate announcement of {record}"
        held.add(record)
    else:
        assert record in held, f"withdrawal of unknown record {record}"
        held.remove(record)


def expected_state(doc: Doc, version: int, now: float | None = None) -> RouterState:
    """What a router of ``version`` must hold after a full dump of ``doc``, computed from the
    JSON with `ipaddress` (not with the server's parser)."""
    now = time.time() if now is None else now
    state = RouterState()
    for r in doc["roas"]:
        if r["expires"] <= now:
            continue
        net = ipaddress.ip_network(r["prefix"], strict=True)
        pdu_type = 4 if net.version == 4 else 6
        state.prefixes.add(
            (pdu_type, int(net.network_address), net.prefixlen, r["maxLength"], r["asn"])
        )
    if version >= 1:
        for k in doc["bgpsec_keys"]:
            if k["expires"] > now:
                state.keys.add((bytes.fromhex(k["ski"]), k["asn"], base64.b64decode(k["pubkey"])))
    if version >= 2:
        merged: dict[int, set[int]] = {}
        for a in doc["aspas"]:
            if a["expires"] > now:
                merged.setdefault(a["customer_asid"], set()).update(a["providers"])
        for customer, providers in merged.items():
            if len(providers) > 1:
                providers.discard(0)
            state.aspas[customer] = tuple(sorted(providers))
    return state


# ------------------------------------------------------------------------------ §8.1 order


def order_key(pdu: PayloadPdu) -> tuple[Any, ...]:
    """Sort key of the 8210bis §11.2 (digest §8.1) order, written from the spec text.

    PDU type ascending (IPv4 4, IPv6 6, Router Key 9, ASPA 11); announcements first; prefix
    announcements by address, max length, prefix length, ASN all descending, withdrawals all
    ascending; router keys by SKI, SPKI length, SPKI, ASN; ASPA by customer.
    """
    rank = {Ipv4Prefix: 0, Ipv6Prefix: 1, RouterKeyPdu: 2, AspaPdu: 3}[type(pdu)]
    withdraw = 0 if pdu.announce else 1
    if isinstance(pdu, Ipv4Prefix | Ipv6Prefix):
        cols = (pdu.prefix, pdu.max_length, pdu.prefix_length, pdu.asn)
        return (rank, withdraw, tuple(-c for c in cols) if pdu.announce else cols)
    if isinstance(pdu, RouterKeyPdu):
        return (rank, withdraw, (pdu.ski, len(pdu.spki), pdu.spki, pdu.asn))
    return (rank, withdraw, (pdu.customer,))


def assert_in_order(payload: list[PayloadPdu]) -> None:
    """The payload is in the §8.1 order (which is total, so sorting must change nothing)."""
    expected = sorted(payload, key=order_key)
    for i, (got, want) in enumerate(zip(payload, expected, strict=True)):
        assert got == want, f"PDU {i} out of §8.1 order: got {got}, expected {want}"


def payload_types(payload: Iterable[Pdu]) -> list[int]:
    """The PDU type numbers in order of appearance, consecutive duplicates folded."""
    out: list[int] = []
    for pdu in payload:
        if not out or out[-1] != pdu.TYPE:
            out.append(int(pdu.TYPE))
    return out


# ------------------------------------------------------------------------------ running things


def settings(**overrides: Any) -> ServerSettings:
    """Server settings for tests: 127.0.0.1 port 0, notify at once, `TIMERS`."""
    values: dict[str, Any] = {
        "listen": (ListenAddress("127.0.0.1", 0),),
        "notify_interval": 0,
        "timers": TIMERS,
    }
    values.update(overrides)
    return ServerSettings(**values)


def app_config(
    path: Path, *, history: int = 10, reference_time: float | None = None, **server: Any
) -> AppConfig:
    """An `AppConfig` polling ``path`` every 50 ms."""
    return AppConfig(
        sources=(path,),
        server=settings(**server),
        poll_interval=0.05,
        history=history,
        reference_time=reference_time,
    )


async def wait_until(
    predicate: Callable[[], bool], within: float = TIMEOUT, what: str = "condition"
) -> None:
    """Poll ``predicate`` every 10 ms until it holds; fail after ``within`` seconds.

    Polling is deliberate: the predicates read server internals that signal no event.
    """
    try:
        with anyio.fail_after(within):
            while not predicate():  # noqa: ASYNC110 - see the docstring
                await anyio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"timed out after {within} s waiting for {what}") from None


@asynccontextmanager
async def running_app(config: AppConfig, *, wait_for_data: bool = True) -> AsyncIterator[App]:
    """Run an `App` on 127.0.0.1 port 0; by default wait until its first serial is published."""
    async with anyio.create_task_group() as tg:
        app = App(config, make_clock(config.reference_time))
        with anyio.fail_after(TIMEOUT):
            await tg.start(app.run)
        if wait_for_data:
            await wait_until(lambda: app.state is not None, what="the first publish")
        try:
            yield app
        finally:
            tg.cancel_scope.cancel()


@asynccontextmanager
async def running_server(server: RtrServer) -> AsyncIterator[int]:
    """Serve ``server`` on 127.0.0.1 port 0; yields the bound port."""
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(TIMEOUT):
            addresses = await tg.start(server.serve)
        try:
            yield addresses[0][1]
        finally:
            tg.cancel_scope.cancel()


def port_of(app: App) -> int:
    """The TCP port the app's server is bound to."""
    host, port = app.server.addresses[0]
    assert host == "127.0.0.1"
    return port


async def publish_and_wait(app: App, path: Path, doc: Doc | str) -> int:
    """Rewrite the source and wait until the next serial is published; returns it."""
    assert app.state is not None
    before = app.state.serial.value
    write_export(path, doc)
    await wait_until(
        lambda: app.state is not None and app.state.serial.value != before,
        what="a new serial",
    )
    assert app.state is not None
    return app.state.serial.value


# ------------------------------------------------------------------------------ a big table

#: IPv4 VRPs in the big table: 8 MB of IPv4 Prefix PDUs, well above what the loopback socket
#: buffers of a reader that never reads absorb (about 3 MB here).
BIG_COUNT = 400_000
BIG_ASN = 64496


@functools.cache
def big_snapshot(extra: bool = False) -> Snapshot:
    """``BIG_COUNT`` distinct /24s (1.0.0.0/24 upwards); with ``extra`` also 0.0.0.0/24."""
    first = 0 if extra else 1
    keys = b"".join(
        (i << 8).to_bytes(4, "big") + b"\x18\x18" + BIG_ASN.to_bytes(4, "big")
        for i in range(BIG_COUNT, first - 1, -1)  # descending: the Snapshot's canonical order
    )
    return Snapshot(v4=keys)


def big_states() -> tuple[PublishedState, PublishedState]:
    """Two consecutive states: the big table, then the big table plus 0.0.0.0/24."""
    publisher = Publisher(SessionIds(0x1111, 0x2222, 0x3333))
    first = publisher.publish(big_snapshot())
    second = publisher.publish(big_snapshot(extra=True))
    assert first is not None
    assert second is not None
    return first, second


@functools.cache
def big_response(version: int, session_id: int, serial: int) -> bytes:
    """The full reply to a Reset Query for `big_snapshot`, encoded here with `struct` (not by
    the server's encoder)."""
    pdu = struct.Struct(">BBHIBBBBII")
    parts = [struct.pack(">BBHI", version, 3, session_id, 8)]
    parts.extend(
        pdu.pack(version, 4, 0, 20, 1, 24, 24, 0, i << 8, BIG_ASN) for i in range(BIG_COUNT, 0, -1)
    )
    if version == 0:
        parts.append(struct.pack(">BBHII", 0, 7, session_id, 12, serial))
    else:
        timers = (TIMERS.refresh, TIMERS.retry, TIMERS.expire)
        parts.append(struct.pack(">BBHIIIII", version, 7, session_id, 24, serial, *timers))
    return b"".join(parts)


# ------------------------------------------------------------------------------ stuck readers


def open_stuck_reader(port: int, version: int) -> socket.socket:
    """A plain socket (small receive buffer) that sent a Reset Query and will not read."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(TIMEOUT)
        sock.connect(("127.0.0.1", port))
        sock.sendall(reset_query(version))
    except BaseException:
        sock.close()
        raise
    return sock


@contextmanager
def stuck_reader(port: int, version: int) -> Iterator[socket.socket]:
    """`open_stuck_reader`, closed at exit."""
    sock = open_stuck_reader(port, version)
    try:
        yield sock
    finally:
        sock.close()


def connection_of(server: RtrServer, sock: socket.socket) -> RtrConnection | None:
    """The server's connection for our socket ``sock``, if it is still there."""
    peer = "{}:{}".format(*sock.getsockname())
    return next((c for c in server.connections if c.peer == peer), None)


async def stalled_connection(server: RtrServer, sock: socket.socket) -> RtrConnection:
    """Wait until the server is stuck writing the reply to ``sock``."""
    await wait_until(lambda: connection_of(server, sock) is not None, what="the stuck router")
    conn = connection_of(server, sock)
    assert conn is not None
    await wait_until(lambda: conn.stats.bytes_sent > 0, what="the reply to start")
    await anyio.sleep(0.2)
    assert conn.session.state is SessionState.RESPONDING
    return conn


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the socket receives until EOF (blocking; run it in a thread)."""
    chunks: list[bytes] = []
    sock.settimeout(5.0)
    try:
        while data := sock.recv(1 << 20):
            chunks.append(data)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


def assert_clean_prefix(
    received: bytes, expected: bytes, *, pdu_size: int, goodbye_code: int
) -> None:
    """``received`` is ``expected`` cut anywhere, or cut at a PDU boundary of the payload and
    followed by exactly one Error Report of ``goodbye_code``."""
    n = len(received)
    if received == expected[:n]:
        return  # cut anywhere (the connection was dropped): fine
    lo, hi = 0, n  # the first differing octet, by bisection
    while lo < hi:
        mid = (lo + hi) // 2
        if received[: mid + 1] == expected[: mid + 1]:
            lo = mid + 1
        else:
            hi = mid
    cut = lo
    assert cut >= 8, "the reply must start with its Cache Response"
    offset = (cut - 8) % pdu_size
    assert offset == 0, (
        f"PDU written at octet {cut}, {offset} octets into a {pdu_size}-octet PDU of the reply: "
        f"{received[cut - offset : cut + 16].hex(' ')}"
    )
    framer = PduFramer()
    framer.receive_data(received[cut:])
    framer.receive_data(b"")
    pdu = framer.next_pdu()
    assert isinstance(pdu, ErrorReport), pdu
    assert pdu.code == goodbye_code
    assert decode(received[cut:]) == pdu
    assert struct.unpack(">I", received[cut + 4 : cut + 8])[0] == n - cut
