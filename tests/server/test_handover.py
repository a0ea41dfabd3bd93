"""``kill -USR2`` on a real rtr-serve: a plain-TCP router keeps its connection through the
re-exec (same PID). With the same content after the restart the new image continues the old
session ids and serial: the routers are sent nothing, and their Serial Queries get empty deltas
in the session they hold. With other content (an HTTP export that changed meanwhile) a router
gets an unasked Cache Reset once the new image published; its Reset Query gets the table under a
new session id, and a router that ignores the Cache Reset gets a Serial Notify a second later
(the new id), Cache Reset to its Serial Query, then the table. A TLS router is closed; with
--state the recovered state is what is announced; when the exec fails the process serves on
with the router still connected. asyncio and trio."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rtr_protocol import CacheReset, ErrorReport, PduFramer, SerialNotify
from rtr_server.connection import HANDOVER_NOTIFY_AFTER
from tests.server.helpers import (
    Doc,
    RouterState,
    base_export,
    expected_state,
    roa,
    write_export,
)
from tests.server.rtr_client import reset_query, serial_query
from tests.server.test_cli import free_port, read_full_response, read_pdu
from tests.server.test_sighup import JsonLog, read_response, rtr_serve, stop
from tests.server.tls_helpers import client_context, make_certs
from tests.upstream.http_server import Reply, ScriptedServer

BACKENDS = ["asyncio", "trio"]


def _args(export: Path, port: int, backend: str, *more: str) -> list[str]:
    return [
        "--source",
        str(export),
        "--listen",
        f"127.0.0.1:{port}",
        "--notify-interval",
        "0",
        "--log-format",
        "json",
        "--async-backend",
        backend,
        *more,
    ]


def _connect(port: int, log: JsonLog) -> socket.socket:
    log.wait_for(lambda e: e.get("event") == "publish")
    return socket.create_connection(("127.0.0.1", port), timeout=5.0)


def _first_table(sock: socket.socket, framer: PduFramer) -> tuple[int, int]:
    """Reset Query v2 on a server that has published: (session id, serial)."""
    sock.sendall(reset_query(2))
    serial, payload = read_full_response(sock, framer)
    assert RouterState().apply(payload) == expected_state(base_export(), 2)
    return _session_of(framer), serial


def _session_of(framer: PduFramer) -> int:
    # The End of Data just read carries the session id (header octets 2-3).
    return int.from_bytes(framer.last_pdu_bytes[2:4], "big")


def _survives(sock: socket.socket, framer: PduFramer, session: int, doc: Doc) -> None:
    """After SIGUSR2 with other content, as BIRD and GoBGP, or after its Serial Query: a Cache
    Reset, at once a Reset Query, the table of ``doc`` under a new session id."""
    reset = read_pdu(sock, framer)
    assert isinstance(reset, CacheReset), reset
    sock.sendall(reset_query(2))
    _, payload = read_full_response(sock, framer)
    assert _session_of(framer) != session
    assert RouterState().apply(payload) == expected_state(doc, 2)


def _survives_ignoring_the_reset(
    sock: socket.socket, framer: PduFramer, session: int, serial: int, doc: Doc
) -> None:
    """As RTRlib, which ignores a Cache Reset it did not ask for: a Serial Notify about a second
    later (in the new id), Cache Reset to its Serial Query (its own id), then the table."""
    reset = read_pdu(sock, framer)
    assert isinstance(reset, CacheReset), reset
    reset_at = time.monotonic()
    notify = read_pdu(sock, framer)
    assert time.monotonic() - reset_at >= HANDOVER_NOTIFY_AFTER * 0.9
    assert isinstance(notify, SerialNotify), notify
    assert notify.session_id != session
    sock.sendall(serial_query(2, session, serial))
    _survives(sock, framer, session, doc)


def _continued(log: JsonLog, routers: int) -> None:
    """The new image published the same content under the old ids; ``routers`` kept in sync."""
    log.wait_for(lambda e: "continuing its session ids" in e.get("msg", ""))
    deadline = time.monotonic() + 10.0
    while sum("nothing to resend" in e.get("msg", "") for e in list(log.lines)) < routers:
        assert time.monotonic() < deadline, "".join(log.raw)
        time.sleep(0.05)


def _in_sync(sock: socket.socket, framer: PduFramer, session: int, serial: int) -> None:
    """Nothing comes within the follow-up wait; the router's Serial Query gets an empty delta
    in the session it holds."""
    time.sleep(HANDOVER_NOTIFY_AFTER * 1.5)
    _nothing_more(sock)
    sock.sendall(serial_query(2, session, serial))
    response, payload, end = read_response(sock, framer)
    assert (response.session_id, payload, end) == (session, [], serial)
    assert _session_of(framer) == session


def _nothing_more(sock: socket.socket) -> None:
    """No PDU is waiting (the router that asked at once got no Serial Notify after)."""
    sock.setblocking(False)
    try:
        with pytest.raises(BlockingIOError):
            sock.recv(1)
    finally:
        sock.setblocking(True)


@pytest.mark.parametrize("state", [False, True], ids=["memory", "state"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tcp_router_keeps_its_connection_and_its_data_through_sigusr2(
    tmp_path: Path, backend: str, state: bool
) -> None:
    export = tmp_path / "export.json"
    write_export(export, base_export())
    port = free_port()
    more = ["--state", f"sqlite:{tmp_path / 'state.db'}"] if state else []
    with rtr_serve(*_args(export, port, backend, *more)) as (proc, log):
        sock, deaf = _connect(port, log), _connect(port, log)
        with sock, deaf:
            framer, deaf_framer = PduFramer(), PduFramer()
            session, serial = _first_table(sock, framer)
            deaf_session, deaf_serial = _first_table(deaf, deaf_framer)
            idle = socket.create_connection(("127.0.0.1", port), timeout=5.0)  # no query yet
            log.wait_for(lambda e: e.get("msg", "").count("connected") and "(3 conn" in e["msg"])
            pid = proc.pid
            proc.send_signal(signal.SIGUSR2)
            _continued(log, routers=2)
            _in_sync(sock, framer, session, serial)
            _in_sync(deaf, deaf_framer, deaf_session, deaf_serial)
            with idle:
                idle_framer = PduFramer()
                idle.sendall(reset_query(1))
                _, payload = read_full_response(idle, idle_framer)
                assert RouterState().apply(payload) == expected_state(base_export(), 1)
            assert proc.poll() is None
            assert proc.pid == pid
    closes = [e for e in log.events("session_close") if e["reason_class"] == "handed_over"]
    assert len(closes) == 3, closes
    kept = [e for e in log.events("session_open") if "kept through the restart" in e["msg"]]
    assert len(kept) == 3, kept
    assert any("at version 2" in e["msg"] for e in kept)
    assert any("before its first query" in e["msg"] for e in kept)
    assert not any("Cache Reset sent unasked" in e.get("msg", "") for e in log.lines)
    publishes = log.events("publish")
    assert len(publishes) >= 2
    assert publishes[1]["session_ids"] == publishes[0]["session_ids"]
    assert publishes[1]["serial"] == publishes[0]["serial"]
    if state:  # the new image served the recovered state first
        msgs = [line.get("msg", "") for line in log.lines]
        (restart,) = [i for i, m in enumerate(msgs) if m.startswith("restarting (SIGUSR2)")]
        assert any(m.startswith("recovery from") for m in msgs[restart:]), msgs[restart:]


@pytest.mark.parametrize("backend", BACKENDS)
def test_other_content_after_sigusr2_brings_kept_routers_a_cache_reset(
    tmp_path: Path, backend: str
) -> None:
    """The export changed while the old image was not looking (an HTTP source polled hourly):
    the new image cannot continue the old session, so the kept routers are reset."""
    changed = base_export()
    changed["roas"] = [*changed["roas"], roa("198.51.100.0/24", 24, 64511)]
    http = ScriptedServer()
    http.script(
        Reply(body=json.dumps(base_export()).encode()), Reply(body=json.dumps(changed).encode())
    )
    port = free_port()
    args = _args(tmp_path / "unused.json", port, backend, "--poll-interval", "3600")
    args[1] = http.url()
    try:
        with rtr_serve(*args) as (proc, log):
            sock, deaf = _connect(port, log), _connect(port, log)
            with sock, deaf:
                framer, deaf_framer = PduFramer(), PduFramer()
                session, _ = _first_table(sock, framer)
                deaf_session, deaf_serial = _first_table(deaf, deaf_framer)
                proc.send_signal(signal.SIGUSR2)
                _survives(sock, framer, session, changed)
                _survives_ignoring_the_reset(deaf, deaf_framer, deaf_session, deaf_serial, changed)
                _nothing_more(sock)
    finally:
        http.close()
    assert any("other content than the previous image" in e.get("msg", "") for e in log.lines)
    publishes = log.events("publish")
    assert publishes[1]["session_ids"]["v2"] != publishes[0]["session_ids"]["v2"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tls_router_is_closed_and_a_tcp_router_kept(tmp_path: Path, backend: str) -> None:
    certs = make_certs(tmp_path / "certs")
    export = tmp_path / "export.json"
    write_export(export, base_export())
    port, tls_port = free_port(), free_port()
    d = certs.directory
    tls = [
        "--listen-tls",
        f"127.0.0.1:{tls_port}",
        "--tls-cert",
        str(d / "server.pem"),
        "--tls-key",
        str(d / "server-key.pem"),
        "--tls-client-ca",
        str(certs.ca),
    ]
    with rtr_serve(*_args(export, port, backend, *tls)) as (proc, log):
        sock = _connect(port, log)
        context = client_context(certs, "127.0.0.1")
        raw = socket.create_connection(("127.0.0.1", tls_port), timeout=5.0)
        with sock, context.wrap_socket(raw, server_hostname="localhost") as tls_sock:
            framer, tls_framer = PduFramer(), PduFramer()
            session, serial = _first_table(sock, framer)
            tls_sock.sendall(reset_query(2))
            read_full_response(tls_sock, tls_framer)
            proc.send_signal(signal.SIGUSR2)
            _continued(log, routers=1)
            _in_sync(sock, framer, session, serial)
            # The TLS session was told Cache Restart and closed; the TLS listener serves on.
            goodbye = read_pdu(tls_sock, tls_framer)
            assert isinstance(goodbye, ErrorReport), goodbye
            assert goodbye.code == 12  # Cache Restart
            with contextlib.suppress(ssl.SSLError, ConnectionError):
                assert read_pdu(tls_sock, tls_framer) is None
        again = socket.create_connection(("127.0.0.1", tls_port), timeout=5.0)
        with context.wrap_socket(again, server_hostname="localhost") as tls_sock:
            tls_sock.sendall(reset_query(2))
            read_full_response(tls_sock, PduFramer())
    assert any("TLS or SSH session cannot be handed over" in e["msg"] for e in log.lines)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failed_exec_keeps_serving(tmp_path: Path, backend: str) -> None:
    """The interpreter's path is gone at the exec: it serves on, the router kept."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    shutil.copy(Path(sys.prefix) / "pyvenv.cfg", venv / "pyvenv.cfg")
    python = venv / "bin" / "python"
    python.symlink_to(os.path.realpath(sys.executable))
    site = Path(sysconfig.get_paths()["purelib"])
    export = tmp_path / "export.json"
    write_export(export, base_export())
    port = free_port()
    path = os.pathsep.join([str(Path(__file__).parents[2]), str(site)])
    os.environ["PYTHONPATH"], old = path, os.environ.get("PYTHONPATH", "")
    try:
        command = [str(python), "-m", "rtr_server.cli", *_args(export, port, backend)]
        with _spawn(command) as (proc, log):
            sock = _connect(port, log)
            with sock:
                framer = PduFramer()
                session, serial = _first_table(sock, framer)
                python.unlink()
                proc.send_signal(signal.SIGUSR2)
                _continued(log, routers=1)  # the same process serves on what it served
                _in_sync(sock, framer, session, serial)
                assert proc.poll() is None
    finally:
        os.environ["PYTHONPATH"] = old
    assert any("cannot re-execute" in e["msg"] for e in log.lines)


@contextmanager
def _spawn(command: list[str]) -> Iterator[tuple[subprocess.Popen[bytes], JsonLog]]:
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    log = JsonLog(proc.stderr)
    try:
        yield proc, log
    finally:
        stop(proc, log)
