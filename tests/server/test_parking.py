"""Parked sessions (`rtr_server.parking`) over real TCP: idle plain-TCP sessions are held without
a task, and are served as before: the router's query wakes them, a publish sends them a Serial
Notify, a router that leaves ends its session, and shutdown gives each its goodbye."""

from __future__ import annotations

import gc
import socket
import sys

import anyio
import pytest

from rtr_protocol import CloseReason, SerialNotify, SerialQuery, encode
from rtr_server.connection_parked import INLINE_PDUS
from rtr_server.parking import ParkingLot
from rtr_server.server import RtrServer
from snapshot import SessionIds
from snapshot.publisher import PublishedState, Publisher
from snapshot.snapshot import Snapshot
from tests.server.helpers import running_server, settings, wait_until
from tests.server.rtr_client import Response, RtrClient

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not ParkingLot.available, reason="parking needs epoll (Linux)"),
]


def small_states() -> tuple[PublishedState, PublishedState]:
    """Two consecutive states: 100 /24s, then the same and 0.0.0.0/24."""
    keys = [
        (i << 8).to_bytes(4, "big") + b"\x18\x18" + (64496).to_bytes(4, "big") for i in range(101)
    ]
    publisher = Publisher(SessionIds(0x1111, 0x2222, 0x3333))
    first = publisher.publish(Snapshot(v4=b"".join(reversed(keys[1:]))))
    second = publisher.publish(Snapshot(v4=b"".join(reversed(keys))))
    assert first is not None
    assert second is not None
    return first, second


async def test_idle_sessions_are_parked_and_still_served() -> None:
    first, second = small_states()
    server = RtrServer(settings())
    server.publish(first)
    async with running_server(server) as port:
        clients = [await RtrClient.connect(port) for _ in range(3)]
        try:
            replies = [await c.reset(v) for c, v in zip(clients, (0, 1, 2), strict=True)]
            await wait_until(lambda: len(server.parking) == 3, what="three parked sessions")
            # A query wakes a parked session: answered, then parked again.
            ids = first.session_ids
            again = await clients[1].serial(1, ids.v1, first.serial.value)
            assert isinstance(again, Response)
            assert again.payload == []
            await wait_until(lambda: len(server.parking) == 3, what="parked again")
            # A publish wakes them all for a Serial Notify; each then takes its delta.
            server.publish(second)
            for client, reply, version in zip(clients, replies, (0, 1, 2), strict=True):
                notify = await client.receive_pdu()
                assert notify == SerialNotify(
                    version, reply.cache_response.session_id, second.serial.value
                )
                delta = await client.serial(
                    version, reply.cache_response.session_id, reply.end_of_data.serial
                )
                assert isinstance(delta, Response)
                assert delta.end_of_data.serial == second.serial.value
                assert len(delta.payload) == 1
            await wait_until(lambda: len(server.parking) == 3, what="parked after the deltas")
            assert server.stats.notifies == 3
            # The notifies and the deltas were written from the parking lot: no task ran.
            assert server.parking.resumed == 0
        finally:
            for client in clients:
                await client.aclose()
        await wait_until(lambda: not server.connections, what="the sessions to end")
        assert len(server.parking) == 0
        assert server.stats.disconnects[CloseReason.PEER_CLOSED] == 3


async def test_a_full_table_for_a_parked_session_is_written_by_its_task() -> None:
    first, _ = small_states()
    server = RtrServer(settings())
    server.publish(first)
    async with running_server(server) as port, await RtrClient.connect(port) as client:
        await client.reset(1)
        await wait_until(lambda: len(server.parking) == 1, what="parked")
        again = await client.reset(1)
        assert len(again.payload) == 100
        assert server.parking.resumed == 1
        await wait_until(lambda: len(server.parking) == 1, what="parked again")


@pytest.mark.parametrize("queries", [INLINE_PDUS, 3 * INLINE_PDUS])
async def test_queries_sent_at_once_are_answered_in_order(queries: int) -> None:
    """Up to INLINE_PDUS of them from the lot; a router that sends more gets the rest from its
    task (which lets other routers run between its writes)."""
    first, _ = small_states()
    server = RtrServer(settings())
    server.publish(first)
    async with running_server(server) as port, await RtrClient.connect(port) as client:
        reply = await client.reset(1)
        await wait_until(lambda: len(server.parking) == 1, what="parked")
        query = SerialQuery(1, reply.cache_response.session_id, reply.end_of_data.serial)
        await client.send(encode(query) * queries)
        for _ in range(queries):
            answer = await client.read_reply()
            assert isinstance(answer, Response)
            assert answer.end_of_data.serial == first.serial.value
        await wait_until(lambda: len(server.parking) == 1, what="parked again")
        assert (server.parking.resumed > 0) == (queries > INLINE_PDUS)
        assert server.stats.serial_queries == queries


