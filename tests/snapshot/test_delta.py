"""`compute_delta`, `compose` and `apply`, differentially against a naive set model."""

from __future__ import annotations

import pytest
from hypothesis import given

from snapshot.delta import (
    EMPTY_DELTA,
    AspaChange,
    Delta,
    DeltaMismatchError,
    apply,
    compose,
    compute_delta,
)
from snapshot.model import Aspa, RouterKey, Vrp
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE
from snapshot.snapshot import EMPTY, Snapshot
from tests.snapshot.strategies import (
    FEW,
    SETTINGS,
    model_of,
    snapshots,
    v4_keys,
    v6_keys,
    vrps_of,
)

V1 = Vrp.parse("192.0.2.0/24", 24, 64496)
V2 = Vrp.parse("198.51.100.0/24", 24, 64497)
V3 = Vrp.parse("203.0.113.0/24", 24, 64498)
V6A = Vrp.parse("2001:db8::/32", 32, 64496)
V6B = Vrp.parse("2001:db8:1::/48", 48, 64496)
RK1 = RouterKey(bytes(20), 64496, b"\x30\x01")
RK2 = RouterKey(b"\x01" * 20, 64496, b"\x30")


def announced(delta: Delta) -> set[Vrp]:
    return set(vrps_of(delta.v4_announce, V4_KEY_SIZE)) | set(
        vrps_of(delta.v6_announce, V6_KEY_SIZE)
    )


def withdrawn(delta: Delta) -> set[Vrp]:
    return set(vrps_of(delta.v4_withdraw, V4_KEY_SIZE)) | set(
        vrps_of(delta.v6_withdraw, V6_KEY_SIZE)
    )


def assert_canonical(delta: Delta) -> None:
    """Announce blobs strictly descending, withdraw blobs strictly ascending, families right."""
    for keys in (v4_keys(delta.v4_announce), v6_keys(delta.v6_announce)):
        assert keys == sorted(set(keys), reverse=True)
    for keys in (v4_keys(delta.v4_withdraw), v6_keys(delta.v6_withdraw)):
        assert keys == sorted(set(keys))
    assert all(v.is_ipv4 for v in vrps_of(delta.v4_announce + delta.v4_withdraw, V4_KEY_SIZE))
    assert not any(v.is_ipv4 for v in vrps_of(delta.v6_announce + delta.v6_withdraw, V6_KEY_SIZE))
    for keys_ in (delta.router_key_announce, delta.router_key_withdraw):
        sort_keys = [k.sort_key() for k in keys_]
        assert sort_keys == sorted(set(sort_keys))
    customers = [c.customer for c in delta.aspa]
    assert customers == sorted(set(customers))
    assert all(c.old != c.new for c in delta.aspa)


# ---------------------------------------------------------------- compute_delta


@SETTINGS
@given(snapshots(), snapshots())
def test_compute_delta_matches_naive_model(a: Snapshot, b: Snapshot) -> None:
    d = compute_delta(a, b)
    ma, mb = model_of(a), model_of(b)
    assert announced(d) == mb.vrps - ma.vrps
    assert withdrawn(d) == ma.vrps - mb.vrps
    assert set(d.router_key_announce) == mb.router_keys - ma.router_keys
    assert set(d.router_key_withdraw) == ma.router_keys - mb.router_keys
    old = {a_.customer: a_.providers for a_ in a.aspas}
    new = {b_.customer: b_.providers for b_ in b.aspas}
    expected = {
        c: (old.get(c), new.get(c)) for c in old.keys() | new.keys() if old.get(c) != new.get(c)
    }
    assert {c.customer: (c.old, c.new) for c in d.aspa} == expected
    assert_canonical(d)
    assert d.is_empty() == (a == b)
    changes = sorted(expected.items())
    assert d.aspa_announce == tuple(Aspa(c, new) for c, (_, new) in changes if new is not None)
    assert d.aspa_withdraw == tuple(c for c, (_, new) in changes if new is None)
    assert d.counts() == {
        "vrp_announce": len(mb.vrps - ma.vrps),
        "vrp_withdraw": len(ma.vrps - mb.vrps),
        "router_key_announce": len(mb.router_keys - ma.router_keys),
        "router_key_withdraw": len(ma.router_keys - mb.router_keys),
        "aspa_announce": sum(1 for _, n in expected.values() if n is not None),
        "aspa_withdraw": sum(1 for _, n in expected.values() if n is None),
    }


@SETTINGS
@given(snapshots())
def test_delta_to_self_is_empty(a: Snapshot) -> None:
    d = compute_delta(a, a)
    assert d.is_empty()
    assert d == EMPTY_DELTA
    rebuilt = Snapshot.build(a.vrps(), a.aspas, a.router_keys)
    assert compute_delta(a, rebuilt) == EMPTY_DELTA


@SETTINGS
@given(snapshots(), snapshots())
def test_apply_round_trip(a: Snapshot, b: Snapshot) -> None:
    assert apply(compute_delta(a, b), a) == b
    assert apply(compute_delta(b, a), b) == a
    assert apply(compute_delta(EMPTY, b), EMPTY) == b
    assert apply(compute_delta(a, EMPTY), a) == EMPTY


