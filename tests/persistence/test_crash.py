"""SIGKILL a committing writer subprocess many times: every recovery reads a whole old or new state.

The writer (`crash_writer`) commits 50,000-VRP states whose rows all depend on the generation,
so a mix of two generations cannot pass the comparison with the rebuilt expected state. The
kill lands at a uniformly random moment of a window after a commit's ``begin`` line (mostly the
run's first commit, sometimes a later one), the window adapting so that about two kills in three
interrupt that commit and one in three let it land; now and then the kill hits the writer's
start-up instead. ``RTR_SERVE_CRASH_CYCLES`` overrides the cycle count of both backends,
``RTR_SERVE_CRASH_SEED`` fixes the random kill moments.
"""

from __future__ import annotations

import os
import random
import selectors
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest

from persistence.backend import ThreadedBackend
from persistence.duckdb_backend import DuckDBBackend
from persistence.exchange import state_digest
from persistence.sqlite_backend import SQLiteBackend
from persistence.state import PersistedState, StateHeader, StateId
from tests.persistence.helpers import ROOT
from tests.persistence.states import assert_same_state, crash_state

WRITER = (sys.executable, "-m", "tests.persistence.crash_writer")
VRPS = 50_000
CYCLES = {"sqlite": 200, "duckdb": 140}
#: First kill window after the first ``begin`` line (seconds); it then adapts so that about two
#: kills in three interrupt the writer's first commit and one in three come after it.
FIRST_WINDOW = {"sqlite": 0.5, "duckdb": 0.8}
GROW, SHRINK = 1.05, 0.9
#: Share of kills aimed at the writer's start-up (open, schema check) instead of a commit.
EARLY_KILLS = 0.08
#: Share of kills aimed at a later commit (2nd to LATER_COMMITS-th) of the writer's run.
LATER_KILLS = 0.1
LATER_COMMITS = 8
LINE_TIMEOUT = 30.0


def cycles(backend: str) -> int:
    """The cycle count for ``backend`` (``RTR_SERVE_CRASH_CYCLES`` overrides)."""
    override = os.environ.get("RTR_SERVE_CRASH_CYCLES")
    return int(override) if override else CYCLES[backend]


def make_backend(kind: str, path: Path) -> ThreadedBackend:
    """A fresh owner backend of ``kind``."""
    return (
        ThreadedBackend(SQLiteBackend(path))
        if kind == "sqlite"
        else ThreadedBackend(DuckDBBackend(path))
    )


