"""Contract L-20 on a real ``rtr-serve --state`` process: a stop whose final build (a decided
withdrawal) outlasts ``--flush-timeout`` logs NOT persisted and exits 1, and the file keeps the
older acknowledged state (not the newer state that was still waiting for its commit when the
stop began). The builds are held by `tests.server.held_build_serve`.
"""

from __future__ import annotations

import os
import re
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from tests.server.helpers import base_export, updated_export, write_export
from tests.server.test_shutdown_state import (
    QUICK,
    Serve,
    is_commit,
    published,
    restart_serves,
    rtr_serve,
    write_locked,
)

ROOT = Path(__file__).resolve().parents[2]


def held_build_serve(
    tmp_path: Path, db: Path, source: Path, *extra: str, backend: str
) -> AbstractContextManager[Serve]:
    """`tests.server.held_build_serve` with ``--source SOURCE --state sqlite:DB``; killed (if
    still running) on the way out."""
    command = (
        sys.executable,
        "-m",
        "tests.server.held_build_serve",
        str(tmp_path / "hold"),
        str(tmp_path / "release"),
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return rtr_serve(db, source, *extra, backend=backend, command=command, env=env)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_final_build_past_the_flush_timeout_exits_1_and_keeps_the_older_state(
    tmp_path: Path, backend: str
) -> None:
    db, source = tmp_path / "state.db", tmp_path / "export.json"
    withdrawn = base_export()
    withdrawn["roas"] = withdrawn["roas"][:1]  # the next export withdraws most VRPs
    write_export(source, base_export())
    with held_build_serve(tmp_path, db, source, "--flush-timeout", "1", backend=backend) as serve:
        serve.log.wait(is_commit, QUICK)  # the acknowledged state (serial 0)
        with write_locked(db):
            write_export(source, updated_export())
            serve.log.wait(published(1), QUICK)  # waits for its commit: the file is locked
            (tmp_path / "hold").touch()
            write_export(source, withdrawn)
            serve.log.wait(lambda line: line.get("msg") == "build held", QUICK)
            serve.proc.send_signal(15)
            serve.log.wait(lambda line: "shutting down" in str(line.get("msg")), QUICK)
            time.sleep(0.5)  # a commit attempt begun before the stop fails (0.2 s busy wait)
        time.sleep(2.0)  # unlocked, past the flush timeout: the build still runs
        (tmp_path / "release").touch()
        serve.proc.wait(QUICK)
        serve.log.join()
    text = serve.log.text()
    assert serve.proc.returncode == 1, text
    (line,) = serve.log.events("shutdown")
    assert line["persisted"] is False, line
    assert line["level"] == "error", line
    held = re.fullmatch(
        r"shutdown: the final state NOT persisted \(the sources did not all stop, or a withdrawal "
        r"decided at the stop was not built, within the flush timeout\); the store still holds "
        r"1\.([12]) \(serial ([01])\)",
        str(line["msg"]),
    )
    assert held is not None, line
    # The serial-1 commit that met the lock fails or, retried once the file is unlocked while
    # the final build is still held, succeeds: either is an acknowledged, published state.
    assert held.group(1) == str(int(held.group(2)) + 1), line
    assert "exit status 1: the last published state is not persisted" in text
    # What the log says is what the file holds: the restart serves that acknowledged state.
    (tmp_path / "hold").unlink()
    restart_serves(db, source, base_export() if held.group(2) == "0" else updated_export())