@SETTINGS
@given(snapshots(), snapshots())
def test_apply_to_wrong_base_raises(a: Snapshot, b: Snapshot) -> None:
    """Every record of a non-empty delta a→b conflicts with b itself (Error 6/7 on the wire)."""
    d = compute_delta(a, b)
    if d.is_empty():
        assert apply(d, b) == b
    else:
        with pytest.raises(DeltaMismatchError):
            apply(d, b)


def test_vrp_delta_example() -> None:
    a = Snapshot.build([V1, V2, V6A])
    b = Snapshot.build([V2, V3, V6B])
    d = compute_delta(a, b)
    assert d.v4_announce == V3.key()
    assert d.v4_withdraw == V1.key()
    assert d.v6_announce == V6B.key()
    assert d.v6_withdraw == V6A.key()
    assert d.counts()["vrp_announce"] == 2
    assert d.counts()["vrp_withdraw"] == 2


def test_announce_and_withdraw_order_example() -> None:
    a = Snapshot.build([V2])
    b = Snapshot.build([V1, V3, V6A, V6B])
    d = compute_delta(a, b)
    assert d.v4_announce == V3.key() + V1.key()  # descending: 203.0.113 before 192.0.2
    assert d.v6_announce == V6B.key() + V6A.key()
    back = compute_delta(b, a)
    assert back.v4_withdraw == V1.key() + V3.key()  # ascending
    assert back.v6_withdraw == V6A.key() + V6B.key()


def test_aspa_provider_change_is_one_change() -> None:
    """A provider change is one AspaChange: one announce (replace) on the wire, no withdraw."""
    a = Snapshot.build(aspas=[Aspa(7, (1, 2))])
    b = Snapshot.build(aspas=[Aspa(7, (2, 3))])
    d = compute_delta(a, b)
    assert d.aspa == (AspaChange(7, (1, 2), (2, 3)),)
    assert d.aspa_announce == (Aspa(7, (2, 3)),)
    assert d.aspa_withdraw == ()
    assert d.counts()["aspa_announce"] == 1
    assert d.counts()["aspa_withdraw"] == 0


def test_aspa_add_and_remove_changes() -> None:
    a = Snapshot.build(aspas=[Aspa(5, (1,)), Aspa(7, (1,))])
    b = Snapshot.build(aspas=[Aspa(7, (1,)), Aspa(9, (0,))])
    d = compute_delta(a, b)
    assert d.aspa == (AspaChange(5, (1,), None), AspaChange(9, None, (0,)))
    assert d.aspa_announce == (Aspa(9, (0,)),)
    assert d.aspa_withdraw == (5,)


def test_aspa_as0_merge_is_no_change() -> None:
    """[AS0] + [AS5] merges to [AS5]; against a plain [AS5] nothing changed."""
    a = Snapshot.build(aspas=[Aspa(1, (5,))])
    b = Snapshot.build(aspas=[Aspa(1, (0,)), Aspa(1, (5,))])
    assert compute_delta(a, b) == EMPTY_DELTA


def test_router_key_delta_example() -> None:
    a = Snapshot.build(router_keys=[RK1])
    b = Snapshot.build(router_keys=[RK2])
    d = compute_delta(a, b)
    assert d.router_key_announce == (RK2,)
    assert d.router_key_withdraw == (RK1,)
    assert d.counts() == {
        "vrp_announce": 0,
        "vrp_withdraw": 0,
        "router_key_announce": 1,
        "router_key_withdraw": 1,
        "aspa_announce": 0,
        "aspa_withdraw": 0,
    }


# ---------------------------------------------------------------- compose


@SETTINGS
@given(snapshots(), snapshots(), snapshots())
def test_compose_equals_direct_delta(a: Snapshot, b: Snapshot, c: Snapshot) -> None:
    """Composition is exact: the same Delta object as a full recomputation."""
    composed = compose(compute_delta(a, b), compute_delta(b, c))
    assert composed == compute_delta(a, c)
    assert_canonical(composed)
    assert apply(composed, a) == c


@FEW
@given(snapshots(), snapshots(), snapshots(), snapshots())
def test_compose_is_associative(a: Snapshot, b: Snapshot, c: Snapshot, d: Snapshot) -> None:
    ab, bc, cd = compute_delta(a, b), compute_delta(b, c), compute_delta(c, d)
    assert compose(compose(ab, bc), cd) == compose(ab, compose(bc, cd)) == compute_delta(a, d)


@SETTINGS
@given(snapshots(), snapshots())
def test_compose_with_empty_and_inverse(a: Snapshot, b: Snapshot) -> None:
    d = compute_delta(a, b)
    assert compose(EMPTY_DELTA, d) == d
    assert compose(d, EMPTY_DELTA) == d
    assert compose(EMPTY_DELTA, EMPTY_DELTA) == EMPTY_DELTA
    assert compose(d, compute_delta(b, a)) == EMPTY_DELTA
    assert compose(compute_delta(b, a), d) == EMPTY_DELTA


