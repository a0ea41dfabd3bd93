"""Benchmark (run by hand): rtr-serve against StayRTR serving the real table to RTR v1 clients.

Both servers get the same current copy of the real table (made with ../shared/tools/
shift_times.py, since StayRTR drops expired entries) and the same client, in the same run:

* start-to-serving: process start until a Reset Query returns the whole table;
* one full v1 dump (best of 3), then 10 and 50 concurrent full dumps (wall time);
* peak RSS of the server process (VmHWM);
* rtr-serve only: memory per idle session (1,000 connections that asked a Serial Query at the
  current serial, got their empty answer, and stay: negotiated, holding no reply), measured
  over a second 1,000 after a first unmeasured 1,000;
* propagation: ``--routers`` (300) synced routers, the export replaced by its successor
  (``bench/gen_table.py --next``: 9 VRPs added, 6 withdrawn), until every router has read the
  new serial (`bench.propagation`); both servers look at the file every second (``--poll-interval
  1``, StayRTR ``-refresh 1``), rtr-serve also watches it (inotify);
* rtr-serve only: recovery, ``--state`` on SQLite and DuckDB (``bench/state_bench.py``): process
  start until a Reset Query returns the table, the export gone (StayRTR keeps no state: its
  figure to compare is its start).

    .venv/bin/python bench/serve_bench.py [--data DIR] [--skip-stayrtr] [--idle 1000]
        [--routers 300] [--no-recovery] [--vrps N --aspas M]

``--vrps N`` serves a table scaled by ``bench/gen_table.py`` (the real one's shapes, N VRPs and
M ASPAs, times shifted to now) instead of the real table.

Needs StayRTR from Debian (`apt-get install stayrtr`). Prints a table and the ratios.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from anyio.abc import SocketStream

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.propagation import RESET_QUERY_V1, Propagation, propagation, serial_query

ROOT = Path(__file__).resolve().parent.parent
TABLE = "rpkilog/rpkiclient_summary_20250720T093135Z.json.bz2"
EXPECTED_VRPS = 723_521


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def count_pdus(data: bytes) -> dict[int, int]:
    """PDU counts by type, walking the Length fields."""
    counts: dict[int, int] = {}
    offset = 0
    while offset < len(data):
        pdu_type = data[offset + 1]
        counts[pdu_type] = counts.get(pdu_type, 0) + 1
        offset += int.from_bytes(data[offset + 4 : offset + 8], "big")
    return counts


async def dump(port: int, *, keep: bool = False) -> tuple[int, bytes]:
    """One Reset Query at v1; returns (bytes received, the bytes when ``keep``)."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(RESET_QUERY_V1)
        return await read_response(stream, keep=keep)


async def read_response(stream: SocketStream, *, keep: bool) -> tuple[int, bytes]:
    """Read one reply: until a v1 End of Data PDU ends the buffer, or one Error Report.

    Only the tail is checked for End of Data (walking 723k PDUs would cost the client more
    than the server); the caller counts PDUs where it matters.
    """
    chunks: list[bytes] = []
    total = 0
    head = b""
    tail = b""
    while True:
        chunk = await stream.receive(1 << 20)
        total += len(chunk)
        if keep or len(head) < 8:
            chunks.append(chunk)
        if len(head) < 8:
            head = b"".join(chunks)[:8]
        if len(head) >= 8 and head[1] == 10:  # an Error Report (e.g. No Data Available)
            data = b"".join(chunks)
            if len(data) >= int.from_bytes(head[4:8], "big"):
                return total, data
            continue
        tail = (tail + chunk)[-24:]
        if len(tail) == 24 and tail[1] == 7 and tail[4:8] == b"\x00\x00\x00\x18":
            return total, b"".join(chunks) if keep else b""


#: Sessions opened before the idle measurement (enough to start the server's collector).
WARM_UP = 2000


@dataclass
class Result:
    """Measurements of one server."""

    name: str
    start_to_serving: float = 0.0
    one_dump: float = 0.0
    concurrent: dict[int, float] = field(default_factory=dict)
    peak_rss_mib: float = 0.0
    idle_kib_per_session: float | None = None
    propagation: Propagation | None = None
    recovery: dict[str, float] = field(default_factory=dict)


