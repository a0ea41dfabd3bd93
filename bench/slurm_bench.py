"""Benchmark (run by hand, not a test): SLURM apply time on the real 723k-VRP table.

Loads ../shared/data/rpkilog/rpkiclient_summary_20250720T093135Z.json.bz2 and applies a few
policy shapes, reporting the median of several runs. With ``--verify`` each result is also
checked against a naive recomputation over `Vrp` objects (several seconds per policy).

    .venv/bin/python bench/slurm_bench.py [--data DIR] [--verify]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from snapshot import Snapshot
from snapshot.slurm import SlurmPolicy, parse_slurm
from snapshot.slurm_apply import apply_policy
from tests.slurm_docs import slurm_json
from upstream.decompress import decompress
from upstream.json_format import parse_export

TABLE = "rpkilog/rpkiclient_summary_20250720T093135Z.json.bz2"
REFERENCE_TIME = 1753003893


def document(**members: list[dict[str, Any]]) -> bytes:
    return slurm_json(**members).encode()


def policies(table: Snapshot) -> dict[str, SlurmPolicy]:
    served = list(table.vrps())[::700]  # about 1000 real prefixes spread over the table
    return {
        "typical (3 prefix filters, 2 assertions, 1 ASPA)": parse_slurm(
            document(
                prefixFilters=[
                    {"prefix": "1.1.1.0/24"},
                    {"prefix": "8.0.0.0/8", "asn": 3356},
                    {"prefix": "2001:db8::/32"},
                ],
                prefixAssertions=[
                    {"prefix": "198.51.100.0/24", "asn": 64496},
                    {"prefix": "2001:db8::/32", "asn": 64496, "maxPrefixLength": 48},
                ],
                aspaAssertions=[{"customerAsn": 64496, "providerAsns": [64497, 64498]}],
            )
        ),
        "10 ASN-only filters": parse_slurm(
            document(prefixFilters=[{"asn": a} for a in (13335, 3356, 174, 0, 6939, *range(5))])
        ),
        "1000 prefix filters + 1000 assertions (other files' shape)": parse_slurm(
            document(
                prefixFilters=[{"prefix": str(v.prefix)} for v in served[::2]],
                prefixAssertions=[
                    {"prefix": str(v.prefix.supernet(1)), "asn": 0} for v in served[1::2]
                ],
            )
        ),
        "everything (0.0.0.0/0 and ::/0)": parse_slurm(
            document(prefixFilters=[{"prefix": "0.0.0.0/0"}, {"prefix": "::/0"}])
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data"
    )
    parser.add_argument("--verify", action="store_true")
    args = parser.parse_args()
    table = parse_export(decompress((args.data / TABLE).read_bytes())).snapshot_at(REFERENCE_TIME)
    print(f"table: {table!r}")
    for name, policy in policies(table).items():
        times = []
        for _ in range(5):
            started = time.perf_counter()
            result = apply_policy(policy, table)
            times.append(time.perf_counter() - started)
        print(
            f"{name}: median {statistics.median(times) * 1000:.1f} ms "
            f"(min {min(times) * 1000:.1f}); {table.vrp_count} -> {result.vrp_count} VRPs"
        )
        if args.verify:
            kept = [v for v in table.vrps() if not any(f.matches(v) for f in policy.prefix_filters)]
            expected = Snapshot.build(kept + [a.vrp for a in policy.prefix_assertions])
            assert (result.v4, result.v6) == (expected.v4, expected.v6), name
            print("  verified against the naive recomputation")


if __name__ == "__main__":
    main()
