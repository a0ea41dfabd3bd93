"""Access control: allowed router networks per listener, on real loopback sockets (routers
bind to 127.0.0.1 or 127.0.0.2), closed at accept and counted; rate-limited refusal logs."""

from __future__ import annotations

import ipaddress
import logging
import re
from pathlib import Path

import anyio
import pytest

from rtr_server.access import LogRateLimit, is_allowed, parse_network, parse_networks
from rtr_server.server import RtrServer
from rtr_server.settings import ListenAddress
from tests.server.helpers import (
    RouterState,
    app_config,
    base_export,
    expected_state,
    running_app,
    wait_until,
)
from tests.server.rtr_client import TIMEOUT, RtrClient, reset_query
from tests.server.tls_helpers import (
    LabCerts,
    assert_refused,
    client_context,
    connect_tls,
    make_certs,
)

pytestmark = pytest.mark.anyio


def nets(*texts: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return parse_networks(texts)


# ------------------------------------------------------------------------------ pure parts


def test_is_allowed() -> None:
    allow = nets("192.0.2.0/24", "2001:db8::/32")
    assert is_allowed("192.0.2.7", allow)
    assert not is_allowed("192.0.3.7", allow)
    assert is_allowed("2001:db8::1", allow)
    assert not is_allowed("2001:db9::1", allow)
    # An IPv4 router on a dual-stack [::] listener.
    assert is_allowed("::ffff:192.0.2.7", allow)
    assert not is_allowed("::ffff:198.51.100.1", allow)
    assert is_allowed("fe80::1%eth0", nets("fe80::/10"))
    # Not an address: refused when restricted, admitted when not.
    assert not is_allowed("?", allow)
    assert is_allowed("?", None)
    assert is_allowed("203.0.113.1", None)


def test_parse_network_refuses_host_bits_and_garbage() -> None:
    assert parse_network("192.0.2.1") == ipaddress.ip_network("192.0.2.1/32")
    with pytest.raises(ValueError, match=re.escape("'192.0.2.1/24' is not a network")):
        parse_network("192.0.2.1/24")
    with pytest.raises(ValueError, match="'nonsense' is not a network"):
        parse_network("nonsense")


def test_log_rate_limit() -> None:
    limit = LogRateLimit(interval=10.0, burst=2)
    assert limit.allow("a", 0.0) == (True, 0)
    assert limit.allow("a", 1.0) == (True, 0)
    assert limit.allow("a", 2.0) == (False, 1)
    assert limit.allow("a", 3.0) == (False, 2)
    assert limit.allow("b", 3.0) == (True, 0)  # keys are independent
    # A new window: logged again, saying how many were left out.
    assert limit.allow("a", 10.0) == (True, 2)
    assert limit.allow("a", 11.0) == (True, 0)
    assert limit.allow("a", 12.0) == (False, 1)


# ------------------------------------------------------------------------------ on the wire


def listener_name(server: RtrServer, index: int = 0) -> str:
    _, host, port = server.bound[index]
    return f"{host}:{port}"


async def connect_from(port: int, from_ip: str) -> RtrClient:
    with anyio.fail_after(TIMEOUT):
        return RtrClient(await anyio.connect_tcp("127.0.0.1", port, local_host=from_ip))


async def test_denied_address_is_closed_at_accept_and_counted(export_path: Path) -> None:
    listen = (ListenAddress("127.0.0.1", 0, allow=nets("127.0.0.2/32")),)
    async with running_app(app_config(export_path, listen=listen)) as app:
        server = app.server
        port = server.bound[0][2]
        async with await connect_from(port, "127.0.0.1") as denied:
            await denied.send(reset_query(2))
            await denied.expect_closed()  # nothing at all is sent back
        assert server.stats.rejected_not_allowed == 1
        assert server.stats.rejected_not_allowed_by_listener == {listener_name(server): 1}
        assert server.stats.accepted == 0
        assert server.stats.reset_queries == 0
        async with await connect_from(port, "127.0.0.2") as allowed:
            response = await allowed.reset(2)
            assert RouterState().apply(response.payload) == expected_state(base_export(), 2)
        assert server.stats.accepted == 1
        assert server.stats.rejected_not_allowed == 1


async def test_allow_is_per_listener(export_path: Path) -> None:
    listen = (
        ListenAddress("127.0.0.1", 0, allow=nets("10.0.0.0/8", "2001:db8::/32")),
        ListenAddress("127.0.0.1", 0),
    )
    async with running_app(app_config(export_path, listen=listen)) as app:
        server = app.server
        restricted, open_port = server.bound[0][2], server.bound[1][2]
        async with await connect_from(restricted, "127.0.0.1") as denied:
            await denied.expect_closed()
        async with await connect_from(open_port, "127.0.0.1") as router:
            await router.reset(1)
        assert server.stats.rejected_not_allowed_by_listener == {listener_name(server, 0): 1}
        assert server.stats.accepted == 1


async def test_a_flood_of_refusals_logs_a_few_lines(
    export_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="rtr_server.server")
    listen = (ListenAddress("127.0.0.1", 0, allow=nets("127.0.0.2/32")),)
    async with running_app(app_config(export_path, listen=listen)) as app:
        server = app.server
        port = server.bound[0][2]
        for _ in range(30):
            async with await connect_from(port, "127.0.0.1") as denied:
                await denied.expect_closed()
        assert server.stats.rejected_not_allowed == 30
    lines = [r.getMessage() for r in caplog.records if "refused router" in r.getMessage()]
    assert 1 <= len(lines) <= LogRateLimit().burst, lines
    assert "address not in the allowed networks" in lines[0]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> LabCerts:
    return make_certs(tmp_path_factory.mktemp("tls"))


async def test_tls_listener_refuses_by_address_before_the_handshake(
    export_path: Path, certs: LabCerts
) -> None:
    listen = (ListenAddress("127.0.0.1", 0, tls=True, allow=nets("127.0.0.2/32")),)
    config = app_config(export_path, listen=listen, tls=certs.server_files())
    async with running_app(config) as app:
        server = app.server
        port = server.bound[0][2]
        await assert_refused(port, client_context(certs, "127.0.0.1"), from_ip="127.0.0.1")
        await wait_until(lambda: server.stats.rejected_not_allowed == 1, what="the count")
        assert server.stats.tls_handshake_failures == 0  # no handshake was attempted
        assert server.stats.rejected_tls_ip_mismatch == 0
        context = client_context(certs, "127.0.0.2")
        async with await connect_tls(port, context, from_ip="127.0.0.2") as router:
            await router.reset(2)
        assert server.stats.accepted == 1