class Lines:
    """Lines of a child's stdout, read without blocking past a deadline."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.fd, selectors.EVENT_READ)
        self.buffer = b""
        self.lines: list[str] = []
        self.eof = False

    def _read(self, timeout: float) -> None:
        if self.eof or not self.selector.select(timeout):
            return
        chunk = os.read(self.fd, 65536)
        if not chunk:
            self.eof = True
        self.buffer += chunk
        *complete, self.buffer = self.buffer.split(b"\n")
        self.lines.extend(line.decode() for line in complete)

    def wait_for(self, prefix: str, count: int, timeout: float) -> str:
        """Read until ``count`` lines start with ``prefix`` (the last of them is returned)."""
        deadline = time.monotonic() + timeout
        while len(found := [line for line in self.lines if line.startswith(prefix)]) < count:
            left = deadline - time.monotonic()
            if self.eof or left <= 0:
                raise AssertionError(f"no {count} {prefix!r} lines from the writer: {self.lines}")
            self._read(left)
        return found[count - 1]

    def drain(self) -> None:
        """Read to EOF (the child is dead)."""
        deadline = time.monotonic() + LINE_TIMEOUT
        while not self.eof and time.monotonic() < deadline:
            self._read(deadline - time.monotonic())
        self.selector.close()


@dataclass
class Tally:
    """How the kills landed, and the adaptive kill window."""

    window: float
    outcomes: Counter[str] = field(default_factory=Counter)
    durations: list[float] = field(default_factory=list)

    def record(self, labels: list[str], target: StateId | None, lines: list[str]) -> None:
        """Count ``labels``; widen the window if the targeted commit was cut, else narrow it."""
        self.outcomes.update(labels)
        if target is not None:
            cut = all(parse(line) != target for line in lines if line.startswith("done "))
            self.window *= GROW if cut else SHRINK

    def median_commit(self) -> float:
        """The median duration of the acknowledged commits (0 if none)."""
        return statistics.median(self.durations) if self.durations else 0.0


async def read_stored(
    kind: str, path: Path
) -> tuple[str, tuple[StateHeader, PersistedState] | None]:
    """Open as the new owner (recovering the file), read and verify the state, close."""
    backend = make_backend(kind, path)
    await backend.open()
    try:
        assert backend.store_id is not None
        return backend.store_id, await backend.read_state()
    finally:
        assert await backend.close()


def classify(lines: list[str], start: StateId | None, stored: StateId | None) -> list[str]:
    """Labels for where the kill landed; fails on a stored id the kill moment cannot explain.

    ``old``: the run's start state is still stored; ``new``: a commit of the run landed.
    ``interrupted``: a commit was in flight (begun, not done) when the kill came;
    ``unacknowledged``: that commit landed although its ``done`` line never came.
    """
    begun = [parse(line) for line in lines if line.startswith("begin ")]
    done = [parse(line) for line in lines if line.startswith("done ")]
    labels = ["old" if stored == start else "new"]
    if not begun:
        assert stored == start, f"killed before any commit, yet {stored} != {start}"
        return [*labels, "early"]
    in_flight = begun[-1]
    if in_flight in done:
        assert stored == in_flight, f"{in_flight} was acknowledged, yet {stored} is stored"
        return labels
    labels.append("interrupted")
    if stored == in_flight:
        return [*labels, "unacknowledged"]
    # The writer begins a commit only after the previous one is done.
    previous = begun[-2] if len(begun) > 1 else start
    assert stored == previous, f"stored {stored}: neither {previous} nor {in_flight}; {lines}"
    return labels


def parse(line: str) -> StateId:
    """The id of a ``begin ID`` / ``done ID SECONDS`` line."""
    epoch, generation = line.split()[1].split(".")
    return StateId(int(epoch), int(generation))


def spawn(kind: str, path: Path, loop: str) -> subprocess.Popen[bytes]:
    """Start a writer; it imports everything and then waits for its start line."""
    with path.with_name(f"writer-{loop}.stderr").open("wb") as stderr:
        return subprocess.Popen(
            [*WRITER, kind, str(path), str(VRPS), "--loop", loop],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )


def loop_of(epoch: int) -> str:
    """Writers and recoveries alternate between the event loops."""
    return ("asyncio", "trio")[epoch % 2]


def kill_writer(
    proc: subprocess.Popen[bytes],
    epoch: int,
    start: StateId | None,
    rng: random.Random,
    tally: Tally,
    stderr: Path,
) -> tuple[list[str], StateId | None]:
    """Tell the writer to go, SIGKILL it at a random moment; its lines and the targeted commit.

    Mostly the kill aims at the first commit; sometimes at a later one (covering DuckDB's
    automatic checkpoint, which comes with about the 7th commit of this size, and SQLite's
    WAL checkpoints), sometimes at the start-up.
    """
    assert proc.stdin is not None
    proc.stdin.write(f"{epoch} {'none' if start is None else start}\n".encode())
    proc.stdin.close()
    lines = Lines(proc)
    target = None
    draw = rng.random()
    if draw < EARLY_KILLS:
        time.sleep(rng.uniform(0, 0.3))
    else:
        nth = rng.randint(2, LATER_COMMITS) if draw < EARLY_KILLS + LATER_KILLS else 1
        target = parse(lines.wait_for("begin ", nth, LINE_TIMEOUT * nth))
        time.sleep(rng.uniform(0, tally.window))
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=LINE_TIMEOUT)
    lines.drain()
    assert proc.stdout is not None
    proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL, (
        f"the writer ended on its own ({proc.returncode}): {stderr.read_text()}"
    )
    done = [line for line in lines.lines if line.startswith("done ")]
    tally.durations.extend(float(line.split()[2]) for line in done)
    return lines.lines, target


def verify(kind: str, path: Path, epoch: int) -> StateId | None:
    """Recover as the new owner; the stored state must be exactly its generation's state."""
    store_id, result = anyio.run(read_stored, kind, path, backend=loop_of(epoch))
    if result is None:
        return None
    header, state = result
    want = crash_state(store_id, header.state_id, VRPS)
    assert header.state_digest == state_digest(want)
    assert_same_state(state, want)
    assert state.vrp_count() == VRPS
    if kind == "sqlite" and epoch % 20 == 0:
        with sqlite3.connect(path) as db:
            assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        db.close()
    return header.state_id


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("kind", ["sqlite", "duckdb"])
def test_sigkill_during_commits_leaves_old_or_new_state(kind: str, tmp_path: Path) -> None:
    path = tmp_path / f"state.{kind}"
    seed = int(os.environ.get("RTR_SERVE_CRASH_SEED", str(time.time_ns())))
    print(f"\n{kind}: kill moments from RTR_SERVE_CRASH_SEED={seed}")
    rng = random.Random(seed)
    tally = Tally(FIRST_WINDOW[kind])
    count = cycles(kind)
    started = time.monotonic()
    stored: StateId | None = None
    writers = [spawn(kind, path, loop_of(1))]
    try:
        for epoch in range(1, count + 1):
            stderr = path.with_name(f"writer-{loop_of(epoch)}.stderr")
            lines, target = kill_writer(writers[-1], epoch, stored, rng, tally, stderr)
            # The next writer starts up while this process recovers and checks the file.
            writers.append(spawn(kind, path, loop_of(epoch + 1)))
            previous = stored
            stored = verify(kind, path, epoch)
            tally.record(classify(lines, previous, stored), target, lines)
    finally:
        for proc in writers:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
    elapsed = time.monotonic() - started
    print(
        f"{kind}: {count} kill cycles in {elapsed:.1f} s, "
        f"outcomes {dict(tally.outcomes)}, median commit {tally.median_commit():.3f} s, "
        f"final kill window {tally.window:.3f} s, "
        f"last stored {stored}"
    )
    assert stored is not None
    if count >= 20:
        # Kills must cut commits in flight, and runs must end on both sides of a commit.
        assert tally.outcomes["interrupted"] > 0, tally.outcomes
        assert tally.outcomes["old"] > 0, tally.outcomes
        assert tally.outcomes["new"] > 0, tally.outcomes