def test_announce_then_withdraw_vanishes() -> None:
    a = Snapshot.build([V1], router_keys=[RK1])
    b = Snapshot.build([V1, V2, V6A], router_keys=[RK1, RK2])
    c = Snapshot.build([V1, V3], router_keys=[RK1])
    composed = compose(compute_delta(a, b), compute_delta(b, c))
    assert composed == Delta(v4_announce=V3.key())
    assert compose(compute_delta(a, b), compute_delta(b, a)) == EMPTY_DELTA


def test_withdraw_then_reannounce_vanishes() -> None:
    a = Snapshot.build([V1, V2, V6A], router_keys=[RK1])
    b = Snapshot.build([V1])
    assert compose(compute_delta(a, b), compute_delta(b, a)) == EMPTY_DELTA


def test_aspa_change_and_reverse_vanish() -> None:
    a = Snapshot.build(aspas=[Aspa(1, (2,)), Aspa(4, (5,))])
    b = Snapshot.build(aspas=[Aspa(1, (3,)), Aspa(4, (5,))])
    assert compose(compute_delta(a, b), compute_delta(b, a)) == EMPTY_DELTA
    # added then removed
    c = Snapshot.build(aspas=[Aspa(1, (2,)), Aspa(4, (5,)), Aspa(9, (0,))])
    assert compose(compute_delta(a, c), compute_delta(c, a)) == EMPTY_DELTA
    # removed then re-added with the same providers
    d = Snapshot.build(aspas=[Aspa(4, (5,))])
    assert compose(compute_delta(a, d), compute_delta(d, a)) == EMPTY_DELTA


def test_aspa_changes_chain_into_one() -> None:
    a = Snapshot.build(aspas=[Aspa(1, (2,))])
    b = Snapshot.build(aspas=[Aspa(1, (3,))])
    c = Snapshot.build(aspas=[Aspa(1, (3, 4))])
    empty = Snapshot.build()
    assert compose(compute_delta(a, b), compute_delta(b, c)).aspa == (AspaChange(1, (2,), (3, 4)),)
    # removed then re-added with other providers: one replace, not withdraw + announce
    removed_readded = compose(compute_delta(a, empty), compute_delta(empty, c))
    assert removed_readded.aspa == (AspaChange(1, (2,), (3, 4)),)
    assert removed_readded.aspa_withdraw == ()
    assert removed_readded.aspa_announce == (Aspa(1, (3, 4)),)


# ---------------------------------------------------------------- apply (strict)


BASE = Snapshot.build([V1, V6A], [Aspa(1, (2,))], [RK1])


@pytest.mark.parametrize(
    "delta",
    [
        Delta(v4_withdraw=V2.key()),
        Delta(v4_announce=V1.key()),
        Delta(v4_announce=V1.key(), v4_withdraw=V1.key()),
        Delta(v6_withdraw=V6B.key()),
        Delta(v6_announce=V6A.key()),
        Delta(router_key_withdraw=(RK2,)),
        Delta(router_key_announce=(RK1,)),
        Delta(aspa=(AspaChange(1, (3,), (4,)),)),  # old providers differ
        Delta(aspa=(AspaChange(1, None, (4,)),)),  # "new" customer already present
        Delta(aspa=(AspaChange(5, (2,), None),)),  # withdraw of an absent customer
        Delta(aspa=(AspaChange(5, (2,), (3,)),)),  # replace of an absent customer
        # one bad record among good ones still fails
        Delta(v4_announce=V2.key(), v6_withdraw=V6B.key()),
    ],
)
def test_apply_rejects_mismatched_delta(delta: Delta) -> None:
    with pytest.raises(DeltaMismatchError):
        apply(delta, BASE)
    assert issubclass(DeltaMismatchError, ValueError)


def test_apply_accepts_matching_delta() -> None:
    delta = Delta(
        v4_announce=V2.key(),
        v4_withdraw=V1.key(),
        v6_announce=V6B.key(),
        router_key_announce=(RK2,),
        router_key_withdraw=(RK1,),
        aspa=(AspaChange(1, (2,), None), AspaChange(5, None, (0,))),
    )
    assert apply(delta, BASE) == Snapshot.build([V2, V6A, V6B], [Aspa(5, (0,))], [RK2])
    assert apply(EMPTY_DELTA, BASE) == BASE


def test_size_bytes_grows_with_content() -> None:
    empty = EMPTY_DELTA.size_bytes()
    assert empty > 0
    one = compute_delta(EMPTY, Snapshot.build([V1])).size_bytes()
    two = compute_delta(EMPTY, Snapshot.build([V1, V2])).size_bytes()
    assert empty < one < two
    assert compute_delta(EMPTY, Snapshot.build(aspas=[Aspa(1, (2, 3))])).size_bytes() > empty
    assert compute_delta(EMPTY, Snapshot.build(router_keys=[RK1])).size_bytes() > empty