async def test_a_parked_router_that_asks_without_reading_is_dropped() -> None:
    """Its answers go out from the lot while its socket takes them; then its task writes, and
    the write timeout drops it."""
    first, _ = small_states()
    server = RtrServer(settings(write_timeout=0.5))
    server.publish(first)
    async with running_server(server) as port:
        # Small buffers on both sides (the accepted socket inherits the listener's): a few
        # thousand answers fill them.
        server.listening_sockets[0].setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            sock.connect(("127.0.0.1", port))
            sock.setblocking(False)
            query = SerialQuery(1, first.session_ids.v1, first.serial.value)
            sock.send(encode(query))
            got = b""
            with anyio.fail_after(5):
                while len(got) < 32:  # Cache Response, End of Data
                    await anyio.wait_readable(sock)
                    got += sock.recv(64)
            await wait_until(lambda: len(server.parking) == 1, what="parked")
            many = encode(query) * 20_000  # 640 kB of answers it never reads
            sent = 0
            with anyio.fail_after(10):
                while sent < len(many) and server.connections:
                    try:
                        sent += sock.send(many[sent:])
                    except BlockingIOError:
                        await anyio.sleep(0.01)
            await wait_until(lambda: not server.connections, what="the stalled router to go")
        finally:
            sock.close()
    assert server.stats.disconnects[CloseReason.WRITE_STALLED] == 1
    assert server.parking.resumed >= 1
    assert server.stats.serial_queries > 1


async def test_a_session_before_its_first_query_is_not_parked() -> None:
    """It has a query timeout to keep (and may be evicted): it keeps its task."""
    first, _ = small_states()
    server = RtrServer(settings(query_timeout=0.5))
    server.publish(first)
    async with running_server(server) as port, await RtrClient.connect(port) as silent:
        await wait_until(lambda: len(server.connections) == 1, what="the connection")
        assert len(server.parking) == 0
        await silent.expect_closed(3.0)
    assert server.stats.disconnects[CloseReason.QUERY_TIMEOUT] == 1


async def test_parked_sessions_get_their_goodbye_at_shutdown() -> None:
    first, _ = small_states()
    server = RtrServer(settings())
    server.publish(first)
    clients: list[RtrClient] = []
    async with anyio.create_task_group() as tg:
        addresses = await tg.start(server.serve)
        clients = [await RtrClient.connect(addresses[0][1]) for _ in range(2)]
        await clients[0].reset(2)
        await clients[1].reset(1)
        await wait_until(lambda: len(server.parking) == 2, what="two parked sessions")
        tg.cancel_scope.cancel()
    try:
        error = await clients[0].read_error()
        assert (error.version, error.code) == (2, 12)  # Cache Restart
        await clients[0].expect_closed()
        await clients[1].expect_closed()  # v1 has no such code: EOF only
    finally:
        for client in clients:
            await client.aclose()
    assert not server.connections
    assert server.stats.disconnects[CloseReason.SHUTDOWN] == 2
    assert server.stats.errors_sent == {12: 1}


#: Opens N sessions from another process: each sends a v1 Serial Query at the current serial
#: and reads its empty answer (32 octets), then all stay open until a line comes on stdin.
ROUTERS = r"""
import socket, sys
port, n, session, serial = map(int, sys.argv[1:5])
query = bytes([1, 1]) + session.to_bytes(2, "big") + (12).to_bytes(4, "big")
query += serial.to_bytes(4, "big")
held = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(query)
    got = b""
    while len(got) < 32:
        got += s.recv(64)
    held.append(s)
print("ready", flush=True)
sys.stdin.readline()
"""


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="sizes of CPython objects")
async def test_a_parked_session_holds_little_memory() -> None:
    """What a thousand more parked sessions add to the heap, per session (issue 16: 4 KB)."""
    import tracemalloc

    first, _ = small_states()
    server = RtrServer(settings(max_connections=3000, max_per_ip=3000))
    server.publish(first)
    async with running_server(server) as port:

        async def routers(n: int) -> anyio.abc.Process:
            process = await anyio.open_process(
                [sys.executable, "-c", ROUTERS, str(port), str(n), str(first.session_ids.v1),
                 str(first.serial.value)]
            )  # fmt: skip
            assert process.stdout is not None
            with anyio.fail_after(60):
                assert b"ready" in await process.stdout.receive()
            return process

        processes = [await routers(200)]  # warm-up: the server's own tables grow first
        try:
            await wait_until(lambda: len(server.parking) == 200, what="200 parked")
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            processes.append(await routers(1000))
            await wait_until(lambda: len(server.parking) == 1200, what="1200 parked")
            gc.collect()
            per_session = (tracemalloc.get_traced_memory()[0] - before) / 1000
            tracemalloc.stop()
            assert per_session < 3000, f"{per_session:.0f} B per parked session"
        finally:
            for process in processes:
                assert process.stdin is not None
                await process.stdin.send(b"\n")
                with anyio.fail_after(10):
                    await process.wait()
