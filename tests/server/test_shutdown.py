"""Shutdown over real TCP: cancelling the app tells v2 sessions Cache Restart (or Cache Shutdown)
and closes every connection."""

from __future__ import annotations

import socket
from pathlib import Path

import anyio
import pytest

from rtr_protocol import CloseReason
from rtr_server.app import App
from rtr_server.app_config import make_clock
from rtr_server.server import RtrServer
from rtr_server.settings import ShutdownNotice
from tests.server.helpers import (
    app_config,
    assert_clean_prefix,
    base_export,
    big_response,
    big_states,
    open_stuck_reader,
    port_of,
    read_until_closed,
    settings,
    stalled_connection,
    wait_until,
    write_export,
)
from tests.server.rtr_client import TIMEOUT, RtrClient

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("notice", "code"), [(ShutdownNotice.RESTART, 12), (ShutdownNotice.SHUTDOWN, 13)]
)
async def test_shutdown_notice(tmp_path: Path, notice: ShutdownNotice, code: int) -> None:
    path = tmp_path / "export.json"
    write_export(path, base_export())
    config = app_config(path, shutdown_notice=notice)
    clients: list[RtrClient] = []
    try:
        async with anyio.create_task_group() as tg:
            app = App(config, make_clock(None))
            with anyio.fail_after(TIMEOUT):
                await tg.start(app.run)
            await wait_until(lambda: app.state is not None, what="the first publish")
            port = port_of(app)
            clients = [await RtrClient.connect(port) for _ in range(4)]
            v2, v1, v0, fresh = clients
            await v2.reset(2)
            await v1.reset(1)
            await v0.reset(0)
            await wait_until(lambda: len(app.server.connections) == 4, what="four connections")
            tg.cancel_scope.cancel()
        # The app is down: every connection got its goodbye and EOF.
        error = await v2.read_error()
        assert (error.version, error.code) == (2, code)
        assert error.pdu == b""
        await v2.expect_closed()
        # Codes 12 and 13 do not exist in v0/v1, and a fresh session has no version: EOF only.
        for client in (v1, v0, fresh):
            await client.expect_closed()
        assert not app.server.connections
        # The one goodbye that was sent (to the v2 router) is counted like any Error Report.
        assert app.server.stats.errors_sent == {code: 1}
        with pytest.raises(OSError):  # the listener is closed too
            await (await anyio.connect_tcp("127.0.0.1", port)).aclose()
    finally:
        for client in clients:
            await client.aclose()


async def test_shutdown_mid_response_never_misframes() -> None:
    """Shut down while a v2 reply is stuck half-written: what the router finds when it reads
    must be a clean prefix of the reply, optionally followed by a well-framed Error 12 at a
    PDU boundary, never an Error Report inside a PDU."""
    state, _ = big_states()
    server = RtrServer(settings(write_timeout=60))
    server.publish(state)
    expected = big_response(2, state.session_ids.v2, state.serial.value)
    sock: socket.socket | None = None
    try:
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                addresses = await tg.start(server.serve)
                sock = open_stuck_reader(addresses[0][1], 2)
                await stalled_connection(server, sock)
                tg.cancel_scope.cancel()
                # The router reads again while the server is shutting down.
                with anyio.CancelScope(shield=True):
                    received = await anyio.to_thread.run_sync(read_until_closed, sock)
        assert server.stats.disconnects[CloseReason.SHUTDOWN] == 1
    finally:
        if sock is not None:
            sock.close()
    assert_clean_prefix(received, expected, pdu_size=20, goodbye_code=12)
