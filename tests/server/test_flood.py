"""Issue 19 over real loopback TCP: a flood of silent connections never locks a router out.

Flood connections come from their own loopback addresses (127.0.0.0/8 is all loopback on
Linux), connect and never send a byte. At the caps, the oldest silent connection makes way for
a newcomer (`rtr_server.admission`); router sessions are never evicted; a router behind the
flood's own address gets in through the per-address rule; a TLS listener follows the same rule.
"""

from __future__ import annotations

import resource
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from anyio.abc import SocketStream

from tests.server.helpers import (
    RouterState,
    app_config,
    base_export,
    expected_state,
    port_of,
    running_app,
    wait_until,
)
from tests.server.rtr_client import RtrClient
from tests.server.tls_helpers import client_context, connect_tls, make_certs, tls_listen

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _descriptors() -> None:
    """The flood and the server share this process: two descriptors per flood connection."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096 <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (4096, hard))


@asynccontextmanager
async def flood(
    port: int, per_address: int, addresses: list[str]
) -> AsyncIterator[list[SocketStream]]:
    """Silent connections (``per_address`` from each address), open until the block ends."""
    streams: list[SocketStream] = []

    async def one(address: str) -> None:
        with anyio.fail_after(10):
            streams.append(await anyio.connect_tcp("127.0.0.1", port, local_host=address))

    try:
        async with anyio.create_task_group() as tg:
            for address in addresses:
                for _ in range(per_address):
                    tg.start_soon(one, address)
        yield streams
    finally:
        for stream in streams:
            await stream.aclose()


async def router(port: int, address: str) -> RtrClient:
    with anyio.fail_after(10):
        return RtrClient(await anyio.connect_tcp("127.0.0.1", port, local_host=address))


async def test_a_router_gets_its_table_through_a_flood_and_no_session_is_evicted(
    export_path: Path,
) -> None:
    config = app_config(export_path, max_connections=300, max_per_ip=100)
    async with running_app(config) as app:
        port, admission = port_of(app), app.server.admission
        sessions = [await router(port, "127.0.0.50") for _ in range(5)]
        for session in sessions:
            await session.reset(2)
        addresses = [f"127.0.1.{n}" for n in range(1, 5)]  # 400 silent connections for 295 places
        async with flood(port, 100, addresses):
            # 5 sessions and 400 silent ones for 300 places: the 105 oldest silent ones go.
            await wait_until(
                lambda: admission.stats.evicted["max_connections"] == 105, what="the flood"
            )
            assert (admission.admitted, admission.silent) == (300, 295)
            started = time.monotonic()
            async with await router(port, "127.0.0.60") as newcomer:
                with anyio.fail_after(2.0):
                    response = await newcomer.reset(2)
            took = time.monotonic() - started
            assert RouterState().apply(response.payload) == expected_state(base_export(), 2)
            assert took < 2.0
            for session in sessions:  # negotiated: still served
                response = await session.reset(2)
                assert response.payload
            assert admission.stats.refused["max_connections"] == 0
        for session in sessions:
            await session.aclose()


async def test_a_router_behind_the_floods_own_address_gets_in(export_path: Path) -> None:
    async with running_app(app_config(export_path, max_per_ip=20)) as app:
        port, admission = port_of(app), app.server.admission
        async with flood(port, 20, ["127.0.2.7"]) as streams:
            await wait_until(lambda: admission.count_for("127.0.2.7") == 20, what="the address")
            async with await router(port, "127.0.2.7") as newcomer:
                response = await newcomer.reset(2)
                assert RouterState().apply(response.payload) == expected_state(base_export(), 2)
                assert admission.stats.evicted == {"max_per_ip": 1}
                # The evicted one is the oldest silent connection: its stream ends.
                ended = 0
                for stream in streams:
                    with anyio.move_on_after(0.05):
                        try:
                            await stream.receive()
                        except (anyio.EndOfStream, anyio.BrokenResourceError):
                            ended += 1
                assert ended == 1
                # With only sessions at that address, the next one is refused.
                async with await router(port, "127.0.2.8") as other:
                    await other.reset(2)
        sessions = [await router(port, "127.0.2.9") for _ in range(20)]
        for session in sessions:
            await session.reset(0)
        async with await router(port, "127.0.2.9") as refused:
            await refused.expect_closed(2.0)
        assert admission.stats.refused == {"max_per_ip": 1}
        assert app.server.stats.rejected_max_per_ip == 1
        for session in sessions:
            await session.aclose()


async def test_a_tls_listener_follows_the_same_admission(export_path: Path, tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "tls")
    config = app_config(
        export_path, listen=(tls_listen(),), tls=certs.server_files(), max_connections=40
    )
    async with running_app(config) as app:
        port, admission = port_of(app), app.server.admission
        async with flood(port, 60, ["127.0.3.1"]):  # silent: not even a TLS ClientHello
            await wait_until(
                lambda: admission.stats.evicted["max_connections"] == 20, what="the flood"
            )
            context: ssl.SSLContext = client_context(certs, "127.0.0.1")
            async with await connect_tls(port, context) as newcomer:
                with anyio.fail_after(2.0):
                    response = await newcomer.reset(2)
            assert RouterState().apply(response.payload) == expected_state(base_export(), 2)
        assert admission.stats.evicted["max_connections"] == 21  # one more for the router
