"""SIGHUP on a real ``rtr-serve --config`` process: an added source reaches a connected router
as a Serial Query diff; a broken file is logged and the old data keeps serving; without
--config SIGHUP only says there is nothing to reload. Logs are read as JSON lines."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import pytest

from rtr_protocol import CacheResponse, EndOfData, ErrorReport, PduFramer, SerialNotify
from tests.server.helpers import (
    RouterState,
    base_export,
    expected_state,
    export,
    roa,
    write_export,
)
from tests.server.rtr_client import PAYLOAD_TYPES, PayloadPdu, serial_query
from tests.server.test_cli import (
    DEADLINE,
    RTR_SERVE,
    connect_with_retry,
    free_port,
    read_pdu,
    reset_until_data,
)

EXTRA = export(roas=[roa("198.51.100.0/24", 24, 64511), roa("2001:db8:77::/48", 48, 64512)])


class JsonLog:
    """Reads a process's stderr in a thread; every line must be one JSON object."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.lines: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        for raw in stream:
            text = raw.decode()
            with self._changed:
                self.raw.append(text)
                try:
                    self.lines.append(json.loads(text))
                except ValueError:
                    self.lines.append({"unparsable": text})
                self._changed.notify_all()

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The first line matching ``predicate``; fail after `DEADLINE` seconds."""
        deadline = time.monotonic() + DEADLINE
        with self._changed:
            while True:
                for line in self.lines:
                    if predicate(line):
                        return line
                left = deadline - time.monotonic()
                assert left > 0, f"no such log line in: {''.join(self.raw)}"
                self._changed.wait(left)

    def events(self, name: str) -> list[dict[str, Any]]:
        with self._changed:
            return [line for line in self.lines if line.get("event") == name]

    def join(self) -> None:
        self._thread.join(DEADLINE)


def config_text(port: int, *sources: Path) -> str:
    text = (
        f'[server]\nlisten = ["127.0.0.1:{port}"]\nnotify_interval = 0\npoll_interval = 0.1\n'
        'log_format = "json"\n'
    )
    for i, path in enumerate(sources):
        text += f'[[sources]]\nname = "s{i}"\nurl = "{path}"\n'
    return text


def read_response(sock: Any, framer: PduFramer) -> tuple[CacheResponse, list[PayloadPdu], int]:
    first = read_pdu(sock, framer)
    assert isinstance(first, CacheResponse), first
    payload: list[PayloadPdu] = []
    while True:
        pdu = read_pdu(sock, framer)
        if isinstance(pdu, EndOfData):
            return first, payload, pdu.serial
        assert isinstance(pdu, PAYLOAD_TYPES), pdu
        payload.append(pdu)


def stop(proc: subprocess.Popen[bytes], log: JsonLog) -> None:
    """SIGTERM (unless it already ended), then read the rest of its log; it must exit 0."""
    try:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(DEADLINE)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.join()
        assert proc.stderr is not None
        proc.stderr.close()
    assert proc.returncode == 0, "".join(log.raw)
    assert not [line for line in log.lines if "unparsable" in line], "".join(log.raw)


@contextmanager
def rtr_serve(*args: str) -> Iterator[tuple[subprocess.Popen[bytes], JsonLog]]:
    """``rtr-serve args`` with its JSON log read; `stop`ped (and checked) on the way out."""
    proc = subprocess.Popen([RTR_SERVE, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    log = JsonLog(proc.stderr)
    try:
        yield proc, log
    finally:
        stop(proc, log)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_sighup_adds_a_source_and_survives_a_broken_file(tmp_path: Path, backend: str) -> None:
    a, b, cfg = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "rtr-serve.toml"
    write_export(a, base_export())
    write_export(b, EXTRA)
    port = free_port()
    cfg.write_text(config_text(port, a))
    with (
        rtr_serve("--config", str(cfg), "--async-backend", backend) as (proc, log),
        connect_with_retry(port, proc) as sock,
    ):
        sock.settimeout(5.0)
        framer = PduFramer()
        serial, payload = reset_until_data(sock, framer)
        held = RouterState().apply(payload)
        assert held == expected_state(base_export(), 2)
        session = log.wait_for(lambda e: e.get("event") == "publish")["session_ids"]["v2"]

        # Add a second source to the file and reload.
        cfg.write_text(config_text(port, a, b))
        proc.send_signal(signal.SIGHUP)
        reloaded = log.wait_for(lambda e: e.get("event") == "config_reload")
        assert reloaded["outcome"] == "applied", reloaded
        assert reloaded["changed"] == ["sources"]
        notify = read_pdu(sock, framer)
        assert isinstance(notify, SerialNotify), notify
        assert notify.serial == serial + 1
        sock.sendall(serial_query(2, session, serial))
        response, delta, new_serial = read_response(sock, framer)
        assert response.session_id == session
        assert new_serial == serial + 1
        held = held.apply(delta)
        merged = base_export()
        merged["roas"] += EXTRA["roas"]
        assert held == expected_state(merged, 2)

        # A broken file: logged with the reason, nothing changes.
        cfg.write_text("[server\nlisten = nonsense\n")
        proc.send_signal(signal.SIGHUP)
        failed = log.wait_for(
            lambda e: e.get("event") == "config_reload" and e["outcome"] == "failed"
        )
        assert failed["level"] == "error"
        assert "not valid TOML" in failed["error"]
        assert str(cfg) in failed["msg"]
        sock.sendall(serial_query(2, session, new_serial))
        _, nothing, same = read_response(sock, framer)
        assert (nothing, same) == ([], new_serial)
        again, full = reset_until_data(sock, framer)
        assert again == new_serial
        assert RouterState().apply(full) == expected_state(merged, 2)
    assert len(log.events("config_reload")) == 2
    assert [e["serial"] for e in log.events("publish")] == [serial, serial + 1]
    changes = [(e["source"], e["old"], e["new"]) for e in log.events("source_state")]
    assert changes == [("s0", "starting", "ok"), ("s1", "starting", "ok")]
    (closed,) = log.events("session_close")
    assert closed["version"] == 2
    assert closed["session_id"] == session
    assert closed["reason"] == "peer closed"
    # Two Serial Queries (12 octets each) and Reset Queries (8 each): at least two, more when
    # the first was answered with No Data Available.
    received = closed["bytes_received"] - 2 * 12
    assert received >= 2 * 8
    assert received % 8 == 0
    assert closed["bytes_sent"] > 0
    assert {"ts", "level", "logger", "msg"} <= set(closed)


def test_sighup_without_config_has_nothing_to_reload(export_path: Path) -> None:
    port = free_port()
    args = ["--source", str(export_path), "--listen", f"127.0.0.1:{port}", "--log-format", "json"]
    with rtr_serve(*args) as (proc, log), connect_with_retry(port, proc) as sock:
        sock.settimeout(5.0)
        framer = PduFramer()
        serial, _ = reset_until_data(sock, framer)
        proc.send_signal(signal.SIGHUP)
        line = log.wait_for(lambda e: e.get("event") == "config_reload")
        assert line["outcome"] == "no_config"
        assert "nothing to reload" in line["msg"]
        assert proc.poll() is None
        again, _ = reset_until_data(sock, framer)
        assert again == serial
        assert not isinstance(read_pdu_nowait(sock, framer), ErrorReport)


def read_pdu_nowait(sock: Any, framer: PduFramer) -> object:
    """Nothing more is pending on the socket (returns None after a short wait)."""
    sock.settimeout(0.2)
    try:
        return read_pdu(sock, framer)
    except TimeoutError:
        return None
    finally:
        sock.settimeout(5.0)
