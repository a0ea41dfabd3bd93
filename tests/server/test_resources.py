"""Resource protection over real TCP: connection limits, a stuck reader that must not delay
anyone else, and the write timeout that drops it."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from rtr_protocol import CloseReason, SessionState
from rtr_server.server import RtrServer
from tests.server.helpers import (
    app_config,
    assert_clean_prefix,
    big_response,
    big_states,
    connection_of,
    port_of,
    read_until_closed,
    running_app,
    running_server,
    settings,
    stalled_connection,
    stuck_reader,
    wait_until,
)
from tests.server.rtr_client import RtrClient, reset_query

pytestmark = pytest.mark.anyio


async def test_max_connections(export_path: Path) -> None:
    async with running_app(app_config(export_path, max_connections=2)) as app:
        port, server = port_of(app), app.server
        async with await RtrClient.connect(port) as first, await RtrClient.connect(port) as second:
            await first.reset(1)
            await second.reset(2)
            async with await RtrClient.connect(port) as third:
                await third.expect_closed(2.0)  # closed at accept, nothing sent
            assert server.stats.rejected_max_connections == 1
            assert server.stats.rejected_max_per_ip == 0
            assert len(server.connections) == 2
            # The admitted ones are unaffected.
            await first.reset(1)
            # A freed slot is usable again.
            await first.aclose()
            await wait_until(lambda: len(server.connections) == 1, what="the slot to free")
            async with await RtrClient.connect(port) as fourth:
                await fourth.reset(0)
            assert server.stats.rejected_max_connections == 1
            assert server.stats.accepted == 3


async def test_max_per_ip(export_path: Path) -> None:
    async with running_app(app_config(export_path, max_per_ip=1)) as app:
        port, server = port_of(app), app.server
        async with await RtrClient.connect(port) as first:
            await first.reset(1)
            async with await RtrClient.connect(port) as second:
                await second.expect_closed(2.0)
            assert server.stats.rejected_max_per_ip == 1
            assert server.stats.rejected_max_connections == 0
            await first.reset(1)
        await wait_until(lambda: not server.connections, what="the connection to go")
        async with await RtrClient.connect(port) as again:
            await again.reset(1)
        assert server.stats.rejected_max_per_ip == 1


async def test_stuck_reader_does_not_delay_another_router() -> None:
    state, _ = big_states()
    server = RtrServer(settings(write_timeout=60))
    server.publish(state)
    async with running_server(server) as port:
        with stuck_reader(port, 2) as sock_a:
            conn_a = await stalled_connection(server, sock_a)
            expected = big_response(2, state.session_ids.v2, state.serial.value)
            assert conn_a.stats.bytes_sent < len(expected) // 2, "A's reply must be stuck"

            async with await RtrClient.connect(port) as b:
                started = anyio.current_time()
                await b.send(reset_query(2))
                assert await b.receive_raw(len(expected), within=5.0) == expected
                elapsed = anyio.current_time() - started
            assert elapsed < 5.0
            # A is still there, still stuck in the same reply.
            assert connection_of(server, sock_a) is conn_a
            assert conn_a.session.state is SessionState.RESPONDING
            assert conn_a.stats.bytes_sent < len(expected) // 2


async def test_stalled_reader_is_dropped_after_write_timeout() -> None:
    state, _ = big_states()
    server = RtrServer(settings(write_timeout=0.5))
    server.publish(state)
    async with running_server(server) as port:
        with stuck_reader(port, 2) as sock_a:
            started = anyio.current_time()
            await stalled_connection(server, sock_a)
            await wait_until(
                lambda: connection_of(server, sock_a) is None, what="the stalled router to go"
            )
            assert anyio.current_time() - started >= 0.5
            assert server.stats.disconnects[CloseReason.WRITE_STALLED] == 1
            assert not server.connections
            # Others are served normally afterwards.
            async with await RtrClient.connect(port) as b:
                await b.send(reset_query(1))
                expected = big_response(1, state.session_ids.v1, state.serial.value)
                assert await b.receive_raw(len(expected)) == expected


async def test_stalled_reader_never_gets_a_misframed_pdu() -> None:
    """A router that stalls past the write timeout and then reads again (here: as soon as the
    server has declared the stall) must find a clean prefix of its reply, optionally followed
    by a well-framed Error 10 at a PDU boundary.

    An Error Report written after a send that timed out in the middle of a PDU lands inside
    that PDU: the router reads its first octets as the tail of an IPv4 Prefix (a bogus ASN)
    and then loses framing.
    """
    state, _ = big_states()
    server = RtrServer(settings(write_timeout=0.5))
    server.publish(state)
    expected = big_response(2, state.session_ids.v2, state.serial.value)
    async with running_server(server) as port:
        with stuck_reader(port, 2) as sock_a:
            conn = await stalled_connection(server, sock_a)
            await wait_until(lambda: conn.close_reason is not CloseReason.UNKNOWN, what="the stall")
            assert conn.close_reason is CloseReason.WRITE_STALLED
            assert conn.close_detail == "write stalled"
            received = await anyio.to_thread.run_sync(read_until_closed, sock_a)
    assert_clean_prefix(received, expected, pdu_size=20, goodbye_code=10)
