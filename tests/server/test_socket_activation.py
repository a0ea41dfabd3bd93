"""systemd socket activation: a real ``rtr-serve`` started by ``systemd-socket-activate`` serves
RTR and HTTP on the passed sockets (by LISTEN_FDNAMES name) instead of binding its own; a socket
named ``rtr-ssh`` without SSH settings (served in test_socket_activation_ssh.py) or an unknown
name is a configuration error (exit 2); the environment is checked before any descriptor is used."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from rtr_protocol import PduFramer
from rtr_server.socket_activation import inherited_sockets
from tests.server.helpers import base_export, write_export
from tests.server.rtr_client import reset_query
from tests.server.test_cli import (
    DEADLINE,
    RTR_SERVE,
    connect_with_retry,
    free_port,
    reset_until_data,
)
from tests.server.test_tcp_auth import md5_socket, refused, table_over

ACTIVATE = shutil.which("systemd-socket-activate")
needs_activate = pytest.mark.skipif(
    ACTIVATE is None, reason="systemd-socket-activate is not installed (make test-deps)"
)


@contextmanager
def activated(sockets: list[tuple[str, int]], *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """``systemd-socket-activate -l … --fdname=… rtr-serve args`` (rtr-serve starts at the
    first connection, in the same process, as systemd would start the service)."""
    assert ACTIVATE is not None
    command = [ACTIVATE]
    for _, port in sockets:
        command += ["-l", f"127.0.0.1:{port}"]
    command += [f"--fdname={':'.join(name for name, _ in sockets)}"]
    for name in ("PYTHONPATH", "PATH"):
        if name in os.environ:
            command += ["-E", f"{name}={os.environ[name]}"]
    proc = subprocess.Popen(
        [*command, RTR_SERVE, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(DEADLINE)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@needs_activate
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_serves_rtr_and_http_on_the_passed_sockets(tmp_path: Path, backend: str) -> None:
    export = tmp_path / "export.json"
    write_export(export, base_export())
    rtr, http, unused = free_port(), free_port(), free_port()
    sockets = [("rtr", rtr), ("http", http)]
    args = ["--source", str(export), "--listen", f"127.0.0.1:{unused}", "--async-backend", backend]
    with activated(sockets, *args) as proc:
        sock = connect_with_retry(rtr, proc)  # this connection starts rtr-serve
        with sock:
            sock.settimeout(DEADLINE)
            _, payload = reset_until_data(sock, PduFramer())
        assert len(payload) > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/healthz", timeout=DEADLINE) as r:
            assert r.status == 200
        # --listen is not bound: the passed sockets replace it.
        with pytest.raises(OSError):
            connect_once(unused)
        proc.terminate()
        err = proc.communicate(timeout=DEADLINE)[1].decode()
    assert proc.returncode == 0, err
    assert f"listening for routers on 127.0.0.1 port {rtr} (socket from systemd)" in err
    assert f"http://127.0.0.1:{http}/" in err


def connect_once(port: int) -> None:
    socket.create_connection(("127.0.0.1", port), timeout=1.0).close()


@needs_activate
@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("rtr-ssh", "an rtr-ssh socket from systemd needs --ssh-host-key"),
        ("bgp", "is named 'bgp' (known names: rtr, rtr-tls, rtr-ssh, http"),
        ("rtr-tls", "an rtr-tls socket needs a certificate and key"),
    ],
)
def test_a_socket_it_cannot_serve_exits_2(tmp_path: Path, name: str, message: str) -> None:
    export = tmp_path / "export.json"
    write_export(export, base_export())
    port = free_port()
    with activated([("rtr", free_port()), (name, port)], "--source", str(export)) as proc:
        connect_with_retry(port, proc).close()  # starts rtr-serve
        err = proc.communicate(timeout=DEADLINE)[1].decode()
    assert proc.returncode == 2, err
    assert message in err


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LISTEN_FDS": "1", "LISTEN_PID": "x"}, "LISTEN_PID='x' is not a process id"),
        ({"LISTEN_FDS": "0", "LISTEN_PID": "42"}, "LISTEN_FDS='0' is not a count"),
        (
            {"LISTEN_FDS": "2", "LISTEN_PID": "42", "LISTEN_FDNAMES": "rtr"},
            "LISTEN_FDNAMES has 1 names for 2 descriptors",
        ),
    ],
)
def test_a_bad_environment_is_a_configuration_error(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match="socket activation") as caught:
        inherited_sockets(env, pid=42)
    assert message in str(caught.value)


def test_sockets_for_another_process_and_none_at_all_are_ignored() -> None:
    assert inherited_sockets({"LISTEN_FDS": "1", "LISTEN_PID": "41"}, pid=42) == ()
    assert inherited_sockets({}, pid=42) == ()


ROOT = Path(__file__).resolve().parents[2]
INSTALLED = "/opt/rtr-serve/bin/rtr-serve"


@pytest.mark.parametrize("bad", [False, True], ids=["as-shipped", "misspelt-key"])
def test_socket_unit_passes_systemd_analyze_verify(tmp_path: Path, bad: bool) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (make test-deps installs it)")
    for name in ("rtr-serve.service", "rtr-serve.socket"):
        text = (ROOT / "contrib" / "systemd" / name).read_text().replace(INSTALLED, RTR_SERVE)
        if bad and name.endswith(".socket"):
            text = text.replace("FileDescriptorName=", "FileDescriptorNames=")
        (tmp_path / name).write_text(text)
    done = subprocess.run(
        [analyze, "verify", str(tmp_path / "rtr-serve.socket")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if bad:  # the check can fail
        assert "FileDescriptorNames" in done.stderr
        return
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr
    assert done.stdout.strip() == "", done.stdout


@needs_activate
def test_a_passed_socket_takes_the_md5_keys_of_its_configured_listener(tmp_path: Path) -> None:
    """The unsigned connection that started rtr-serve waited in the backlog before the key
    existed: it is closed, not served; then signed routers are served, unsigned refused."""
    export, cfg = tmp_path / "export.json", tmp_path / "rtr-serve.toml"
    write_export(export, base_export())
    keyed = free_port()
    cfg.write_text(
        f'[[sources]]\nurl = "{export}"\n[[listeners]]\naddress = "127.0.0.1:{keyed}"\n'
        'tcp_md5 = [{ peer = "127.0.0.1", key = "md5-secret" }]\n'
    )
    with activated([("rtr", keyed)], "--config", str(cfg)) as proc:
        first = connect_with_retry(keyed, proc)  # unsigned: starts rtr-serve
        with first:
            first.settimeout(DEADLINE)
            first.sendall(reset_query(2))
            with suppress(ConnectionResetError):
                assert first.recv(65536) == b""  # closed unanswered
        assert table_over(md5_socket(b"md5-secret"), keyed) > 0
        assert refused(md5_socket(None), keyed)
        proc.terminate()
        err = proc.communicate(timeout=DEADLINE)[1].decode()
    assert proc.returncode == 0, err
    assert "closed 1 connections from keyed routers" in err
    assert "md5-secret" not in err
