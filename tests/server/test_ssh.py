"""RTR over SSH on real loopback sockets, with asyncssh as the router (8210bis §9.1).

A router with an authorized key gets the full table (every version) and a delta after a
Serial Notify; an unknown key, a key used from outside its ``from=`` networks, ``none``, a
user outside ``allow_users``, a wrong password, shell, exec and forwarding are refused and
counted; the login timeout, the access lists, max-per-ip and the write timeout apply as on
TCP. asyncssh runs on asyncio only, so these tests do too.
"""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import asyncssh
import pytest

from rtr_protocol import CloseReason, SerialNotify
from rtr_server.server import RtrServer
from rtr_server.ssh_settings import SshSettings, SshUser, hash_password
from tests.server.helpers import (
    RouterState,
    app_config,
    base_export,
    big_response,
    big_states,
    expected_state,
    publish_and_wait,
    running_app,
    running_server,
    settings,
    updated_export,
    wait_until,
)
from tests.server.rtr_client import Response, reset_query
from tests.server.ssh_helpers import SshKeys, make_keys, open_router, ssh_connection, ssh_listen

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> SshKeys:
    return make_keys(tmp_path_factory.mktemp("ssh"))


def ssh_settings(keys: SshKeys, **overrides: object) -> SshSettings:
    values: dict[str, object] = {"host_key": keys.host_key, "authorized_keys": keys.authorized_keys}
    values.update(overrides)
    return SshSettings(**values)  # type: ignore[arg-type]


def ssh_port(server: RtrServer) -> int:
    ports = [port for spec, _, port in server.bound if spec.ssh]
    assert len(ports) == 1
    return ports[0]