def rss_kib(pid: int, key: str = "VmRSS") -> int:
    """A memory figure of process ``pid`` from /proc (KiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


async def wait_serving(port: int, deadline: float, expected: int) -> tuple[bytes, float]:
    """Retry Reset Queries until the whole table comes back: that reply, and when it had come.

    The time is taken when its last byte was read, before this client counts its PDUs (a walk
    over every PDU in Python, a few tenths of a second for a million).
    """
    while time.monotonic() < deadline:
        try:
            _, data = await dump(port, keep=True)
        except OSError:
            await anyio.sleep(0.02)
            continue
        came = time.monotonic()
        counts = count_pdus(data)
        if counts.get(4, 0) + counts.get(6, 0) == expected:
            return data, came
        await anyio.sleep(0.02)
    raise TimeoutError("server did not serve the full table in time")


@dataclass(frozen=True)
class Plan:
    """What to measure on each server."""

    expected: int
    idle: int
    routers: int
    #: Replaces the served export by its successor (for the propagation).
    swap: Callable[[], None]


async def measure(name: str, start: Callable[[int], subprocess.Popen[bytes]], plan: Plan) -> Result:
    """Start one server and measure it."""
    expected, idle = plan.expected, plan.idle
    result = Result(name)
    port = free_port()
    t0 = time.monotonic()
    proc = start(port)
    try:
        data, came = await wait_serving(port, t0 + 120, expected)
        result.start_to_serving = came - t0
        serial = int.from_bytes(data[-16:-12], "big")  # the End of Data's serial
        session = data[2:4]  # the Cache Response's session id
        if idle:
            # First, so that no dump's transient buffers are released while it measures.
            query = serial_query(session, serial)
            result.idle_kib_per_session = await idle_sessions(proc.pid, port, idle, query)
        best = float("inf")
        for _ in range(3):
            t = time.monotonic()
            _, data = await dump(port, keep=True)
            best = min(best, time.monotonic() - t)
        counts = count_pdus(data)
        assert counts.get(4, 0) + counts.get(6, 0) == expected, counts
        result.one_dump = best
        for n in (10, 50):
            t = time.monotonic()
            async with anyio.create_task_group() as tg:
                for _ in range(n):
                    tg.start_soon(dump, port)
            result.concurrent[n] = time.monotonic() - t
        if plan.routers:
            result.propagation = await propagation(port, plan.routers, session, serial, plan.swap)
        result.peak_rss_mib = rss_kib(proc.pid, "VmHWM") / 1024
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    return result


async def settled_rss(pid: int, *, within: float = 30.0) -> int:
    """VmRSS once it stayed within 256 KiB for 2 s (memory the start-up frees is released late)."""
    deadline = time.monotonic() + within
    readings = [rss_kib(pid)]
    while time.monotonic() < deadline:
        await anyio.sleep(0.5)
        readings.append(rss_kib(pid))
        last = readings[-5:]
        if len(last) == 5 and max(last) - min(last) <= 256:
            return last[-1]
    return readings[-1]


async def idle_sessions(pid: int, port: int, count: int, query: bytes) -> float:
    """Open ``count`` sessions that each send ``query`` and then stay idle; KiB per session.

    ``query`` is a Serial Query at the current serial: its answer (Cache Response, End of Data)
    negotiates the session without a full dump, whose transient buffers would move the RSS
    more than the sessions do. A first ``count`` sessions are opened unmeasured: their
    allocations start the server's cyclic collector, which frees the start-up's garbage (the
    RSS fell while the first sessions opened); the figure is the growth over the second batch.
    """
    streams: list[SocketStream] = []

    async def open_sessions(n: int) -> None:
        for _ in range(n // 50):
            batch: list[SocketStream] = []

            async def one(batch: list[SocketStream] = batch) -> None:
                stream = await anyio.connect_tcp("127.0.0.1", port)
                batch.append(stream)
                await stream.send(query)
                with anyio.fail_after(30):  # a Cache Reset or silence would never end it
                    await read_response(stream, keep=False)

            async with anyio.create_task_group() as tg:
                for _ in range(50):
                    tg.start_soon(one)
            streams.extend(batch)

    try:
        await open_sessions(min(count, WARM_UP))  # not measured
        before = await settled_rss(pid)
        await open_sessions(count)
        after = await settled_rss(pid)
    finally:
        for stream in streams:
            await stream.aclose()
    return (after - before) / count


def main() -> int:
    """Run the comparison and print the table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared/data")
    parser.add_argument("--skip-stayrtr", action="store_true")
    parser.add_argument("--idle", type=int, default=1000, help="idle sessions to open (0: skip)")
    parser.add_argument("--vrps", type=int, help="serve a table scaled to this many VRPs")
    parser.add_argument("--aspas", type=int, default=3000, help="ASPAs of the scaled table")
    parser.add_argument("--routers", type=int, default=300, help="synced routers (0: skip)")
    parser.add_argument("--no-recovery", action="store_true", help="skip the --state recovery")
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    tmp = Path(tempfile.mkdtemp(prefix="rtr-bench-"))
    current = tmp / "current.json"
    first, successor = tmp / "first.json", tmp / "next.json"
    expected = EXPECTED_VRPS if args.vrps is None else args.vrps
    # The real table is the scale of itself (every entry kept); --next makes its successor.
    aspas = args.aspas if args.vrps is not None else -1
    make = [str(ROOT / "bench/gen_table.py"), str(first), "--shift-to-now", "--next"]
    make += [str(successor), "--vrps", str(expected), "--aspas", str(aspas)]
    make += ["--source", str(args.data / TABLE)]
    subprocess.run([sys.executable, *make], check=True)

    def fresh() -> None:
        """The first table served again (each server starts on it)."""
        shutil.copyfile(first, tmp / "current.part")
        (tmp / "current.part").replace(current)

    def swap() -> None:
        shutil.copyfile(successor, tmp / "next.part")
        (tmp / "next.part").replace(current)

    plan = Plan(expected, args.idle, args.routers, swap)

    # The idle sessions, their warm-up and the routers at once, with room for the dumps.
    connections = max(5000, args.idle + min(args.idle, WARM_UP) + args.routers + 100)

    def start_ours(port: int) -> subprocess.Popen[bytes]:
        exe = Path(sys.executable).with_name("rtr-serve")
        return subprocess.Popen(
            [
                str(exe),
                "--source",
                str(current),
                "--listen",
                f"127.0.0.1:{port}",
                "--log-level",
                "warning",
                "--poll-interval",
                "1",
                # All bench clients come from 127.0.0.1.
                "--max-per-ip",
                str(connections),
                "--max-connections",
                str(connections),
            ],
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard)),  # noqa: PLW1509
        )

    def start_stayrtr(port: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                "stayrtr",
                "-bind",
                f"127.0.0.1:{port}",
                "-cache",
                str(current),
                "-refresh",
                "1",
                "-metrics.addr",
                f"127.0.0.1:{free_port()}",
                "-protocol",
                "1",
                "-loglevel",
                "error",
                "-log.verbose=false",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    fresh()
    results = [anyio.run(measure, "rtr-serve", start_ours, plan)]
    if not args.no_recovery:
        from bench.state_bench import recovery_of

        for backend in ("sqlite", "duckdb"):
            fresh()
            results[0].recovery[backend] = anyio.run(recovery_of, current, backend, tmp, expected)
    if not args.skip_stayrtr:
        if shutil.which("stayrtr") is None:
            print("stayrtr not installed (apt-get install stayrtr)")
            return 2
        fresh()
        # No propagation: StayRTR 0.5.1 moves its serial on at every refresh of an unchanged
        # export with router keys ("New update to old state ... (old N+2 - new N)"), so no
        # serial tells when it took the replacement.
        theirs_plan = Plan(expected, 0, 0, swap)
        results.append(anyio.run(measure, "stayrtr", start_stayrtr, theirs_plan))
    shutil.rmtree(tmp, ignore_errors=True)
    report(results, args.idle)
    return 0


def report(results: list[Result], idle: int) -> None:
    """Print the table and the ratios."""
    print(
        f"\n{'server':<10} {'start s':>8} {'1 dump s':>9} {'10 dumps s':>11} {'50 dumps s':>11} {'peak RSS MiB':>13}"
    )
    for r in results:
        print(
            f"{r.name:<10} {r.start_to_serving:8.2f} {r.one_dump:9.3f} {r.concurrent[10]:11.2f} "
            f"{r.concurrent[50]:11.2f} {r.peak_rss_mib:13.0f}"
        )
    ours = results[0]
    if ours.idle_kib_per_session is not None:
        print(
            f"rtr-serve idle session memory: {ours.idle_kib_per_session:.1f} KiB each ({idle} sessions)"
        )
    for r in results:
        if r.propagation is not None:
            print(
                f"{r.name} propagation to every synced router: {r.propagation.total:.2f} s "
                f"from the export's replacement, {r.propagation.fanout:.2f} s from the first Notify"
            )
    for backend, seconds in ours.recovery.items():
        print(f"rtr-serve recovery from --state {backend}: {seconds:.2f} s to the full table")
    if len(results) == 2:
        theirs = results[1]
        print(
            "\nratios rtr-serve / stayrtr (issue 16 goals: start <= 0.2, propagation <= 0.07, RSS <= 0.1,"
            " 50-router <= 0.01)"
        )
        print(f"  50-router fan-out {ours.concurrent[50] / theirs.concurrent[50]:.3f}")
        print(f"  10-router fan-out {ours.concurrent[10] / theirs.concurrent[10]:.3f}")
        print(f"  one dump          {ours.one_dump / theirs.one_dump:.3f}")
        print(f"  start-to-serving  {ours.start_to_serving / theirs.start_to_serving:.3f}")
        print(f"  peak RSS          {ours.peak_rss_mib / theirs.peak_rss_mib:.3f}")
        if ours.propagation is not None and theirs.propagation:
            print(f"  propagation       {ours.propagation.total / theirs.propagation.total:.3f}")
        for backend, seconds in ours.recovery.items():
            print(
                f"  recovery {backend:<8} {seconds / theirs.start_to_serving:.3f}"
                " (against StayRTR's start: it keeps no state)"
            )


if __name__ == "__main__":
    sys.exit(main())
