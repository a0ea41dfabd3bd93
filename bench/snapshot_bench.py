"""Benchmark (run by hand, not a test): build, size, delta and full-encode time of the real table.

Loads ../shared/data/rpkilog/rpkiclient_summary_20250720T093135Z.json.bz2 and its 30-minute
successor into two Snapshots (entries evaluated at the first file's build time) and reports
build time, tracemalloc peak and retained size per Snapshot, delta time and the time to encode
the full v1 response. Checks the delta (+9/-6 VRPs) against rpkilog's independent vrpdiff file.

    .venv/bin/python bench/snapshot_bench.py [--data DIR]
"""

from __future__ import annotations

import argparse
import bz2
import gc
import json
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rtr_protocol import Timers, encode_full_response
from snapshot import Serial, Snapshot, Vrp, compute_delta
from upstream.decompress import decompress
from upstream.json_format import parse_export

FIRST = "rpkilog/rpkiclient_summary_20250720T093135Z.json.bz2"
SECOND = "rpkilog/rpkiclient_summary_20250720T100145Z.json.bz2"
VRPDIFF = "rpkilog/rpkiclient_vrpdiff_20250720T100145Z.json.bz2"
REFERENCE_TIME = 1753003893  # 2025-07-20T09:31:33Z, build time of FIRST


def load(path: Path) -> tuple[Snapshot, float, int, int]:
    """(snapshot, seconds, tracemalloc peak bytes, retained bytes) for one export.

    Timed once without tracemalloc (it slows allocation several times), then measured again.
    """
    data = decompress(path.read_bytes())
    started = time.perf_counter()
    parse_export(data).snapshot_at(REFERENCE_TIME)
    seconds = time.perf_counter() - started
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    snapshot = parse_export(data).snapshot_at(REFERENCE_TIME)
    del data
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return snapshot, seconds, peak - base, current - base


def expected_vrp_diff(path: Path) -> tuple[set[Vrp], set[Vrp]]:
    """(announced, withdrawn) at the RTR level from rpkilog's diff file."""
    doc = json.loads(bz2.decompress(path.read_bytes()))

    def vrp(roa: dict[str, object]) -> Vrp:
        return Vrp.parse(str(roa["prefix"]), int(str(roa["maxLength"])), int(str(roa["asn"])))

    new = {vrp(d["new_roa"]) for d in doc["vrp_diffs"] if d.get("verb") == "NEW"}
    gone = {vrp(d["old_roa"]) for d in doc["vrp_diffs"] if d.get("verb") == "DELETE"}
    return new, gone


def main() -> int:
    """Run the benchmark and print a report."""
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared/data"
    )
    args = parser.parse_args()
    a, a_s, a_peak, a_kept = load(args.data / FIRST)
    b, b_s, b_peak, b_kept = load(args.data / SECOND)
    mib = 1024 * 1024
    for name, snap, secs, peak, kept in (
        ("first", a, a_s, a_peak, a_kept),
        ("second", b, b_s, b_peak, b_kept),
    ):
        print(
            f"{name}: {snap!r} build {secs:.2f} s, tracemalloc peak {peak / mib:.1f} MiB, "
            f"retained {kept / mib:.1f} MiB"
        )
    started = time.perf_counter()
    delta = compute_delta(a, b)
    delta_s = time.perf_counter() - started
    counts = delta.counts()
    print(f"delta: {counts} in {delta_s:.3f} s")
    started = time.perf_counter()
    chunks = encode_full_response(a, 1, 0x1234, Serial(1), Timers())
    encode_s = time.perf_counter() - started
    print(f"full v1 encode: {sum(map(len, chunks)) / mib:.1f} MiB in {encode_s:.3f} s")
    new, gone = expected_vrp_diff(args.data / VRPDIFF)
    announced = {
        Vrp.from_key(delta.v4_announce[i : i + 10]) for i in range(0, len(delta.v4_announce), 10)
    }
    announced |= {
        Vrp.from_key(delta.v6_announce[i : i + 22]) for i in range(0, len(delta.v6_announce), 22)
    }
    withdrawn = {
        Vrp.from_key(delta.v4_withdraw[i : i + 10]) for i in range(0, len(delta.v4_withdraw), 10)
    }
    withdrawn |= {
        Vrp.from_key(delta.v6_withdraw[i : i + 22]) for i in range(0, len(delta.v6_withdraw), 22)
    }
    agree = announced == new and withdrawn == gone
    print(f"vrpdiff file: +{len(new)} / -{len(gone)}; our delta agrees: {agree}")
    ok = (
        max(a_kept, b_kept) <= 120 * mib
        and delta_s <= 1.0
        and encode_s <= 0.5
        and counts["vrp_announce"] == 9
        and counts["vrp_withdraw"] == 6
        and agree
    )
    print(
        "targets (retained <= 120 MB, delta <= 1.0 s, v1 encode <= 0.5 s, +9/-6):",
        "met" if ok else "MISSED",
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
