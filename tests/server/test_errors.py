"""Error handling over real TCP: No Data Available, version negotiation errors, fatal errors
that close the session, the query timeout."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from rtr_protocol import (
    CacheResponse,
    CloseReason,
    EndOfData,
    ErrorReport,
    SerialNotify,
    Timers,
    encode,
)
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
from tests.server.rtr_client import RtrClient, raw_header, reset_query, serial_query

pytestmark = pytest.mark.anyio


async def test_no_data_available_then_data(tmp_path: Path) -> None:
    path = tmp_path / "not-yet.json"
    async with (
        running_app(app_config(path, arrival_hold=0), wait_for_data=False) as app,
        await RtrClient.connect(port_of(app)) as client,
    ):
        await client.send(reset_query(1))
        error = await client.read_error()
        assert (error.version, error.code) == (1, 2)
        # Non-fatal: the connection stays open and answers again.
        await client.expect_silence(0.1)
        await client.send(serial_query(1, 1234, 5))
        error = await client.read_error()
        assert (error.version, error.code) == (1, 2)
        await client.expect_silence(0.1)
        assert app.server.state is None  # nothing published yet

        doc = base_export()
        write_export(path, doc)
        await wait_until(lambda: app.state is not None, what="the first publish")
        response = await client.reset(1)
        assert RouterState().apply(response.payload) == expected_state(doc, 1)
        assert app.state is not None
        assert response.end_of_data.serial == app.state.serial.value


@pytest.mark.parametrize("max_version", [2, 1])
async def test_too_high_version_gets_error_4_and_may_retry(
    export_path: Path, max_version: int
) -> None:
    async with (
        running_app(app_config(export_path, max_version=max_version)) as app,
        await RtrClient.connect(port_of(app)) as client,
    ):
        too_high = raw_header(max_version + 1, 2, 0, 8)
        await client.send(too_high)
        error = await client.read_error()
        # Code 4 carrying our highest version; the offending PDU echoed.
        assert error.version == max_version
        assert error.code == 4
        assert error.pdu == too_high
        # Not fatal: the router retries on the same connection at a lower version.
        await client.expect_silence(0.05)
        response = await client.reset(1)
        assert response.cache_response.version == 1
        assert RouterState().apply(response.payload) == expected_state(base_export(), 1)


async def test_version_below_minimum_gets_error_4_and_close(export_path: Path) -> None:
    async with (
        running_app(app_config(export_path, min_version=1)) as app,
        await RtrClient.connect(port_of(app)) as client,
    ):
        await client.send(reset_query(0))
        error = await client.read_error()
        assert (error.version, error.code) == (2, 4)
        assert error.pdu == reset_query(0)
        await client.expect_closed()


FATAL_CASES = {
    # name: (bytes sent on a fresh connection, expected Error Report version and code)
    "cache-response": (encode(CacheResponse(1, 7)), 1, 3),
    "end-of-data": (encode(EndOfData(2, 7, 1, Timers())), 2, 3),
    "serial-notify": (encode(SerialNotify(0, 7, 1)), 0, 3),
    "type-5": (raw_header(1, 5, 0, 8), 1, 5),
    "type-99": (raw_header(2, 99, 0, 8), 2, 5),
    "length-4": (raw_header(1, 2, 0, 4), 1, 0),
    "reset-query-length-12": (raw_header(1, 2, 0, 12) + bytes(4), 1, 0),
}


@pytest.mark.parametrize("case", list(FATAL_CASES))
async def test_fatal_errors_close_the_session(export_path: Path, case: str) -> None:
    sent, version, code = FATAL_CASES[case]
    async with (
        running_app(app_config(export_path)) as app,
        await RtrClient.connect(port_of(app)) as client,
    ):
        await client.send(sent)
        error = await client.read_error()
        assert (error.version, error.code) == (version, code)
        assert error.pdu == sent
        await client.expect_closed()


async def test_unexpected_version_after_negotiation(export_path: Path) -> None:
    async with running_app(app_config(export_path)) as app:
        port = port_of(app)
        # v1 session, then a v2 query: Error 8 (in v1) and close.
        async with await RtrClient.connect(port) as client:
            await client.reset(1)
            await client.send(reset_query(2))
            error = await client.read_error()
            assert (error.version, error.code) == (1, 8)
            assert error.pdu == reset_query(2)
            await client.expect_closed()
        # v2 session, then a v0 Serial Query: Error 8 (in v2) and close.
        async with await RtrClient.connect(port) as client:
            first = await client.reset(2)
            query = serial_query(0, first.cache_response.session_id, first.end_of_data.serial)
            await client.send(query)
            error = await client.read_error()
            assert (error.version, error.code) == (2, 8)
            assert error.pdu == query
            await client.expect_closed()
        # v0 session, then a v1 query: code 8 does not exist in v0, so just close.
        async with await RtrClient.connect(port) as client:
            await client.reset(0)
            await client.send(reset_query(1))
            await client.expect_closed()


async def test_session_id_mismatch_is_error_0(export_path: Path) -> None:
    async with (
        running_app(app_config(export_path)) as app,
        await RtrClient.connect(port_of(app)) as client,
    ):
        first = await client.reset(1)
        session = first.cache_response.session_id
        query = serial_query(1, session ^ 0x8001, first.end_of_data.serial)
        await client.send(query)
        error = await client.read_error()
        assert (error.version, error.code) == (1, 0)
        assert error.pdu == query
        await client.expect_closed()


@pytest.mark.parametrize("negotiated", [False, True], ids=["fresh", "negotiated"])
async def test_error_report_from_router_closes_silently(
    export_path: Path, negotiated: bool
) -> None:
    async with (
        running_app(app_config(export_path)) as app,
        await RtrClient.connect(port_of(app)) as client,
    ):
        if negotiated:
            await client.reset(2)
        await client.send(encode(ErrorReport(2, 1, b"", "router trouble")))
        await client.expect_closed()
        await wait_until(lambda: not app.server.connections, what="the connection to go")


async def test_query_timeout(export_path: Path) -> None:
    async with running_app(app_config(export_path, query_timeout=0.3)) as app:
        port = port_of(app)
        async with (
            await RtrClient.connect(port) as idle,
            await RtrClient.connect(port) as active,
        ):
            started = anyio.current_time()
            await active.reset(1)
            # The silent connection is closed after the query timeout, without a PDU ...
            await idle.expect_closed(3.0)
            elapsed = anyio.current_time() - started
            assert 0.2 <= elapsed < 2.5
            await wait_until(
                lambda: app.server.stats.disconnects[CloseReason.QUERY_TIMEOUT] == 1,
                what="the disconnect to be counted",
            )
            # ... while a negotiated idle session is not subject to it.
            await active.expect_silence(max(0.0, 0.7 - (anyio.current_time() - started)))
            assert len(app.server.connections) == 1
