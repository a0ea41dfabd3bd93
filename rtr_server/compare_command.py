"""``rtr-serve compare A B``: do two caches (or exports) hold the same set? Once, or ``--watch``.

Once: exit 0 when both hold the same VRPs, ASPAs and router keys, 1 when they differ (the
differences are printed by kind, only-in-A as ``-`` and only-in-B as ``+``), 2 when a side
cannot be read (one line on stderr) or for bad arguments (before any network activity).

``--watch S`` compares every S seconds until stopped (or ``--rounds N`` rounds), logs one line
per round and serves `rtr_server.compare_metrics` over ``--http HOST:PORT``; a side that fails
is counted and retried next round. It exits like the last round compared.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

import anyio

from rtr_server.compare_diff import Differences, compare_snapshots
from rtr_server.compare_metrics import CompareMetrics
from rtr_server.compare_sides import Side, SideError, SideState, parse_side
from rtr_server.http.server import HttpServer
from rtr_server.http.settings import HttpSettings, parse_http_address
from rtr_server.settings import ListenAddress

__all__ = ["build_compare_parser", "main"]

log = logging.getLogger("rtr_server.compare")

SAME, DIFFERENT, TROUBLE = 0, 1, 2


def build_compare_parser() -> argparse.ArgumentParser:
    """The ``rtr-serve compare`` options."""
    parser = argparse.ArgumentParser(
        prog="rtr-serve compare",
        description="Compare the data of two RTR caches or JSON exports (like StayRTR's "
        "rtrmon). Exit 0: the same set; 1: they differ; 2: a side could not be read.",
    )
    side_help = "rtr://HOST[:PORT], rtrs://HOST[:PORT], an http(s):// export URL or a file"
    parser.add_argument("a", metavar="A", help=side_help)
    parser.add_argument("b", metavar="B", help=side_help)
    parser.add_argument(
        "--max-lines",
        type=int,
        default=50,
        help="records printed at most (default 50; the counts are always complete)",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to read one side (default 60)"
    )
    parser.add_argument(
        "--reference-time",
        type=_time,
        metavar="ISO8601",
        help="evaluate the expiry of export entries at this UTC time instead of now (for "
        "old exports, like rtr-serve --reference-time)",
    )
    parser.add_argument(
        "--watch",
        type=float,
        metavar="S",
        help="compare every S seconds and keep the metrics current",
    )
    parser.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="with --watch: serve Prometheus metrics on http://HOST:PORT/metrics",
    )
    parser.add_argument(
        "--rounds", type=int, default=0, help="with --watch: stop after N rounds (0: never)"
    )
    return parser


def _time(text: str) -> float:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text}") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _notes(states: dict[str, SideState | None], sides: tuple[Side, Side]) -> list[str]:
    """One line per export side that had expired entries (they are not compared)."""
    return [
        f"note: {name.upper()} ({side.label}): {state.expired} entries had expired and are "
        "not compared (--reference-time evaluates an old export at its own time)"
        for (name, state), side in zip(states.items(), sides, strict=True)
        if state is not None and state.expired
    ]


async def _read_both(
    sides: tuple[Side, Side], within: float, reference_time: float | None
) -> tuple[dict[str, SideState | None], list[str]]:
    states: dict[str, SideState | None] = {"a": None, "b": None}
    errors: list[str] = []

    async def read(name: str, side: Side) -> None:
        try:
            states[name] = await side.read(within, reference_time)
        except SideError as exc:
            errors.append(str(exc))

    async with anyio.create_task_group() as tg:
        for name, side in zip(("a", "b"), sides, strict=True):
            tg.start_soon(read, name, side)
    return states, errors


def _print(differences: Differences, fmt: str, max_lines: int) -> None:
    if fmt == "json":
        sys.stdout.write(json.dumps(differences.as_json(), indent=1) + "\n")
        return
    if differences.same:
        sys.stdout.write("same: both sides hold the same set\n")
        return
    sys.stdout.write("\n".join(differences.lines(max_lines)) + "\n")


async def _once(sides: tuple[Side, Side], args: argparse.Namespace) -> int:
    states, errors = await _read_both(sides, args.timeout, args.reference_time)
    for line in _notes(states, sides):
        sys.stderr.write(f"rtr-serve compare: {line}\n")
    if errors:
        for line in errors:
            sys.stderr.write(f"rtr-serve compare: {line}\n")
        return TROUBLE
    a, b = states["a"], states["b"]
    assert a is not None
    assert b is not None
    differences = compare_snapshots(a.snapshot, b.snapshot)
    _print(differences, args.format, args.max_lines)
    return SAME if differences.same else DIFFERENT


def _summary(differences: Differences) -> str:
    return ", ".join(f"{k} -{a} +{b}" for k, (a, b) in differences.counts().items())


async def _watch(
    sides: tuple[Side, Side], args: argparse.Namespace, http: ListenAddress | None
) -> int:
    metrics = CompareMetrics()
    status = TROUBLE
    async with anyio.create_task_group() as tg:
        if http is not None:
            server = HttpServer(HttpSettings(http), metrics.handle)
            await tg.start(server.serve)
        done = 0
        while True:
            states, errors = await _read_both(sides, args.timeout, args.reference_time)
            differences = None
            a, b = states["a"], states["b"]
            for line in errors + _notes(states, sides):
                log.warning("%s", line)
            if a is not None and b is not None:
                differences = compare_snapshots(a.snapshot, b.snapshot)
                status = SAME if differences.same else DIFFERENT
                log.info(
                    "round %d: %s (%s)",
                    done + 1,
                    "same" if differences.same else "differ",
                    _summary(differences),
                )
            metrics.round_done(states, differences)
            done += 1
            if args.rounds and done >= args.rounds:
                break
            await anyio.sleep(args.watch)
        tg.cancel_scope.cancel()
    return status


def _check(args: argparse.Namespace) -> ListenAddress | None:
    """Refuse inconsistent options (ValueError); the metrics address, if any."""
    if args.max_lines < 0 or args.rounds < 0 or not args.timeout > 0:
        raise ValueError("--max-lines and --rounds must be >= 0, --timeout positive")
    if args.watch is not None and not args.watch > 0:
        raise ValueError("--watch must be a positive number of seconds")
    if (args.http is not None or args.rounds) and args.watch is None:
        raise ValueError("--http and --rounds go with --watch")
    return None if args.http is None else parse_http_address(args.http)


def main(argv: Sequence[str]) -> int:
    """Run ``rtr-serve compare``; returns the exit status."""
    parser = build_compare_parser()
    args = parser.parse_args(argv)
    try:
        sides = (parse_side(args.a), parse_side(args.b))
        http = _check(args)
    except ValueError as exc:
        parser.error(str(exc))
    if args.watch is None:
        return anyio.run(_once, sides, args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        return anyio.run(_watch, sides, args, http)
    except KeyboardInterrupt:
        return TROUBLE
    except OSError as exc:
        sys.stderr.write(f"rtr-serve compare: cannot serve metrics: {exc}\n")
        return TROUBLE
