"""The ``rtr-serve`` command line, run as a subprocess: argument errors, and a real run on a
temporary export that serves a Reset Query and stops cleanly on SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from rtr_protocol import (
    NEED_DATA,
    CacheResponse,
    EndOfData,
    ErrorReport,
    Pdu,
    PduFramer,
    SerialNotify,
    Timers,
)
from tests.server.helpers import RouterState, base_export, expected_state, write_export
from tests.server.rtr_client import PAYLOAD_TYPES, PayloadPdu, reset_query

BIN = Path(sys.executable).parent
RTR_SERVE = str(BIN / "rtr-serve")
PYTHON_M = [sys.executable, "-m", "rtr_server.cli"]
DEADLINE = 10.0


def run_cli(*args: str, command: Sequence[str] = (RTR_SERVE,)) -> subprocess.CompletedProcess[str]:
    """``command args`` run to its end (30 s at most), its output captured as text."""
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=30, check=False
    )


BAD_ARGUMENTS = {
    "refresh-0": (["--refresh", "0"], "refresh"),
    "listen-nonsense": (["--listen", "nonsense"], "nonsense"),
    "expire-100": (["--expire", "100"], "expire"),
    "expire-below-refresh": (["--refresh", "7200", "--expire", "3600"], "expire"),
    "poll-interval-0": (["--poll-interval", "0"], "poll-interval"),
    "max-version-3": (["--max-version", "3"], "max-version"),
    "refresh-not-a-number": (["--refresh", "soon"], "refresh"),
    "listen-port-too-big": (["--listen", "127.0.0.1:65536"], "65536"),
    "state-unknown-backend": (["--state", "mysql:/tmp/x"], "sqlite:PATH or duckdb:PATH"),
    "state-no-path": (["--state", "sqlite:"], "sqlite:PATH"),
    "state-reader-duckdb": (["--state-reader", "duckdb:/tmp/x"], "state-reader"),
    "state-reader-with-source": (["--state-reader", "sqlite:/tmp/x"], "no sources"),
    # Offline evaluation never becomes state an online start would trust (contract P-70).
    "reference-time-with-state": (
        ["--reference-time", "2025-07-20T09:31:33Z", "--state", "sqlite:/tmp/x"],
        "cannot be used with --state",
    ),
}


@pytest.mark.parametrize("case", list(BAD_ARGUMENTS))
def test_bad_arguments_exit_2_with_one_line(export_path: Path, case: str) -> None:
    args, mentions = BAD_ARGUMENTS[case]
    result = run_cli("--source", str(export_path), *args)
    assert result.returncode == 2, result
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert result.stderr.endswith("\n")
    assert lines[0].startswith("rtr-serve: error: ")
    assert mentions in lines[0]


@pytest.mark.parametrize("command", [[RTR_SERVE], PYTHON_M], ids=["console-script", "python-m"])
def test_missing_source_exits_2(command: list[str]) -> None:
    result = run_cli("--listen", "127.0.0.1:0", command=command)
    assert result.returncode == 2, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "--source" in lines[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def connect_with_retry(port: int, proc: subprocess.Popen[bytes]) -> socket.socket:
    deadline = time.monotonic() + DEADLINE
    while True:
        assert proc.poll() is None, "rtr-serve exited early"
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=1.0)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def read_pdu(sock: socket.socket, framer: PduFramer) -> Pdu | None:
    """The next PDU, or None at EOF (blocking, bounded by the socket timeout)."""
    while True:
        pdu = framer.next_pdu()
        if pdu is not NEED_DATA:
            return pdu
        if framer.eof:
            return None
        framer.receive_data(sock.recv(65536))


def reset_until_data(sock: socket.socket, framer: PduFramer) -> tuple[int, list[PayloadPdu]]:
    """Reset Query v2 until the server has data; (End of Data serial, payload)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        sock.sendall(reset_query(2))
        first = read_pdu(sock, framer)
        while isinstance(first, SerialNotify):
            # Legal between replies: after the Error 2 below the session is negotiated, and
            # the first publish is announced to it.
            first = read_pdu(sock, framer)
        if isinstance(first, ErrorReport) and first.code == 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # No Data Available yet: the export is still loading
            continue
        return read_full_response(sock, framer, first)


def read_full_response(
    sock: socket.socket, framer: PduFramer, first: Pdu | None = None
) -> tuple[int, list[PayloadPdu]]:
    """The rest of a full response (``first`` read already, else read here)."""
    if first is None:
        first = read_pdu(sock, framer)
    assert isinstance(first, CacheResponse), first
    payload: list[PayloadPdu] = []
    while True:
        pdu = read_pdu(sock, framer)
        if isinstance(pdu, EndOfData):
            assert pdu.timers == Timers()  # the CLI defaults
            assert pdu.session_id == first.session_id
            return pdu.serial, payload
        assert isinstance(pdu, PAYLOAD_TYPES), pdu
        payload.append(pdu)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_serves_and_stops_on_sigterm(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "export.json"  # written once a router is connected
    port = free_port()
    proc = subprocess.Popen(
        [
            RTR_SERVE,
            "--source",
            str(path),
            "--listen",
            f"127.0.0.1:{port}",
            "--poll-interval",
            "0.1",
            "--async-backend",
            backend,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        with connect_with_retry(port, proc) as sock:
            sock.settimeout(5.0)
            framer = PduFramer()
            sock.sendall(reset_query(2))
            # Before the first data the query is held (--arrival-hold, default 50 s) ...
            time.sleep(0.3)
            write_export(path, base_export())
            # ... and answered with the table at the first publish.
            _, payload = read_full_response(sock, framer)
            assert RouterState().apply(payload) == expected_state(base_export(), 2)

            proc.send_signal(signal.SIGTERM)
            started = time.monotonic()
            # The idle v2 session is told Cache Restart, then the connection closes.
            goodbye = read_pdu(sock, framer)
            assert isinstance(goodbye, ErrorReport), goodbye
            assert (goodbye.version, goodbye.code) == (2, 12)
            assert read_pdu(sock, framer) is None
        stdout, stderr = proc.communicate(timeout=DEADLINE)
        assert time.monotonic() - started < 5.0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    text = stderr.decode()
    assert proc.returncode == 0, text
    assert "Traceback" not in text
    assert "rtr-serve stopped" in text
    assert "reset query v2 held until the first data (at most 50 s)" in text
    assert stdout == b""


def test_an_unusable_ca_file_exits_2_before_listening(tmp_path: Path) -> None:
    """A source's CA file is read when the client is entered, before any listener or request:
    an unusable one is one error line and exit status 2, not a traceback."""
    port = free_port()
    conf = tmp_path / "rtr-serve.toml"
    conf.write_text(
        '[[sources]]\nname = "web"\nurl = "https://192.0.2.1/rpki.json"\n'
        f'ca_file = "{tmp_path / "missing.pem"}"\n'
    )
    result = run_cli("--config", str(conf), "--listen", f"127.0.0.1:{port}")
    assert result.returncode == 2, result
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, result.stderr
    assert "cannot start: cannot use CA file" in errors[0]
    assert "Traceback" not in result.stderr
    assert "listening" not in result.stderr
