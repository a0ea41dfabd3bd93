"""Real validator exports from ../shared/data (read in place, never copied into the repository)."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import pytest

from snapshot.model import Aspa, RouterKey, Vrp
from snapshot.packed import split_keys
from snapshot.snapshot import Snapshot
from tests.upstream.helpers import DATA, ts
from upstream.decompress import decompress
from upstream.file_source import load_file
from upstream.json_format import parse_export

RPKILOG = DATA / "rpkilog"
FIXTURES = RPKILOG / "fixtures"


def _naive_snapshot(doc: dict[str, Any]) -> Snapshot:
    """An independent reading of an rpki-client document through the model types."""
    import base64

    return Snapshot.build(
        (Vrp.parse(r["prefix"], r["maxLength"], r["asn"]) for r in doc.get("roas", [])),
        (Aspa(a["customer_asid"], tuple(a["providers"])) for a in doc.get("aspas", [])),
        (
            RouterKey(bytes.fromhex(k["ski"]), k["asn"], base64.b64decode(k["pubkey"]))
            for k in doc.get("bgpsec_keys", [])
        ),
    )


def test_rpki_client_2023_fixture() -> None:
    path = FIXTURES / "roa_test.rpkiclient2023_json"
    payload = load_file(path)
    generated = ts("2023-10-01T00:05:43Z")
    assert payload.generated == generated
    assert payload.counts() == {"vrp_v4": 8, "vrp_v6": 371, "router_key": 3, "aspa": 2}
    snap = payload.snapshot_at(generated)
    assert snap.counts() == {"vrp_v4": 8, "vrp_v6": 371, "router_key": 3, "aspa": 2}
    assert [a.customer for a in snap.aspas] == [945, 15562]
    assert sorted(k.asn for k in snap.router_keys) == [945, 15562, 15562]
    assert snap == _naive_snapshot(json.loads(path.read_bytes()))


def test_rpki_client_2021_fixture() -> None:
    path = FIXTURES / "roa_test.rpkiclient2021_json"
    payload = load_file(path)
    assert payload.generated == ts("2021-09-01T00:04:19Z")
    assert payload.counts() == {"vrp_v4": 22, "vrp_v6": 48, "router_key": 0, "aspa": 0}
    assert payload.snapshot_at(payload.generated).vrp_count == 70
    assert payload.snapshot_at(0) == _naive_snapshot(json.loads(path.read_bytes()))


def test_routinator_jsonext_fixture() -> None:
    payload = load_file(FIXTURES / "roa_test.routinator_jsonext")
    assert payload.generated == 1741556754
    assert payload.counts() == {"vrp_v4": 1, "vrp_v6": 1, "router_key": 0, "aspa": 0}
    assert payload.snapshot_at(payload.generated) == Snapshot.build(
        [Vrp.parse("1.0.0.0/24", 24, 13335), Vrp.parse("2c0f:fff0::/32", 128, 37125)]
    )
    # Each entry lives until the first of its validity end, chain validity end and stale time.
    assert list(payload.v4_expires) == [ts("2025-03-15T14:17:31Z")]
    assert list(payload.v6_expires) == [ts("2025-03-11T00:06:05Z")]


@pytest.mark.slow
def test_rpkilog_global_table() -> None:
    """The 2025-07-20 full table: 723,521 unique VRPs, 2 router keys, 100 ASPAs."""
    raw = decompress((RPKILOG / "rpkiclient_summary_20250720T093135Z.json.bz2").read_bytes())
    payload = parse_export(raw)
    build_time = 1753003893  # 2025-07-20T09:31:33Z
    assert payload.generated == build_time
    assert payload.counts() == {"vrp_v4": 580_366, "vrp_v6": 143_155, "router_key": 2, "aspa": 100}
    snap = payload.snapshot_at(build_time)
    assert snap.counts() == {"vrp_v4": 580_366, "vrp_v6": 143_155, "router_key": 2, "aspa": 100}
    assert snap.vrp_count == 723_521
    assert {k.asn for k in snap.router_keys} == {15562}

    # An independent look at the raw entries (rpki-client already de-duplicated them): a
    # sample of them is in the payload with its own expiry.
    doc = json.loads(raw)
    del raw
    roas = doc["roas"]
    assert len(roas) == doc["metadata"]["uniquevrps"] == 723_521
    expiry = dict(zip(split_keys(payload.v4, 10), payload.v4_expires, strict=True))
    expiry.update(zip(split_keys(payload.v6, 22), payload.v6_expires, strict=True))
    for r in random.Random(7).sample(roas, 500):
        assert expiry[Vrp.parse(r["prefix"], r["maxLength"], r["asn"]).key()] == r["expires"], r
    first = min(
        itertools.chain(
            (r["expires"] for r in roas),
            (a["expires"] for a in doc["aspas"]),
            (k["expires"] for k in doc["bgpsec_keys"]),
        )
    )
    assert payload.earliest_expiry_after(build_time) == first
    assert snap.aspas == _naive_snapshot({"aspas": doc["aspas"]}).aspas
    assert snap.router_keys == _naive_snapshot({"bgpsec_keys": doc["bgpsec_keys"]}).router_keys


@pytest.mark.slow
def test_rpki_client_web_per_afi_aspas() -> None:
    """2023 test-environment export: per-AFI ASPAs merged into 6,647 customers, no AS0 left."""
    raw = decompress((DATA / "rpki-client-web" / "json.gz").read_bytes())
    payload = parse_export(raw)
    snap = payload.snapshot_at(payload.generated or 0)
    assert payload.generated == ts("2023-05-04T14:52:07Z")
    assert snap.counts() == {"vrp_v4": 323_603, "vrp_v6": 100_620, "router_key": 0, "aspa": 6647}
    assert snap.vrp_count == 424_223

    doc = json.loads(raw)
    merged: dict[int, set[int]] = {}
    for afi in ("ipv4", "ipv6"):
        for entry in doc["provider_authorizations"][afi]:
            merged.setdefault(entry["customer_asid"], set()).update(entry["providers"])
    # AS0 stands for "no providers in this AFI"; 1,698 customers have it in one AFI only.
    assert sum(0 in p for p in merged.values()) == 1698
    expected = {c: tuple(sorted(p - {0} if p != {0} else p)) for c, p in merged.items()}
    assert {a.customer: a.providers for a in snap.aspas} == expected
    assert not any(0 in a.providers for a in snap.aspas)


@pytest.mark.slow
def test_rpkilog_global_table_build_and_prepare_cost() -> None:
    """What `Snapshot.prepare` adds to a build of the full table in the aggregator's build
    thread (contract L-32), and what a rebuild with unchanged VRPs saves by reusing the index."""
    import time

    from snapshot.kinds import PayloadKind
    from snapshot.slurm import EMPTY_POLICY
    from upstream.merge import Chosen, MergeCache, build_snapshot

    raw = decompress((RPKILOG / "rpkiclient_summary_20250720T093135Z.json.bz2").read_bytes())
    payload = parse_export(raw)
    del raw
    judged = 1753003893.0  # the export's build time: every entry is still valid
    chosen: Chosen = {kind: [(payload, None)] for kind in PayloadKind}
    started = time.perf_counter()
    built = build_snapshot(chosen, [(payload, None)], EMPTY_POLICY, judged, MergeCache())
    merge = time.perf_counter() - started
    snap = built.snapshot
    assert snap.vrp_count == 723_521
    assert not snap.prepared
    started = time.perf_counter()
    snap.prepare()
    prepare = time.perf_counter() - started
    # The next build changes only ASPAs: both VRP families' indexes are taken over.
    aspa_only = Snapshot(snap.v4, snap.v6, snap.router_keys, snap.aspas[1:])
    started = time.perf_counter()
    aspa_only.prepare(like=snap)
    reuse = time.perf_counter() - started
    print(
        f"build (merge + SLURM): {merge:.2f} s; prepare: {prepare:.2f} s; "
        f"prepare reusing the VRP index: {reuse * 1000:.0f} ms"
    )
    assert snap.origin_index is not None
    assert aspa_only.origin_index is not None
    assert aspa_only.origin_index.v4 is snap.origin_index.v4
    assert aspa_only.origin_index.v6 is snap.origin_index.v6
    assert prepare < 5.0  # ~0.4 s here
    assert reuse < prepare / 4
