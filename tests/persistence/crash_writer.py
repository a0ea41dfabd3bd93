"""Crash-test writer: commits `crash_state` generations in a loop until killed (or ``--max``).

Run as ``python -m tests.persistence.crash_writer BACKEND PATH VRPS`` from the repository root.
It imports everything, then waits for one stdin line ``EPOCH EXPECTED`` (EXPECTED is ``none`` or
the stored state's ``EPOCH.GENERATION``), so the parent can start it while it still verifies the
file. Each commit is framed by ``begin ID`` and ``done ID SECONDS`` lines on stdout (flushed), so
the parent knows which commit was in flight when it sent SIGKILL. EOF on stdin ends it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time

import anyio

from persistence.backend import ThreadedBackend
from persistence.duckdb_backend import DuckDBBackend
from persistence.sqlite_backend import SQLiteBackend
from persistence.state import StateId
from tests.persistence.states import crash_state


def parse_id(text: str) -> StateId | None:
    """``none`` or ``EPOCH.GENERATION``."""
    if text == "none":
        return None
    epoch, generation = text.split(".")
    return StateId(int(epoch), int(generation))


async def run(args: argparse.Namespace, epoch: int, expected: StateId | None) -> None:
    """Open, then commit generation after generation with CAS on the previous one."""
    backend: ThreadedBackend = (
        ThreadedBackend(SQLiteBackend(args.path))
        if args.backend == "sqlite"
        else ThreadedBackend(DuckDBBackend(args.path))
    )
    await backend.open()
    try:
        assert backend.store_id is not None
        generation = 0 if expected is None else expected.generation
        for _ in range(args.max):
            generation += 1
            state = crash_state(backend.store_id, StateId(epoch, generation), args.vrps)
            print(f"begin {state.state_id}", flush=True)
            started = time.perf_counter()
            await backend.commit(state, expected)
            print(f"done {state.state_id} {time.perf_counter() - started:.4f}", flush=True)
            expected = state.state_id
    finally:
        await backend.close()


def main(argv: list[str]) -> None:
    """Parse the arguments and run on the requested event loop."""
    parser = argparse.ArgumentParser()
    parser.add_argument("backend", choices=("sqlite", "duckdb"))
    parser.add_argument("path")
    parser.add_argument("vrps", type=int)
    parser.add_argument("--loop", default="asyncio", choices=("asyncio", "trio"))
    parser.add_argument("--max", type=int, default=50, help="stop after this many commits")
    args = parser.parse_args(argv)
    # Import what open and run would import, before the parent says go.
    importlib.import_module(args.loop)
    if args.backend == "duckdb":
        importlib.import_module("duckdb")
    start = sys.stdin.readline().split()
    if start:
        anyio.run(run, args, int(start[0]), parse_id(start[1]), backend=args.loop)


if __name__ == "__main__":
    main(sys.argv[1:])
