"""Start rtr-serve as a real subprocess on loopback for interop tests, and read what it logged.

Black box: nothing of ours is imported; the server is the installed ``rtr-serve`` command of
the virtualenv running the tests. Its log (stderr) goes to a file the tests can search, e.g. to
prove that an update reached a router as a Serial Query answered with a delta.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
DATA = SHARED / "data"
REAL_TABLE = DATA / "rpkilog/rpkiclient_summary_20250720T093135Z.json.bz2"
REAL_TABLE_NEXT = DATA / "rpkilog/rpkiclient_summary_20250720T100145Z.json.bz2"
#: Build time of REAL_TABLE: every entry of both real files is valid then.
REAL_REFERENCE_TIME = "2025-07-20T09:31:33Z"
RTR_SERVE = Path(sys.executable).with_name("rtr-serve")
#: The time stamp that starts every text log line: RFC 3339, UTC, milliseconds (then "Z").
LOG_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%f"


def log_line_time(line: str) -> float:
    """The Unix time at which rtr-serve wrote ``line`` (millisecond resolution)."""
    return datetime.strptime(line[:23], LOG_TIME_FORMAT).replace(tzinfo=UTC).timestamp()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: object, timeout: float, what: str, interval: float = 0.2) -> None:
    """Poll ``predicate()`` until true; raise TimeoutError naming ``what`` otherwise."""
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class RtrServe:
    """One running rtr-serve process."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
        """Wrap a started process (use `start_rtr_serve`)."""
        self.proc = proc
        self.port = port
        self.log_path = log_path

    @property
    def log(self) -> str:
        """Everything logged so far."""
        return self.log_path.read_text(errors="replace")

    def count(self, pattern: str) -> int:
        """Occurrences of a regular expression in the log."""
        return len(re.findall(pattern, self.log))

    def lines(self, pattern: str) -> list[str]:
        """Whole log lines in which a regular expression occurs."""
        regex = re.compile(pattern)
        return [line for line in self.log.splitlines() if regex.search(line)]

    def first_time(self, pattern: str) -> float | None:
        """Unix time of the first line matching ``pattern`` (None if there is none)."""
        found = self.lines(pattern)
        return log_line_time(found[0]) if found else None

    def wait_log(self, pattern: str, timeout: float, *, count: int = 1) -> None:
        """Wait until ``pattern`` occurs ``count`` times in the log."""
        wait_until(lambda: self.count(pattern) >= count, timeout, f"log line {pattern!r}")

    def published_serial(self) -> int | None:
        """The last serial the log says was published."""
        serials = re.findall(r"published serial (\d+)", self.log)
        return int(serials[-1]) if serials else None

    def stop(self) -> int:
        """SIGTERM, wait, return the exit code (SIGKILL after 10 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def _die_with_us(args: list[str]) -> list[str]:
    """Run ``args`` so that it gets SIGTERM if the test process dies without cleaning up."""
    setpriv = shutil.which("setpriv")  # util-linux
    return [setpriv, "--pdeathsig", "TERM", "--", *args] if setpriv else args


@contextmanager
def start_rtr_serve(
    source: Path,
    run_dir: Path,
    *,
    port: int | None = None,
    host: str = "127.0.0.1",
    reference_time: str | None = None,
    extra: Sequence[str] = (),
    ready_timeout: float = 60.0,
) -> Iterator[RtrServe]:
    """Run rtr-serve on ``source`` until the block ends; waits until it listens."""
    run_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    log_path = run_dir / f"rtr-serve-{port}.log"
    args = [
        str(RTR_SERVE),
        "--source",
        str(source),
        "--listen",
        f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
        "--notify-interval",
        "0",
        "--poll-interval",
        "0.2",
        "--log-level",
        "info",
        # Short timers so clients that honour End of Data poll soon after a notify is missed.
        "--refresh",
        "30",
        "--retry",
        "10",
        "--expire",
        "600",
    ]
    if reference_time:
        args += ["--reference-time", reference_time]
    args += list(extra)
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            _die_with_us(args),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    server = RtrServe(proc, port, log_path)
    try:
        wait_until(
            lambda: "listening for routers" in server.log or proc.poll() is not None,
            ready_timeout,
            "rtr-serve to listen",
        )
        if proc.poll() is not None:
            raise RuntimeError(f"rtr-serve exited early:\n{server.log}")
        yield server
    finally:
        server.stop()


def write_export(
    path: Path,
    vrps: Sequence[tuple[str, int, int]],
    *,
    aspas: Sequence[tuple[int, Sequence[int]]] = (),
    router_keys: Sequence[tuple[int, str, str]] = (),
    expires: int = 4_070_908_800,
) -> None:
    """Write an rpki-client style export atomically (rename), from (prefix, maxLength, asn)."""
    doc = {
        "metadata": {"buildtime": "2026-01-01T00:00:00Z"},
        "roas": [
            {"prefix": p, "maxLength": m, "asn": a, "ta": "test", "expires": expires}
            for p, m, a in vrps
        ],
        "aspas": [
            {"customer_asid": c, "providers": list(ps), "expires": expires} for c, ps in aspas
        ],
        "bgpsec_keys": [
            {"asn": a, "ski": ski, "pubkey": spki, "ta": "test", "expires": expires}
            for a, ski, spki in router_keys
        ],
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)


def restart_in_place(server: RtrServe) -> tuple[float, int]:
    """``kill -USR2`` (same PID, routers kept): when the new image first published, and the
    serial it published."""
    marker = "restarting (SIGUSR2)"
    before = server.log.count(marker)
    pid = server.proc.pid
    server.proc.send_signal(signal.SIGUSR2)
    server.wait_log(re.escape(marker), 30, count=before + 1)

    def first_publish() -> re.Match[str] | None:
        lines = server.log.splitlines()
        last = max(i for i, line in enumerate(lines) if marker in line)
        for line in lines[last:]:
            found = re.search(r"published serial (\d+)[ :]", line)
            if found:
                return found
        return None

    wait_until(lambda: first_publish() is not None, 60, "the first publish after SIGUSR2")
    assert server.proc.poll() is None, server.log
    assert server.proc.pid == pid
    published = first_publish()
    assert published is not None
    return log_line_time(published.string), int(published.group(1))
