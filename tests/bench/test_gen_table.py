"""bench/gen_table.py: a scaled table keeps the real one, adds distinct copies in unused space.

Runs the generator as a program on the real 2023 fixture (379 VRPs, 2 ASPAs, 3 router keys)
and reads its output with our own parser, so what it writes is what rtr-serve would serve.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
from pathlib import Path

from tests.upstream.helpers import DATA
from upstream.json_format import parse_export

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = DATA / "rpkilog/fixtures/roa_test.rpkiclient2023_json"
UNUSED_V4 = ipaddress.IPv4Network("224.0.0.0/3")  # no real VRP lies there; IPv4 copies do
USED_V6 = ipaddress.IPv6Network("2000::/4")  # every real IPv6 VRP lies there; no copy does


def generate(tmp_path: Path, *extra: str) -> dict[str, object]:
    out = tmp_path / "scaled.json"
    command = [sys.executable, str(ROOT / "bench/gen_table.py"), str(out), "--source", str(FIXTURE)]
    subprocess.run([*command, *extra], check=True, capture_output=True, timeout=120)
    doc: dict[str, object] = json.loads(out.read_text())
    return doc


def test_the_scaled_table_has_the_counts_asked_and_keeps_every_real_entry(tmp_path: Path) -> None:
    real = json.loads(FIXTURE.read_text())
    doc = generate(tmp_path, "--vrps", "1000", "--aspas", "7")
    roas = doc["roas"]
    assert isinstance(roas, list)
    snapshot = parse_export((tmp_path / "scaled.json").read_bytes()).snapshot_at(1_696_000_000)
    counts = snapshot.counts()
    assert counts["vrp_v4"] + counts["vrp_v6"] == 1000
    assert counts["aspa"] == 7
    assert counts["router_key"] == len(real["bgpsec_keys"])
    # Every real entry is kept; the copies lie outside the real space, with real shapes.
    real_shapes = {
        (ipaddress.ip_network(r["prefix"]).prefixlen, r["maxLength"], r["asn"])
        for r in real["roas"]
    }
    real_keys = {(r["prefix"], r["maxLength"], r["asn"]) for r in real["roas"]}
    copies = [r for r in roas if (r["prefix"], r["maxLength"], r["asn"]) not in real_keys]
    assert len(copies) == 1000 - len(real["roas"])
    for roa in copies:
        net = ipaddress.ip_network(roa["prefix"])
        if isinstance(net, ipaddress.IPv4Network):
            assert net.subnet_of(UNUSED_V4)
        else:
            assert not net.subnet_of(USED_V6)
        assert (net.prefixlen, roa["maxLength"], roa["asn"]) in real_shapes


def test_the_next_table_announces_and_withdraws_what_it_was_asked(tmp_path: Path) -> None:
    later = tmp_path / "later.json"
    generate(
        tmp_path,
        "--vrps",
        "500",
        "--aspas",
        "2",
        "--next",
        str(later),
        "--add",
        "4",
        "--remove",
        "3",
    )
    now = parse_export((tmp_path / "scaled.json").read_bytes()).snapshot_at(1_696_000_000)
    then = parse_export(later.read_bytes()).snapshot_at(1_696_000_000)
    before, after = set(now.vrps()), set(then.vrps())
    assert (len(after - before), len(before - after)) == (4, 3)


def test_shift_to_now_keeps_every_entry_valid(tmp_path: Path) -> None:
    import time

    doc = generate(tmp_path, "--vrps", "400", "--aspas", "2", "--shift-to-now")
    snapshot = parse_export((tmp_path / "scaled.json").read_bytes()).snapshot_at(int(time.time()))
    assert snapshot.counts()["vrp_v4"] + snapshot.counts()["vrp_v6"] == 400
    assert isinstance(doc["metadata"], dict)
