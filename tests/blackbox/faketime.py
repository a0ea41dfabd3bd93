"""Run a real ``rtr-serve`` under libfaketime, with a wall clock the test moves while it runs.

A `WallClock` is one libfaketime clock file holding an offset in seconds ("+3600", "-200"):
every process started with it sees the real UTC time plus that offset. The file is re-read on
every time call (``FAKETIME_NO_CACHE=1``), so `WallClock.set` / `WallClock.move` move the clock
of a *running* process at once. The monotonic clock stays real
(``FAKETIME_DONT_FAKE_MONOTONIC=1``), so do file times (``NO_FAKE_STAT=1``). libfaketime 0.9.10
makes Python's ``time.sleep`` fail with EINVAL; a ``sitecustomize`` on the child's PYTHONPATH
only replaces it with a ``select()`` sleep. Its "monotonic fix" of ``pthread_cond_timedwait``
(on by default) mangles the GIL's timed wait: with the CPUs busy, a thread holding the GIL
starved the event loop for 0.6-0.8 s at a time (7 of 10 runs; 51 ms at worst without
libfaketime), which made these tests flaky under CI load; ``FAKETIME_FORCE_MONOTONIC_FIX=0``
turns it off (then 20 ms at worst), and the monotonic clock is not faked anyway. `rtr_serve`
starts this tree's ``rtr_server.cli`` under such a clock on a free loopback port, logging
JSON (read by `JsonLog`), and stops it (SIGTERM, exit status 0 checked) on every way out,
printing its log. Without libfaketime
(Debian package ``faketime``) the tests are skipped, or fail when the ``CI`` variable is set.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.server.test_cli import DEADLINE, PYTHON_M, connect_with_retry, free_port
from tests.server.test_sighup import JsonLog, stop

__all__ = ["Process", "WallClock", "find_libfaketime", "require_libfaketime", "rtr_serve"]

#: The tree whose code the processes run (first on their PYTHONPATH).
TREE = Path(__file__).resolve().parents[2]
#: Where libfaketime's multi-threaded variant lives (Debian, multiarch or not; a local build).
LIBRARY_GLOBS = (
    ("/usr/lib", "*/faketime/libfaketimeMT.so.1"),
    ("/usr/lib", "faketime/libfaketimeMT.so.1"),
    ("/usr/local/lib", "faketime/libfaketimeMT.so.1"),
)
#: Set to a libfaketimeMT.so.1 path to use that one.
LIBRARY_VARIABLE = "RTR_TEST_LIBFAKETIME"
MISSING = (
    "libfaketime is not installed: the black-box wall-clock tests need the Debian package "
    "`faketime` (libfaketime 0.9.10, /usr/lib/<arch>/faketime/libfaketimeMT.so.1); install it "
    f"with `apt-get install faketime` (or `make test-deps`), or set {LIBRARY_VARIABLE}"
)
#: The child's sitecustomize: libfaketime 0.9.10 breaks clock_nanosleep, hence time.sleep.
SHIM = '''"""Test shim (libfaketime 0.9.10): time.sleep fails with EINVAL; sleep with select()."""
import select
import time


def _sleep(seconds):
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        select.select([], [], [], left)


time.sleep = _sleep
'''


def find_libfaketime() -> Path | None:
    """The libfaketimeMT.so.1 to preload, or None when there is none."""
    chosen = os.environ.get(LIBRARY_VARIABLE)
    if chosen:
        return Path(chosen) if Path(chosen).is_file() else None
    for root, pattern in LIBRARY_GLOBS:
        for match in sorted(Path(root).glob(pattern)):
            return match
    return None


def require_libfaketime() -> Path:
    """`find_libfaketime`, or fail the test under CI (the variable ``CI`` set), else skip it."""
    library = find_libfaketime()
    if library is not None:
        return library
    if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
        pytest.fail(MISSING, pytrace=False)
    pytest.skip(MISSING)


class WallClock:
    """One fake wall clock: real UTC time plus `offset` seconds, movable while processes run."""

    def __init__(self, directory: Path, offset: int = 0) -> None:
        """Create the clock file (and the child's shim) in ``directory``."""
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "faketime.rc"
        self.shim = directory / "shim"
        self.shim.mkdir(exist_ok=True)
        (self.shim / "sitecustomize.py").write_text(SHIM)
        self.offset = 0
        self.set(offset)

    def set(self, offset: int) -> None:
        """Put the clock ``offset`` seconds from real time (atomically: a reader never sees an
        empty file, which libfaketime would read as no offset at all)."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(f"{offset:+d}\n")
        tmp.replace(self.path)
        self.offset = offset

    def move(self, seconds: int) -> None:
        """Move the clock by ``seconds`` (negative: back)."""
        self.set(self.offset + seconds)

    def now(self) -> float:
        """What the processes' wall clock reads now."""
        return time.time() + self.offset

    def environ(self, library: Path) -> dict[str, str]:
        """The environment of a child under this clock (the test's own, libfaketime added)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAKETIME")}
        path = [str(self.shim), str(TREE)]
        if env.get("PYTHONPATH"):
            path.append(env["PYTHONPATH"])
        env.update(
            LD_PRELOAD=str(library),
            FAKETIME_TIMESTAMP_FILE=str(self.path),
            FAKETIME_NO_CACHE="1",
            FAKETIME_DONT_FAKE_MONOTONIC="1",
            FAKETIME_FORCE_MONOTONIC_FIX="0",
            NO_FAKE_STAT="1",
            PYTHONPATH=os.pathsep.join(path),
        )
        return env


def timestamp(line: dict[str, Any]) -> float:
    """The Unix time of a JSON log line (its ``ts``: the process's wall clock)."""
    return datetime.fromisoformat(str(line["ts"])).timestamp()


@dataclass(slots=True)
class Process:
    """One running ``rtr-serve`` under a `WallClock`."""

    name: str
    proc: subprocess.Popen[bytes]
    log: JsonLog
    port: int
    clock: WallClock

    def lines(self) -> list[dict[str, Any]]:
        """The JSON log lines read so far."""
        return list(self.log.lines)

    def messages(self, text: str) -> list[dict[str, Any]]:
        """The lines whose ``msg`` contains ``text``."""
        return [line for line in self.lines() if text in str(line.get("msg", ""))]

    def wait_line(
        self,
        predicate: Callable[[dict[str, Any]], bool],
        *,
        after: int = 0,
        within: float = DEADLINE,
        what: str = "a log line",
    ) -> dict[str, Any]:
        """The first line from index ``after`` on matching ``predicate``; fail after ``within``."""
        deadline = time.monotonic() + within
        while True:
            assert self.proc.poll() is None, f"{self.name} exited while waiting for {what}"
            for line in self.lines()[after:]:
                if predicate(line):
                    return line
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: no {what} within {within:g} s")
            time.sleep(0.05)

    def dump(self) -> str:
        """The whole log as read, for a failing test's output."""
        return f"----- log of {self.name} (port {self.port}) -----\n" + "".join(self.log.raw)


@contextmanager
def rtr_serve(
    clock: WallClock, *args: str, name: str = "rtr-serve", backend: str = "asyncio"
) -> Iterator[Process]:
    """``python -m rtr_server.cli --listen 127.0.0.1:PORT --log-format json --arrival-hold 0
    ... args`` under
    ``clock``; yields once it accepts connections; stopped (exit 0 checked) and its log printed
    on the way out."""
    library = require_libfaketime()
    port = free_port()
    command = [
        *PYTHON_M,
        "--listen",
        f"127.0.0.1:{port}",
        "--log-format",
        "json",
        "--notify-interval",
        "0",
        # The tests probe what is served with fresh Reset Queries: No Data must come at once.
        "--arrival-hold",
        "0",
        "--async-backend",
        backend,
        *args,
    ]
    proc = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=clock.environ(library),
        cwd=clock.directory,
    )
    assert proc.stderr is not None
    process = Process(name, proc, JsonLog(proc.stderr), port, clock)
    try:
        try:
            connect_with_retry(port, proc).close()
            yield process
        finally:
            stop(proc, process.log)
    finally:
        print(process.dump())
