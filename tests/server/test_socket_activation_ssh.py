"""Socket activation of SSH: a real ``rtr-serve`` started by ``systemd-socket-activate`` with a
socket named ``rtr-ssh`` serves RTR over SSH on it with the SSH settings of --listen-ssh (host
key, authorized keys, the ``allow`` of a ``[[listeners]] ssh = true`` table at its port),
refusals counted by reason and sessions by transport; without SSH settings it exits 2."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import anyio
import asyncssh
import pytest

from tests.server.helpers import RouterState, base_export, expected_state, write_export
from tests.server.ssh_helpers import SshKeys, make_keys, open_router, ssh_connection
from tests.server.test_cli import DEADLINE, connect_with_retry, free_port
from tests.server.test_socket_activation import activated, needs_activate

#: rtr-serve starts at the first connection (Accept=no): its login waits for the start.
START = 60.0


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> SshKeys:
    return make_keys(tmp_path_factory.mktemp("ssh"))


def metric(text: str, name: str, label: str) -> float:
    found = re.search(rf"^{name}\{{[^}}]*{label}[^}}]*\}} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def routers(port: int, keys: SshKeys) -> int:
    """The authorized router from 127.0.0.2 gets the table; refused: another key, 127.0.0.1."""
    with anyio.fail_after(START):
        while True:  # the first connection starts rtr-serve, which loads, then serves it
            try:
                async with ssh_connection(
                    port, keys, key=keys.router_key, from_ip="127.0.0.2"
                ) as conn:
                    router = await open_router(conn)
                    response = await router.reset(2)
                    break
            except (OSError, asyncssh.Error, TimeoutError):
                await anyio.sleep(0.2)
    held = RouterState().apply(response.payload)
    assert held == expected_state(base_export(), 2)
    with pytest.raises(asyncssh.PermissionDenied):
        async with ssh_connection(port, keys, key=keys.other_key, from_ip="127.0.0.2"):
            pass
    with pytest.raises((OSError, asyncssh.Error)):  # not allowed: closed at accept
        async with ssh_connection(port, keys, key=keys.router_key, from_ip="127.0.0.1"):
            pass
    return len(response.payload)


@needs_activate
def test_serves_ssh_on_the_passed_rtr_ssh_socket(tmp_path: Path, keys: SshKeys) -> None:
    export, cfg = tmp_path / "export.json", tmp_path / "rtr-serve.toml"
    write_export(export, base_export())
    ssh, http, unused = free_port(), free_port(), free_port()
    cfg.write_text(
        f'[server]\nssh_host_key = "{keys.host_key}"\n'
        f'ssh_authorized_keys = "{keys.authorized_keys}"\n'
        f'listen = ["127.0.0.1:{unused}"]\n'
        f'[[sources]]\nurl = "{export}"\n'
        f'[[listeners]]\naddress = "127.0.0.1:{ssh}"\nssh = true\nallow = ["127.0.0.2/32"]\n'
    )
    with activated([("rtr-ssh", ssh), ("http", http)], "--config", str(cfg)) as proc:
        assert anyio.run(routers, ssh, keys, backend="asyncio") > 0
        url = f"http://127.0.0.1:{http}/metrics"
        with urllib.request.urlopen(url, timeout=DEADLINE) as r:
            text = r.read().decode()
        proc.terminate()
        err = proc.communicate(timeout=DEADLINE)[1].decode()
    assert proc.returncode == 0, err
    assert f"listening for routers on 127.0.0.1 port {ssh} (SSH) (socket from systemd)" in err
    assert "allowed: 127.0.0.2/32" in err
    assert metric(text, "rtr_rejected_connections_total", 'reason="ssh_auth_failed"') == 1
    assert metric(text, "rtr_rejected_connections_total", 'reason="not_allowed"') == 1
    assert metric(text, "rtr_transport_connections_total", 'transport="ssh"') >= 1
    # The passed socket replaces the listen addresses.
    assert f"listening for routers on 127.0.0.1 port {unused}" not in err


@needs_activate
def test_an_rtr_ssh_socket_without_ssh_settings_exits_2(tmp_path: Path) -> None:
    export = tmp_path / "export.json"
    write_export(export, base_export())
    port = free_port()
    with activated([("rtr-ssh", port)], "--source", str(export)) as proc:
        connect_with_retry(port, proc).close()  # starts rtr-serve
        err = proc.communicate(timeout=DEADLINE)[1].decode()
    assert proc.returncode == 2, err
    assert "an rtr-ssh socket from systemd needs --ssh-host-key" in err
    ours = [line for line in err.splitlines() if line.startswith("rtr-serve")]
    assert len(ours) == 1, err
