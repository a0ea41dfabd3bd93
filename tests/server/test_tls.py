"""RTR over TLS on real loopback sockets with certificates from `rtr-serve gen-cert`'s code:
the 8210bis §9.2 address check, missing and untrusted router certificates, the handshake
timeout, and the same sessions (full table, Serial Notify, delta) as over plain TCP."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path
from typing import cast

import anyio
import pytest
from anyio.streams.tls import TLSStream

from rtr_protocol import CloseReason, SerialNotify
from rtr_server.server import RtrServer
from rtr_server.settings import ListenAddress
from tests.server.helpers import (
    RouterState,
    app_config,
    base_export,
    expected_state,
    publish_and_wait,
    running_app,
    updated_export,
    wait_until,
)
from tests.server.rtr_client import Response, RtrClient
from tests.server.tls_helpers import (
    LabCerts,
    assert_refused,
    client_context,
    connect_tls,
    make_certs,
    tls_listen,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> LabCerts:
    return make_certs(tmp_path_factory.mktemp("tls"))


def tls_port(server: RtrServer) -> int:
    ports = [port for spec, _, port in server.bound if spec.tls]
    assert len(ports) == 1
    return ports[0]


def no_refusals(server: RtrServer) -> bool:
    s = server.stats
    return not (s.tls_handshake_failures or s.tls_handshake_timeouts or s.rejected_tls_ip_mismatch)


async def test_router_whose_certificate_names_its_address_gets_the_full_table(
    export_path: Path, certs: LabCerts
) -> None:
    config = app_config(export_path, listen=(tls_listen(),), tls=certs.server_files())
    async with running_app(config) as app:
        port = tls_port(app.server)
        for version in (0, 1, 2):
            async with await connect_tls(port, client_context(certs, "127.0.0.1")) as router:
                response = await router.reset(version)
                assert RouterState().apply(response.payload) == expected_state(
                    base_export(), version
                )
        # The same from 127.0.0.2 with the certificate naming 127.0.0.2.
        context = client_context(certs, "127.0.0.2")
        async with await connect_tls(port, context, from_ip="127.0.0.2") as router:
            response = await router.reset(2)
            assert RouterState().apply(response.payload) == expected_state(base_export(), 2)
        assert app.server.stats.accepted == 4
        assert no_refusals(app.server)


async def test_router_whose_certificate_names_another_address_is_refused(
    export_path: Path, certs: LabCerts, caplog: pytest.LogCaptureFixture
) -> None:
    config = app_config(export_path, listen=(tls_listen(),), tls=certs.server_files(), max_per_ip=1)
    caplog.set_level(logging.WARNING, logger="rtr_server.server")
    async with running_app(config) as app:
        server, port = app.server, tls_port(app.server)
        # The certificate says 127.0.0.2; the router connects from 127.0.0.1.
        await assert_refused(port, client_context(certs, "127.0.0.2"), from_ip="127.0.0.1")
        await wait_until(lambda: server.stats.rejected_tls_ip_mismatch == 1, what="the count")
        assert server.stats.accepted == 0
        assert not server.connections
        lines = [r.getMessage() for r in caplog.records if "refused router" in r.getMessage()]
        assert len(lines) == 1, lines
        assert lines[0].startswith("refused router 127.0.0.1:")
        assert "(127.0.0.2) does not include 127.0.0.1" in lines[0]
        # Its slot is free again (max-per-ip 1): the right certificate from there is served.
        async with await connect_tls(port, client_context(certs, "127.0.0.1")) as router:
            response = await router.reset(1)
            assert RouterState().apply(response.payload) == expected_state(base_export(), 1)
        assert server.stats.rejected_max_per_ip == 0


async def test_router_without_certificate_is_refused_when_a_client_ca_is_set(
    export_path: Path, certs: LabCerts
) -> None:
    config = app_config(export_path, listen=(tls_listen(),), tls=certs.server_files())
    async with running_app(config) as app:
        server = app.server
        await assert_refused(tls_port(server), client_context(certs, None), from_ip="127.0.0.1")
        await wait_until(lambda: server.stats.tls_handshake_failures == 1, what="the count")
        assert server.stats.accepted == 0
        assert server.stats.rejected_tls_ip_mismatch == 0


async def test_router_with_a_certificate_from_another_ca_is_refused(
    export_path: Path, certs: LabCerts, tmp_path: Path
) -> None:
    other = make_certs(tmp_path / "other")
    context = ssl.create_default_context(cafile=certs.ca)  # trusts our server ...
    context.load_cert_chain(*other.router("127.0.0.1"))  # ... but its certificate is foreign
    config = app_config(export_path, listen=(tls_listen(),), tls=certs.server_files())
    async with running_app(config) as app:
        server = app.server
        await assert_refused(tls_port(server), context, from_ip="127.0.0.1")
        await wait_until(lambda: server.stats.tls_handshake_failures == 1, what="the count")
        assert server.stats.accepted == 0


async def test_without_client_ca_routers_need_no_certificate(
    export_path: Path, certs: LabCerts
) -> None:
    files = certs.server_files(client_ca=False)
    config = app_config(export_path, listen=(tls_listen(),), tls=files)
    async with running_app(config) as app:
        port = tls_port(app.server)
        async with await connect_tls(port, client_context(certs, None)) as router:
            response = await router.reset(2)
            assert RouterState().apply(response.payload) == expected_state(base_export(), 2)
        # No client certificate is requested, so none is checked.
        async with await connect_tls(port, client_context(certs, "127.0.0.2")) as router:
            await router.reset(2)
        assert app.server.stats.accepted == 2
        assert no_refusals(app.server)


async def test_a_stalled_handshake_neither_blocks_others_nor_lives_past_its_timeout(
    export_path: Path, certs: LabCerts
) -> None:
    config = app_config(
        export_path,
        listen=(tls_listen(),),
        tls=certs.server_files(),
        tls_handshake_timeout=1.0,
    )
    async with running_app(config) as app:
        server, port = app.server, tls_port(app.server)
        # A TCP client that never starts the handshake.
        silent = await anyio.connect_tcp("127.0.0.1", port)
        async with silent:
            started = anyio.current_time()
            async with await connect_tls(port, client_context(certs, "127.0.0.1")) as router:
                await router.reset(2)
            assert anyio.current_time() - started < 1.0, "served while the other one waited"
            assert server.stats.tls_handshake_timeouts == 0
            with anyio.fail_after(5.0):
                try:
                    data = await silent.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    data = b""
            assert data == b""
            assert anyio.current_time() - started >= 0.9
            await wait_until(lambda: server.stats.tls_handshake_timeouts == 1, what="the count")
        assert server.stats.accepted == 1


async def test_notify_and_delta_over_tls_beside_a_plain_listener(
    export_path: Path, certs: LabCerts
) -> None:
    plain = ListenAddress("127.0.0.1", 0)
    config = app_config(export_path, listen=(plain, tls_listen()), tls=certs.server_files())
    async with running_app(config) as app:
        assert [spec.tls for spec, _, _ in app.server.bound] == [False, True]
        plain_port = app.server.bound[0][2]
        async with (
            await connect_tls(tls_port(app.server), client_context(certs, "127.0.0.1")) as tls,
            await RtrClient.connect(plain_port) as tcp,
        ):
            first = await tls.reset(2)
            await tcp.reset(2)
            held = RouterState().apply(first.payload)
            serial = await publish_and_wait(app, export_path, updated_export())
            # The idle TLS session is told (its pending read is interrupted safely) ...
            notify = await tls.receive_pdu()
            assert isinstance(notify, SerialNotify)
            assert notify.serial == serial
            # ... and its Serial Query gets the delta.
            delta = await tls.serial(2, first.cache_response.session_id, first.end_of_data.serial)
            assert isinstance(delta, Response)
            assert held.apply(delta.payload) == expected_state(updated_export(), 2)
            assert isinstance(await tcp.receive_pdu(), SerialNotify)


async def test_a_corrupt_tls_record_drops_only_that_router(
    export_path: Path, certs: LabCerts
) -> None:
    config = app_config(export_path, listen=(tls_listen(),), tls=certs.server_files())
    async with running_app(config) as app:
        server, port = app.server, tls_port(app.server)
        context = client_context(certs, "127.0.0.1")
        async with (
            await connect_tls(port, context) as bad,
            await connect_tls(port, context) as good,
        ):
            await bad.reset(2)
            await good.reset(2)
            # An application-data record that does not decrypt, under the TLS layer.
            transport = cast("TLSStream", bad.stream).transport_stream
            await transport.send(b"\x17\x03\x03\x00\x20" + bytes(range(32)))
            await wait_until(lambda: len(server.connections) == 1, what="the bad router to go")
            assert server.stats.disconnects[CloseReason.CONNECTION_LOST] == 1
            # The server and the other session carry on.
            await good.reset(2)
        async with await connect_tls(port, context) as later:
            await later.reset(0)
