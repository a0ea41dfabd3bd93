"""Session end for the Debian 12 interop suite: no daemon or socket dir left, the summary table."""

from __future__ import annotations

import signal
from types import FrameType

import pytest
from rtrclients import procs, summary
from rtrclients.base import SOCKET_DIRS, remove_socket_dir
from rtrclients.lab import CACHE


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM (a CI job cancelled or timed out) tears the fixtures down like Ctrl-C does."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if a daemon started by the suite is still running (and stop it).

    Likewise for a private socket directory under /tmp that a client's stop did not remove.
    """
    left = procs.leftovers()
    for tracked in procs.STARTED:
        procs.stop(tracked)
    if left:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        summary.note(f"LEFT RUNNING at session end (now stopped): {', '.join(left)}")
    dirs = sorted(str(d) for d in SOCKET_DIRS if d.exists())
    for path in list(SOCKET_DIRS):
        remove_socket_dir(path)
    if dirs:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        summary.note(f"SOCKET DIRS LEFT at session end (now removed): {', '.join(dirs)}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the per-client table and write it to interop-tests/.cache/summary.txt."""
    text = summary.render()
    if not text:
        return
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / "summary.txt").write_text(text + "\n")
    terminalreporter.write_sep("=", "rtr-serve interop summary (Debian 12 clients)")
    for line in text.splitlines():
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"(also in {CACHE / 'summary.txt'})")
