"""Benchmark (run by hand): persisted state of the real table on SQLite and DuckDB.

For each backend, with the real table's times shifted to now (``shared/tools/shift_times.py``;
``--state`` refuses ``--reference-time``, which evaluates offline):

* first commit (empty file) and a replacing commit of the 723k-VRP state, through the app's
  persistence worker and the backend directly;
* database file size (with its WAL);
* recovery to serving: ``rtr-serve --state`` started as a process whose source file is gone,
  from spawn until a v1 Reset Query returns the whole table (and the in-process part: backend
  open, read with digest checks, rebuild, publish).

    .venv/bin/python bench/state_bench.py [--data DIR] [--backend sqlite --backend duckdb]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from persistence.location import StateLocation
from persistence.state import StateId
from rtr_server import __version__
from rtr_server.app import App
from rtr_server.app_config import AppConfig
from rtr_server.settings import ListenAddress, ServerSettings
from upstream.clock import SystemClock
from upstream.recovery import build_state

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.serve_bench import EXPECTED_VRPS, TABLE, count_pdus, dump, free_port

ROOT = Path(__file__).resolve().parent.parent


def file_size(path: Path) -> int:
    """The database file plus its write-ahead log, in bytes."""
    return sum(
        p.stat().st_size for p in (path, Path(f"{path}-wal"), Path(f"{path}.wal")) if p.exists()
    )


async def persist(source: Path, location: StateLocation) -> dict[str, float]:
    """Run the app until its first state is committed; then time a replacing commit."""
    config = AppConfig(
        sources=(source,),
        server=ServerSettings(listen=(ListenAddress("127.0.0.1", 0),)),
        state=location,
    )
    out: dict[str, float] = {}
    async with anyio.create_task_group() as tg:
        app = App(config, SystemClock())
        await tg.start(app.run)
        assert app.persister is not None
        with anyio.fail_after(300):
            await app.persister.flush()
        status = app.persister.status
        out["first commit (worker)"] = status.last_commit_seconds or 0.0
        assert app.client is not None
        current = app.client.get_snapshot()
        assert current is not None
        assert app.backend is not None
        assert app.state is not None
        ids = app.state.session_ids
        state = build_state(
            store_id=app.backend.store_id or "",
            state_id=StateId(1, 1000),
            config_revision=0,
            serial=app.state.serial.value,
            session_ids=(ids.v0, ids.v1, ids.v2),
            published_wall=time.time(),
            package_version=__version__,
            inputs=current.inputs,
        )
        started = time.perf_counter()
        await app.backend.commit(state, app.persister.persisted)
        out["replacing commit"] = time.perf_counter() - started
        out["VRPs"] = state.vrp_count()
        tg.cancel_scope.cancel()
    return out


async def recovery_of(source: Path, backend: str, where: Path, expected: int) -> float:
    """Persist ``source`` in a new ``backend`` state under ``where``, remove ``source``, then
    the seconds from spawning ``rtr-serve --state`` until it served the whole table."""
    location = StateLocation(backend, where / f"recovery.{backend}")
    await persist(source, location)
    await anyio.Path(source).unlink()
    return (await recover(source, location, expected))["spawn to full table"]


async def recover(
    source: Path, location: StateLocation, expected: int = EXPECTED_VRPS
) -> dict[str, float]:
    """Spawn ``rtr-serve --state`` (source gone) and time it until a full v1 table."""
    port = free_port()
    started = time.perf_counter()
    proc = subprocess.Popen(  # noqa: ASYNC220 - started once, before the timed waits
        [
            str(ROOT / ".venv/bin/rtr-serve"),
            "--source",
            str(source),
            "--state",
            str(location),
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with anyio.fail_after(120):
            while True:
                try:
                    size, data = await dump(port, keep=True)
                except OSError:
                    await anyio.sleep(0.02)
                    continue
                break
        elapsed = time.perf_counter() - started
        counts = count_pdus(data)
        vrps = counts.get(4, 0) + counts.get(6, 0)
        assert vrps == expected, vrps
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    match = re.search(r"recovered state \S+ .* in ([0-9.]+) s", err)
    return {
        "spawn to full table": elapsed,
        "in-process recovery": float(match.group(1)) if match else float("nan"),
        "table bytes": size,
    }


async def main_async(data: Path, backends: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="state-bench-") as tmp:
        for backend in backends:
            source = Path(tmp) / f"table-{backend}.json"
            shift = ROOT.parent / "shared/tools/shift_times.py"
            await anyio.run_process([sys.executable, str(shift), str(data / TABLE), str(source)])
            location = StateLocation(backend, Path(tmp) / f"state.{backend}")
            timings = await persist(source, location)
            size = file_size(location.path)
            source.unlink()  # recovery alone must serve the table
            recovery = await recover(source, location)
            print(f"{backend}:")
            for name, value in {**timings, **recovery}.items():
                print(
                    f"  {name:24} {value:12.3f}" if value < 1000 else f"  {name:24} {value:12,.0f}"
                )
            print(f"  {'file size (MiB)':24} {size / 2**20:12.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared/data")
    parser.add_argument("--backend", action="append", choices=["sqlite", "duckdb"])
    args = parser.parse_args()
    anyio.run(main_async, args.data, args.backend or ["sqlite", "duckdb"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
