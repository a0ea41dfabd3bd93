"""`Snapshot` and `SnapshotBuilder`: canonical content, checked against a naive set model."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snapshot.model import Aspa, RouterKey, Vrp
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE, join_sorted, split_keys
from snapshot.snapshot import EMPTY, Snapshot, SnapshotBuilder
from tests.snapshot.strategies import (
    FEW,
    SETTINGS,
    Records,
    model_of,
    model_of_records,
    order_tuple,
    records,
    snapshots,
    v4_keys,
    v6_keys,
)

ROOT = Path(__file__).resolve().parents[2]

V1 = Vrp.parse("192.0.2.0/24", 24, 64496)
V2 = Vrp.parse("198.51.100.0/22", 24, 64497)
V6 = Vrp.parse("2001:db8::/32", 48, 64496)
RK1 = RouterKey(bytes(20), 64496, b"\x30\x01")
RK2 = RouterKey(b"\x01" * 20, 64496, b"\x30")
RK3 = RouterKey(bytes(20), 64497, b"\xff")


# ---------------------------------------------------------------- building


def test_identical_vrps_from_several_sources_are_one() -> None:
    """The same VRP from several TAs (or written differently) is stored once."""
    same = [
        V1,
        Vrp.parse("192.0.2.0/24", None, 64496),
        Vrp(ipaddress.IPv4Network("192.0.2.0/24"), 24, 64496),
        Vrp.from_key(V1.key()),
    ]
    snap = Snapshot.build([*same, V6, V6])
    assert snap.v4_count == 1
    assert snap.v6_count == 1
    assert snap.vrp_count == 2
    assert list(snap.vrps()) == [V1, V6]


def test_vrps_differing_in_one_field_are_distinct() -> None:
    base = ("192.0.2.0/24", 24, 64496)
    variants = [
        Vrp.parse(*base),
        Vrp.parse("192.0.2.0/24", 25, 64496),
        Vrp.parse("192.0.2.0/25", 25, 64496),
        Vrp.parse("192.0.2.0/24", 24, 64497),
        Vrp.parse("192.0.3.0/24", 24, 64496),
    ]
    assert Snapshot.build(variants).v4_count == len(variants)


def test_builder_fast_paths_equal_add_vrp() -> None:
    fast = SnapshotBuilder()
    fast.add_v4(0xC000_0200, 24, 24, 64496)
    fast.add_v6(0x2001_0DB8 << 96, 32, 48, 64496)
    slow = SnapshotBuilder()
    slow.add_vrp(V1)
    slow.add_vrp(V6)
    assert fast.build() == slow.build()
    assert len(fast) == 2


@pytest.mark.parametrize(
    ("aspas", "expected"),
    [
        ([Aspa(1, (2,)), Aspa(1, (3,))], Aspa(1, (2, 3))),
        ([Aspa(1, (3, 2)), Aspa(1, (2, 4)), Aspa(1, (4,))], Aspa(1, (2, 3, 4))),
        ([Aspa(1, (0,)), Aspa(1, (5,))], Aspa(1, (5,))),  # AS0 dropped once others exist
        ([Aspa(1, (5,)), Aspa(1, (0,))], Aspa(1, (5,))),
        ([Aspa(1, (0,)), Aspa(1, (0,))], Aspa(1, (0,))),  # AS0 alone is kept
        ([Aspa(1, (0,))], Aspa(1, (0,))),
    ],
)
def test_aspas_merged_per_customer(aspas: list[Aspa], expected: Aspa) -> None:
    snap = Snapshot.build(aspas=aspas)
    assert snap.aspas == (expected,)
    assert snap.aspa_for(1) == expected


def test_aspas_sorted_by_customer_one_per_customer() -> None:
    snap = Snapshot.build(
        aspas=[Aspa(2**32 - 1, (1,)), Aspa(7, (1,)), Aspa(256, (9,)), Aspa(7, (2,))]
    )
    assert [a.customer for a in snap.aspas] == [7, 256, 2**32 - 1]
    assert snap.aspa_for(7) == Aspa(7, (1, 2))
    assert snap.aspa_for(256) == Aspa(256, (9,))
    assert snap.aspa_for(8) is None
    assert snap.aspa_for(0) is None


def test_router_keys_sorted_and_unique() -> None:
    snap = Snapshot.build(router_keys=[RK2, RK3, RK1, RK3, RouterKey(bytes(20), 64497, b"\xff")])
    # same SKI: the 1-octet SPKI (RK3) before the 2-octet one (RK1); RK2's SKI is larger
    assert snap.router_keys == (RK3, RK1, RK2)


def test_snapshot_rejects_partial_keys() -> None:
    with pytest.raises(ValueError, match="whole keys"):
        Snapshot(bytes(V4_KEY_SIZE + 1))
    with pytest.raises(ValueError, match="whole keys"):
        Snapshot(b"", bytes(V6_KEY_SIZE - 1))


@SETTINGS
@given(records())
def test_build_matches_naive_model(recs: Records) -> None:
    snap = recs.build()
    assert model_of(snap) == model_of_records(recs)
    # canonical layout: strictly descending keys, no duplicates
    for keys in (v4_keys(snap.v4), v6_keys(snap.v6)):
        assert keys == sorted(set(keys), reverse=True)
    assert all(len(k) == V4_KEY_SIZE for k in v4_keys(snap.v4))
    rk = [k.sort_key() for k in snap.router_keys]
    assert rk == sorted(set(rk))
    customers = [a.customer for a in snap.aspas]
    assert customers == sorted(set(customers))
    for aspa in snap.aspas:
        assert list(aspa.providers) == sorted(set(aspa.providers))
        assert aspa.providers == (0,) or 0 not in aspa.providers


@FEW
@given(records(), st.data())
def test_build_is_order_independent(recs: Records, data: st.DataObject) -> None:
    other = Snapshot.build(
        data.draw(st.permutations(recs.vrps)),
        data.draw(st.permutations(recs.aspas)),
        data.draw(st.permutations(recs.router_keys)),
    )
    snap = recs.build()
    assert other == snap
    assert hash(other) == hash(snap)
    assert other.digest() == snap.digest()


# ---------------------------------------------------------------- views


@FEW
@given(records())
def test_vrps_round_trip_and_order(recs: Records) -> None:
    snap = recs.build()
    out = list(snap.vrps())
    assert set(out) == set(recs.vrps)
    assert len(out) == len(set(recs.vrps)) == snap.vrp_count
    v4 = [v for v in out if v.is_ipv4]
    v6 = [v for v in out if not v.is_ipv4]
    assert out == v4 + v6  # IPv4 first
    assert v4 == sorted(v4, key=order_tuple, reverse=True)
    assert v6 == sorted(v6, key=order_tuple, reverse=True)
    assert Snapshot.build(out, snap.aspas, snap.router_keys) == snap


@FEW
@given(records())
def test_counts(recs: Records) -> None:
    snap = recs.build()
    model = model_of_records(recs)
    n4 = sum(1 for v in model.vrps if v.is_ipv4)
    expected = {
        "vrp_v4": n4,
        "vrp_v6": len(model.vrps) - n4,
        "router_key": len(model.router_keys),
        "aspa": len(model.aspas),
    }
    assert snap.counts() == expected
    assert (snap.v4_count, snap.v6_count) == (n4, len(model.vrps) - n4)
    assert snap.vrp_count == len(model.vrps)
    assert snap.is_empty() == (not any(expected.values()))
    assert repr(snap) == (
        f"Snapshot(v4={n4}, v6={len(model.vrps) - n4}, "
        f"router_keys={len(model.router_keys)}, aspas={len(model.aspas)})"
    )


def test_empty() -> None:
    assert EMPTY.is_empty()
    assert Snapshot() == EMPTY
    assert Snapshot.build() == EMPTY
    assert SnapshotBuilder().build() == EMPTY
    assert EMPTY.counts() == {"vrp_v4": 0, "vrp_v6": 0, "router_key": 0, "aspa": 0}
    assert list(EMPTY.vrps()) == []
    for snap in (
        Snapshot.build([V1]),
        Snapshot.build([V6]),
        Snapshot.build(router_keys=[RK1]),
        Snapshot.build(aspas=[Aspa(1, (0,))]),
    ):
        assert not snap.is_empty()


# ---------------------------------------------------------------- equality and digest


def test_equality_is_by_content() -> None:
    a = Snapshot.build([V1, V2, V6], [Aspa(1, (2,))], [RK1])
    b = Snapshot.build([V6, V2, V1, V1], [Aspa(1, (0, 2))], [RK1, RK1])
    assert a == b
    assert a is not b
    assert hash(a) == hash(b)
    assert a != Snapshot.build([V1, V2], [Aspa(1, (2,))], [RK1])
    assert a != Snapshot.build([V1, V2, V6], [Aspa(1, (3,))], [RK1])
    assert a != Snapshot.build([V1, V2, V6], [Aspa(1, (2,))], [RK2])
    assert a != Snapshot.build([V1, V2, V6], [Aspa(1, (2,))])
    assert a != "snapshot"
    assert a.__eq__(object()) is NotImplemented


@SETTINGS
@given(snapshots(), snapshots())
def test_digest_equal_iff_content_equal(a: Snapshot, b: Snapshot) -> None:
    assert len(a.digest()) == 32
    assert a.digest() == a.digest()
    assert (a.digest() == b.digest()) == (a == b)
    assert (a.digest() == b.digest()) == (model_of(a) == model_of(b))


def test_digest_sensitive_to_each_part() -> None:
    base = Snapshot.build([V1, V6], [Aspa(1, (2, 3))], [RK1])
    changed = [
        Snapshot.build([V2, V6], [Aspa(1, (2, 3))], [RK1]),
        Snapshot.build([V1], [Aspa(1, (2, 3))], [RK1]),
        Snapshot.build([V1, V6, V2], [Aspa(1, (2, 3))], [RK1]),
        Snapshot.build([V1, V6], [Aspa(1, (2,))], [RK1]),
        Snapshot.build([V1, V6], [Aspa(2, (2, 3))], [RK1]),
        Snapshot.build([V1, V6], [Aspa(1, (2, 3)), Aspa(2, (0,))], [RK1]),
        Snapshot.build([V1, V6], [Aspa(1, (2, 3))], [RK2]),
        Snapshot.build([V1, V6], [Aspa(1, (2, 3))], [RK1, RK3]),
        Snapshot.build([V1, V6], [], [RK1]),
        Snapshot.build([V1, V6], [Aspa(1, (2, 3))], []),
        Snapshot.build([V1.__class__(V1.prefix, 24, 64497), V6], [Aspa(1, (2, 3))], [RK1]),
    ]
    digests = {s.digest() for s in changed}
    assert base.digest() not in digests
    assert len(digests) == len(changed)


def test_digest_separates_families_and_boundaries() -> None:
    """Moving bytes between the v4 and v6 strings, or between records, changes the digest."""
    v4_only = Snapshot(bytes(V4_KEY_SIZE * 11))
    v6_only = Snapshot(b"", bytes(V6_KEY_SIZE * 5))
    assert len(v4_only.v4) == len(v6_only.v6)
    assert v4_only.digest() != v6_only.digest()
    # one ASPA with two providers vs two ASPAs: [c=1: 2, 3] vs [c=1: 2], [c=3: ...]
    one = Snapshot.build(aspas=[Aspa(1, (2, 3))])
    two = Snapshot.build(aspas=[Aspa(1, (2,)), Aspa(3, (1,))])
    assert one.digest() != two.digest()


def test_digest_stable_across_processes() -> None:
    """The digest does not depend on hash randomisation (it may be persisted or compared)."""
    code = (
        "from snapshot import Aspa, RouterKey, Snapshot, Vrp\n"
        "nets = ['0.0.0.0/0', '10.0.0.0/8', '192.0.2.0/24', '::/0', '2001:db8::/32']\n"
        "vrps = [Vrp.parse(n, None, a) for n in nets for a in (0, 1, 7, 2**32 - 1)]\n"
        "aspas = [Aspa(c, (p, 0, 9)) for c in (1, 2, 3) for p in (4, 5)]\n"
        "skis = [bytes(20), b'\\x01' * 20, bytes(19) + b'\\xff']\n"
        "spkis = [b'\\x01', b'\\xff', b'\\x00\\x00']\n"
        "keys = [RouterKey(s, a, k) for s in skis for k in spkis for a in (0, 9)]\n"
        "print(Snapshot.build(vrps, aspas, keys).digest().hex())\n"
    )
    outs = set()
    for seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        outs.add(run.stdout.strip())
    assert len(outs) == 1
    assert len(outs.pop()) == 64


# ---------------------------------------------------------------- builder update


@FEW
@given(records(), records(), records())
def test_builder_update_is_union(r1: Records, r2: Records, extra: Records) -> None:
    builder = SnapshotBuilder()
    for vrp in extra.vrps:
        builder.add_vrp(vrp)
    for aspa in extra.aspas:
        builder.add_aspa(aspa)
    for key in extra.router_keys:
        builder.add_router_key(key)
    builder.update(r1.build())
    builder.update(r2.build())
    union = Records(
        extra.vrps + r1.vrps + r2.vrps,
        extra.aspas + r1.aspas + r2.aspas,
        extra.router_keys + r1.router_keys + r2.router_keys,
    )
    built = builder.build()
    assert built == union.build()
    assert model_of(built) == model_of_records(union)
    model = model_of_records(union)
    assert len(builder) == len(model.vrps) + len(model.router_keys) + len(model.aspas)


def test_builder_update_merges_aspas_across_snapshots() -> None:
    builder = SnapshotBuilder()
    builder.update(Snapshot.build(aspas=[Aspa(5, (0,)), Aspa(6, (1,))]))
    builder.update(Snapshot.build(aspas=[Aspa(5, (3,)), Aspa(6, (0,))]))
    builder.update(Snapshot.build(aspas=[Aspa(7, (0,))]))
    assert builder.build().aspas == (Aspa(5, (3,)), Aspa(6, (1,)), Aspa(7, (0,)))


def test_builder_build_is_repeatable_and_snapshots_immutable() -> None:
    builder = SnapshotBuilder()
    builder.add_vrp(V1)
    first = builder.build()
    builder.add_vrp(V2)
    second = builder.build()
    assert first == Snapshot.build([V1])
    assert second == Snapshot.build([V1, V2])


def test_split_and_join_helpers() -> None:
    keys = [bytes([i]) * 3 for i in (5, 1, 9)]
    assert split_keys(b"".join(keys), 3) == keys
    assert join_sorted(keys, descending=True) == bytes([9] * 3 + [5] * 3 + [1] * 3)
    assert join_sorted(keys, descending=False) == bytes([1] * 3 + [5] * 3 + [9] * 3)
    assert split_keys(b"", 10) == []
