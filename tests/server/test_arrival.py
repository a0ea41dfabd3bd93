"""Routers that arrive before the data: held queries, the hold timeout, the v0 redial (real TCP)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from rtr_protocol import CloseReason, ErrorCode, SerialNotify
from tests.http.helpers import http_app_config, running_http_app
from tests.server.helpers import (
    RouterState,
    app_config,
    base_export,
    expected_state,
    port_of,
    running_app,
    wait_until,
    write_export,
)
from tests.server.rtr_client import ConnectionClosedError, RtrClient, reset_query, serial_query

pytestmark = pytest.mark.anyio


async def test_queries_before_data_are_held_and_answered_at_the_first_publish(
    tmp_path: Path,
) -> None:
    path = tmp_path / "not-yet.json"
    async with running_http_app(http_app_config(path), wait_for_data=False) as run:
        app = run.app
        server = app.server
        port = run.rtr_port
        async with (
            await RtrClient.connect(port) as v0,
            await RtrClient.connect(port) as v1,
            await RtrClient.connect(port) as v2,
            await RtrClient.connect(port) as v1b,
            await RtrClient.connect(port) as foreign,
        ):
            for client, version in ((v0, 0), (v1, 1), (v2, 2), (v1b, 1)):
                await client.send(reset_query(version))
            await foreign.send(serial_query(1, 0x4321, 77))  # a session from before a restart
            await wait_until(lambda: server.held_now == 5, what="five held queries")
            await v1.expect_silence(0.2)  # held: no No Data Available
            m = await run.metrics()
            assert (m.get("rtr_held_queries"), m.get("rtr_held_queries_total")) == (5, 5)
            assert m.get("rtr_limit", name="arrival_hold_seconds") == 50
            status = (await run.get("/status")).json()["sessions"]
            held = (status["held_now"], status["held_queries"], status["hold_timeouts"])
            assert held == (5, 5, 0)
            assert {r["state"] for r in status["routers"]} == {"held"}

            doc = base_export()
            write_export(path, doc)
            for client, version in ((v0, 0), (v1, 1), (v2, 2), (v1b, 1)):
                response = await client.read_response()
                assert RouterState().apply(response.payload) == expected_state(doc, version)
                assert client.notifies == []
            await foreign.read_cache_reset()
            assert server.stats.errors_sent.get(ErrorCode.NO_DATA_AVAILABLE, 0) == 0
            # One encoding per version, shared by both v1 sessions.
            assert server.responses.encodes == 3
            m = await run.metrics()
            assert (m.get("rtr_held_queries"), m.get("rtr_hold_timeouts_total")) == (0, 0)
            assert m.get("rtr_queries_total", type="reset") == 4


async def test_hold_timeout_gives_no_data_then_v0_is_closed_and_v1_notified(
    tmp_path: Path,
) -> None:
    path = tmp_path / "not-yet.json"
    async with running_app(app_config(path, arrival_hold=0.3), wait_for_data=False) as app:
        server = app.server
        port = port_of(app)
        async with await RtrClient.connect(port) as v0, await RtrClient.connect(port) as v1:
            started = anyio.current_time()
            await v0.send(reset_query(0))
            await v1.send(reset_query(1))
            for client, version in ((v0, 0), (v1, 1)):
                error = await client.read_error()
                assert (error.version, error.code) == (version, ErrorCode.NO_DATA_AVAILABLE)
            assert anyio.current_time() - started >= 0.3
            assert server.stats.hold_timeouts == 2
            await v1.expect_silence(0.1)

            write_export(path, base_export())
            # v0 (which may ignore a Notify for serial 0 while it holds serial 0) is closed ...
            with pytest.raises(ConnectionClosedError):
                await v0.receive_pdu()
            await wait_until(
                lambda: server.stats.disconnects[CloseReason.REDIAL] == 1, what="the redial"
            )
            # ... v1 gets the Serial Notify and asks.
            notify = await v1.receive_pdu()
            assert isinstance(notify, SerialNotify)
            await v1.reset(1)
        async with await RtrClient.connect(port) as again:
            await again.reset(0)  # the redialled v0 router gets the table


async def test_router_that_leaves_while_held_is_closed(tmp_path: Path) -> None:
    path = tmp_path / "not-yet.json"
    async with running_app(app_config(path), wait_for_data=False) as app:
        server = app.server
        async with await RtrClient.connect(port_of(app)) as client:
            await client.send(reset_query(2))
            await wait_until(lambda: server.held_now == 1, what="the held query")
        await wait_until(lambda: not server.connections, what="the close")
        assert server.stats.disconnects[CloseReason.PEER_CLOSED] == 1
        assert server.held_now == 0


async def test_arrival_hold_zero_answers_no_data_at_once(tmp_path: Path) -> None:
    path = tmp_path / "not-yet.json"
    async with running_app(app_config(path, arrival_hold=0), wait_for_data=False) as app:
        async with await RtrClient.connect(port_of(app)) as client:
            await client.send(reset_query(1))
            error = await client.read_error(within=1.0)
            assert error.code == ErrorCode.NO_DATA_AVAILABLE
        assert app.server.stats.held_queries == 0
