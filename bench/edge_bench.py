"""Benchmark (run by hand): an rtr-serve edge following an rtr-serve core over RTR.

The core serves a table made by ``bench/gen_table.py`` (the real export scaled to ``--vrps``,
1.0 M by default) from a file it watches; the edge's only source is the core
(``--source rtr://127.0.0.1:PORT``). One synced router on each (a Serial Query at its current
serial) waits for the next serial; the core's export is then replaced by its successor
(``--next``: 9 VRPs added, 6 withdrawn), and the figure is how long after the core's router read
the new serial the edge's router read it too (the issue's goal: 1 s), with both times from the
replacement and the edge's start to serving the full table::

    .venv/bin/python bench/edge_bench.py [--data DIR] [--vrps 1000000] [--aspas 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from anyio.abc import SocketStream

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.propagation import RESET_QUERY_V1, Reader, serial_query
from bench.serve_bench import TABLE, free_port, wait_serving

ROOT = Path(__file__).resolve().parent.parent


async def synced(port: int) -> tuple[SocketStream, Reader, bytes, int]:
    """A v1 router that got the full table once: its stream, reader, session id and serial."""
    stream = await anyio.connect_tcp("127.0.0.1", port)
    reader = Reader(stream)
    await stream.send(RESET_QUERY_V1)
    while True:
        pdu = await reader.next_pdu()
        if pdu[1] == 3:  # Cache Response
            session = pdu[2:4]
        if pdu[1] == 7:  # End of Data
            return stream, reader, session, int.from_bytes(pdu[8:12], "big")


async def next_serial(reader: Reader, stream: SocketStream, session: bytes, serial: int) -> float:
    """Wait for a Serial Notify, ask for the delta; when a serial other than ``serial`` came."""
    while True:
        pdu = await reader.next_pdu()
        if pdu[1] != 0:
            continue
        await stream.send(serial_query(session, serial))
        got, reset = await reader.end_of_data()
        if reset:
            await stream.send(RESET_QUERY_V1)
            got, _ = await reader.end_of_data()
        if got != serial:
            return time.monotonic()


def spawn(argv: list[str]) -> subprocess.Popen[bytes]:
    """Start one server (Popen returns at once)."""
    return subprocess.Popen(argv)


async def run(args: argparse.Namespace, tmp: Path, first: Path, successor: Path) -> None:
    """Start core and edge, then time ``args.rounds`` replacements of the core's export."""
    exe = str(Path(sys.executable).with_name("rtr-serve"))
    current = tmp / "current.json"
    shutil.copyfile(first, current)
    core_port, edge_port = free_port(), free_port()
    common = ["--log-level", "warning", "--notify-interval", "0"]
    core = spawn([exe, "--source", str(current), "--listen", f"127.0.0.1:{core_port}", *common])
    edge: subprocess.Popen[bytes] | None = None
    try:
        await wait_serving(core_port, time.monotonic() + 120, args.vrps)
        started = time.monotonic()
        edge = spawn(
            [
                exe,
                "--source",
                f"rtr://127.0.0.1:{core_port}",
                "--listen",
                f"127.0.0.1:{edge_port}",
                *common,
            ]
        )
        _, came = await wait_serving(edge_port, time.monotonic() + 120, args.vrps)
        print(f"edge start to serving the full table: {came - started:.2f} s")
        files = [successor, first]
        for round_ in range(args.rounds):
            core_router = await synced(core_port)
            edge_router = await synced(edge_port)
            part = tmp / "current.part"
            shutil.copyfile(files[round_ % 2], part)
            replaced = time.monotonic()
            part.replace(current)
            times: dict[str, float] = {}

            async def wait(
                name: str,
                router: tuple[SocketStream, Reader, bytes, int],
                times: dict[str, float] = times,
            ) -> None:
                stream, reader, session, serial = router
                times[name] = await next_serial(reader, stream, session, serial)

            with anyio.fail_after(120):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(wait, "core", core_router)
                    tg.start_soon(wait, "edge", edge_router)
            for stream, *_ in (core_router, edge_router):
                await stream.aclose()
            print(
                f"round {round_ + 1}: core {times['core'] - replaced:.2f} s, edge "
                f"{times['edge'] - replaced:.2f} s after the replacement; the edge "
                f"{times['edge'] - times['core']:.2f} s after the core"
            )
    finally:
        for proc in (edge, core):
            if proc is not None:
                proc.terminate()
                proc.wait(10)


def main() -> int:
    """Make the tables, run the rounds, print the times."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared/data")
    parser.add_argument("--vrps", type=int, default=1_000_000)
    parser.add_argument("--aspas", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rtr-edge-bench-"))
    first, successor = tmp / "first.json", tmp / "next.json"
    make = [str(ROOT / "bench/gen_table.py"), str(first), "--shift-to-now", "--next"]
    make += [str(successor), "--vrps", str(args.vrps), "--aspas", str(args.aspas)]
    make += ["--source", str(args.data / TABLE)]
    subprocess.run([sys.executable, *make], check=True)
    try:
        anyio.run(run, args, tmp, first, successor)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