async def test_router_with_an_authorized_key_gets_the_full_table_and_a_delta(
    export_path: Path, keys: SshKeys, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rtr_server")
    config = app_config(export_path, listen=(ssh_listen(),), ssh=ssh_settings(keys))
    async with running_app(config) as app:
        port = ssh_port(app.server)
        for version in (0, 1, 2):
            async with ssh_connection(port, keys, key=keys.router_key) as conn:
                router = await open_router(conn)
                response = await router.reset(version)
                assert RouterState().apply(response.payload) == expected_state(
                    base_export(), version
                )
        async with ssh_connection(port, keys, key=keys.router_key, user="anyone") as conn:
            router = await open_router(conn)
            held = RouterState()
            first = await router.reset(2)
            held.apply(first.payload)
            serial = await publish_and_wait(app, export_path, updated_export())
            notify = await router.receive_pdu()
            assert isinstance(notify, SerialNotify)
            assert notify.serial == serial
            delta = await router.serial(2, first.cache_response.session_id, serial - 1)
            assert isinstance(delta, Response)
            assert held.apply(delta.payload) == expected_state(updated_export(), 2)
        stats = app.server.stats
        assert stats.accepted == 4
        assert stats.accepted_by_transport == {"ssh": 4}
        assert not stats.ssh_refusals
        await wait_until(lambda: not app.server.connections, what="the sessions to close")
        assert app.server.admission.admitted == 0
    assert "SSH login as 'anyone' (publickey)" in caplog.text
    assert "over SSH as 'rtr'" in caplog.text


async def test_unknown_key_is_refused_and_counted(
    export_path: Path, keys: SshKeys, caplog: pytest.LogCaptureFixture
) -> None:
    config = app_config(export_path, listen=(ssh_listen(),), ssh=ssh_settings(keys))
    async with running_app(config) as app:
        port = ssh_port(app.server)
        with pytest.raises(asyncssh.PermissionDenied):
            async with ssh_connection(port, keys, key=keys.other_key):
                pass
        stats = app.server.stats
        await wait_until(lambda: stats.ssh_refusals["auth_failed"] == 1, what="the refusal")
        assert stats.accepted == 0
        assert app.server.admission.admitted == 0
        assert app.server.ssh is not None
        assert not app.server.ssh.connections
        # An authorized router is still served.
        async with ssh_connection(port, keys, key=keys.router_key) as conn:
            router = await open_router(conn)
            await router.reset(1)
    assert "SSH login failed (publickey ssh-rsa SHA256:" in caplog.text


async def test_none_authentication_is_refused(export_path: Path, keys: SshKeys) -> None:
    config = app_config(export_path, listen=(ssh_listen(),), ssh=ssh_settings(keys))
    async with running_app(config) as app:
        with pytest.raises(asyncssh.PermissionDenied):
            async with ssh_connection(ssh_port(app.server), keys):  # no key, no password
                pass
        await wait_until(lambda: sum(app.server.stats.ssh_refusals.values()) == 1)
        assert app.server.stats.accepted == 0


async def test_password_user_from_the_config_logs_in(export_path: Path, keys: SshKeys) -> None:
    user = SshUser("router1", hash_password("s3cret pass"))
    ssh = ssh_settings(keys, authorized_keys=None, users=(user,))
    config = app_config(export_path, listen=(ssh_listen(),), ssh=ssh)
    async with running_app(config) as app:
        port = ssh_port(app.server)
        async with ssh_connection(port, keys, user="router1", password="s3cret pass") as conn:
            router = await open_router(conn)
            response = await router.reset(2)
            assert RouterState().apply(response.payload) == expected_state(base_export(), 2)
        for name, password in (("router1", "wrong"), ("router2", "s3cret pass")):
            with pytest.raises(asyncssh.PermissionDenied):
                async with ssh_connection(port, keys, user=name, password=password):
                    pass
        stats = app.server.stats
        await wait_until(lambda: stats.ssh_refusals["auth_failed"] == 2, what="two refusals")
        assert stats.accepted == 1


async def test_only_allowed_user_names_log_in(export_path: Path, keys: SshKeys) -> None:
    ssh = ssh_settings(keys, allow_users=("rtr",))
    config = app_config(export_path, listen=(ssh_listen(),), ssh=ssh)
    async with running_app(config) as app:
        port = ssh_port(app.server)
        with pytest.raises(asyncssh.PermissionDenied):
            async with ssh_connection(port, keys, key=keys.router_key, user="admin"):
                pass
        await wait_until(lambda: app.server.stats.ssh_refusals["user_not_allowed"] == 1)
        async with ssh_connection(port, keys, key=keys.router_key, user="rtr") as conn:
            await (await open_router(conn)).reset(1)


async def test_from_option_of_the_authorized_key_is_honoured(
    export_path: Path, tmp_path: Path
) -> None:
    keys = make_keys(tmp_path, options='from="127.0.0.2"')
    config = app_config(export_path, listen=(ssh_listen(),), ssh=ssh_settings(keys))
    async with running_app(config) as app:
        port = ssh_port(app.server)
        with pytest.raises(asyncssh.PermissionDenied):
            async with ssh_connection(port, keys, key=keys.router_key, from_ip="127.0.0.1"):
                pass
        async with ssh_connection(port, keys, key=keys.router_key, from_ip="127.0.0.2") as conn:
            await (await open_router(conn)).reset(2)
        assert app.server.stats.ssh_refusals["auth_failed"] == 1
        assert app.server.stats.accepted == 1


async def test_shell_exec_and_forwarding_are_refused(export_path: Path, keys: SshKeys) -> None:
    config = app_config(export_path, listen=(ssh_listen(),), ssh=ssh_settings(keys))
    async with running_app(config) as app:
        port = ssh_port(app.server)
        async with ssh_connection(port, keys, key=keys.router_key) as conn:
            with pytest.raises(asyncssh.ChannelOpenError):
                await conn.open_connection("127.0.0.1", port)  # direct-tcpip
            with pytest.raises(asyncssh.ChannelListenError):
                await conn.forward_remote_port("127.0.0.1", 0, "127.0.0.1", port)
            with anyio.fail_after(5):
                result = await conn.run("cat /etc/passwd")
            assert result.exit_status == 1
            assert result.stdout == ""
            assert "only the rpki-rtr subsystem" in str(result.stderr)
        async with ssh_connection(port, keys, key=keys.router_key) as conn:
            with anyio.fail_after(5):
                process = await conn.create_process(term_type="xterm")  # a shell
                result = await process.wait()
            assert result.exit_status == 1
        stats = app.server.stats
        await wait_until(lambda: stats.ssh_refusals["bad_channel"] == 2, what="two refusals")
        assert stats.accepted == 0
        assert stats.reset_queries == 0
        assert app.server.admission.admitted == 0


async def test_login_timeout_closes_a_silent_connection(export_path: Path, keys: SshKeys) -> None:
    config = app_config(
        export_path, listen=(ssh_listen(),), ssh=ssh_settings(keys, login_timeout=0.5)
    )
    async with running_app(config) as app:
        port = ssh_port(app.server)
        started = anyio.current_time()
        async with await anyio.connect_tcp("127.0.0.1", port) as silent:
            with anyio.fail_after(5):
                banner = await silent.receive()
                assert banner.startswith(b"SSH-2.0-")
                try:
                    while await silent.receive():
                        pass
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    pass
        assert anyio.current_time() - started >= 0.5
        await wait_until(lambda: app.server.stats.ssh_refusals["login_timeout"] == 1)
        assert app.server.admission.admitted == 0


async def test_allowed_networks_and_max_per_ip_apply(export_path: Path, keys: SshKeys) -> None:
    config = app_config(
        export_path,
        listen=(ssh_listen(allow=("127.0.0.2/32",)),),
        ssh=ssh_settings(keys),
        max_per_ip=1,
    )
    async with running_app(config) as app:
        port = ssh_port(app.server)
        with pytest.raises((OSError, asyncssh.Error)):
            async with ssh_connection(port, keys, key=keys.router_key):
                pass
        stats = app.server.stats
        assert stats.rejected_not_allowed == 1
        assert stats.rejected_not_allowed_by_listener == {f"127.0.0.1:{port} (ssh)": 1}
        async with ssh_connection(port, keys, key=keys.router_key, from_ip="127.0.0.2") as conn:
            await (await open_router(conn)).reset(1)
            with pytest.raises((OSError, asyncssh.Error)):
                async with ssh_connection(port, keys, key=keys.router_key, from_ip="127.0.0.2"):
                    pass
            assert stats.rejected_max_per_ip == 1
        assert stats.accepted == 1


async def test_stalled_ssh_router_is_dropped_after_write_timeout(keys: SshKeys) -> None:
    state, _ = big_states()
    server = RtrServer(settings(listen=(ssh_listen(),), ssh=ssh_settings(keys), write_timeout=0.5))
    server.publish(state)
    async with running_server(server):
        port = ssh_port(server)
        async with ssh_connection(port, keys, key=keys.router_key) as conn:
            writer, _reader, _ = await conn.open_session(subsystem="rpki-rtr", encoding=None)
            writer.write(reset_query(2))  # and never read
            await wait_until(lambda: server.stats.disconnects[CloseReason.WRITE_STALLED] == 1)
            expected = big_response(2, state.session_ids.v2, state.serial.value)
            assert server.stats.bytes_sent < len(expected) // 2
        # Another router gets the whole table meanwhile and afterwards.
        async with ssh_connection(port, keys, key=keys.router_key) as conn:
            router = await open_router(conn)
            await router.send(reset_query(1))
            expected = big_response(1, state.session_ids.v1, state.serial.value)
            assert await router.receive_raw(len(expected), within=20.0) == expected


async def test_a_flood_of_silent_connections_makes_way_for_an_ssh_router(
    export_path: Path, keys: SshKeys
) -> None:
    """Issue 19 on an SSH listener: connections that never log in make way at the cap."""
    config = app_config(
        export_path, listen=(ssh_listen(),), ssh=ssh_settings(keys), max_connections=20
    )
    async with running_app(config) as app:
        port, admission = ssh_port(app.server), app.server.admission
        flood = [
            await anyio.connect_tcp("127.0.0.1", port, local_host="127.0.4.1") for _ in range(30)
        ]
        try:
            await wait_until(
                lambda: admission.stats.evicted["max_connections"] == 10, what="the flood"
            )
            async with ssh_connection(port, keys, key=keys.router_key, from_ip="127.0.4.2") as conn:
                response = await (await open_router(conn)).reset(2)
                assert RouterState().apply(response.payload) == expected_state(base_export(), 2)
            assert admission.stats.evicted["max_connections"] == 11
            assert not app.server.stats.ssh_refusals  # evictions are not login refusals
        finally:
            for stream in flood:
                await stream.aclose()
