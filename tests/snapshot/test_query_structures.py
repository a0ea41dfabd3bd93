"""Queries write nothing (contract L-32): `Snapshot.prepare` makes the lookup structures up front.

A prepared snapshot answers from its origin index and ASPA index, one never prepared by searching
its sorted parts; both answer alike, neither query changes the snapshot, and threads querying one
snapshot at once get the answers a single thread gets.
"""

from __future__ import annotations

import ipaddress
import random
import threading
from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from snapshot.model import Aspa, IPNetwork, Vrp
from snapshot.queries import (
    Direction,
    OriginState,
    OriginValidation,
    hop_check,
    validate_origin,
    verify_as_path,
)
from snapshot.snapshot import EMPTY, Snapshot
from tests.snapshot.strategies import FEW, snapshots

THREADS = 8


def slots(snap: Snapshot) -> list[object]:
    """Every attribute of ``snap`` (what a query might write)."""
    return [getattr(snap, name) for name in Snapshot.__slots__ if name != "__weakref__"]


def table() -> Snapshot:
    """A few thousand VRPs of both families, nested prefixes included, and some ASPAs."""
    rng = random.Random(32)
    vrps = []
    for _ in range(3000):
        length = rng.randrange(8, 25)
        net = ipaddress.IPv4Network((rng.getrandbits(32) >> (32 - length) << (32 - length), length))
        vrps.append(Vrp(net, rng.randrange(length, 33), rng.choice([0, 64496, 64497, 13335])))
        wide = net.supernet(new_prefix=max(0, length - rng.randrange(1, 8)))
        vrps.append(Vrp(wide, wide.prefixlen + 2, 64496))
    for _ in range(1000):
        length = rng.randrange(16, 49)
        bits = rng.getrandbits(128) >> (128 - length) << (128 - length)
        net6 = ipaddress.IPv6Network((bits, length))
        vrps.append(Vrp(net6, rng.randrange(length, 65), rng.choice([64496, 64511])))
    aspas = [Aspa(c, (c + 1, c + 2)) for c in range(64500, 64600, 3)]
    return Snapshot.build(vrps, aspas)


def routes_of(snap: Snapshot, count: int) -> list[tuple[IPNetwork, int]]:
    rng = random.Random(6811)
    vrps = list(snap.vrps())
    chosen = rng.sample(vrps, count)
    out: list[tuple[IPNetwork, int]] = []
    for v in chosen:
        longer = min(v.prefix.max_prefixlen, v.max_length + rng.choice([0, 1]))
        out.append((ipaddress.ip_network((v.prefix.network_address, longer)), v.asn))
    # Random /24s and /48s, most of them covered by nothing.
    out += [(ipaddress.IPv4Network((rng.getrandbits(24) << 8, 24)), 64496) for _ in range(20)]
    out += [(ipaddress.IPv6Network((rng.getrandbits(48) << 80, 48)), 64496) for _ in range(20)]
    return out


def test_prepare_makes_the_structures_and_no_query_writes_anything() -> None:
    for prepared in (False, True):
        snap = table()
        if prepared:
            snap.prepare()
            index = snap.origin_index
            assert index is not None
            sizes = (len(index.v4.table), len(index.v6.table))
            copies = (dict(index.v4.table), dict(index.v6.table))
        snap.digest()  # not a query; made by prepare, kept once made
        before = slots(snap)
        for route, asn in routes_of(snap, 200):
            validate_origin(snap, route, asn)
        for customer in range(64495, 64605):
            hop_check(snap, customer, customer + 1)
            verify_as_path(snap, [customer + 1, customer], Direction.UPSTREAM)
        after = slots(snap)
        assert all(a is b for a, b in zip(before, after, strict=True)), prepared
        assert snap.prepared is prepared
        if prepared:
            assert index is not None
            assert (len(index.v4.table), len(index.v6.table)) == sizes
            assert (index.v4.table, index.v6.table) == copies


def test_prepare_is_idempotent_and_reuses_an_unchanged_family() -> None:
    first = table().prepare()
    index = first.origin_index
    assert first.prepare() is first
    assert first.origin_index is index
    assert index is not None
    # Same IPv4 keys, other IPv6 keys: the IPv4 index is taken over, the IPv6 one is new.
    second = Snapshot(first.v4, b"", first.router_keys, first.aspas).prepare(like=first)
    assert second.origin_index is not None
    assert second.origin_index.v4 is index.v4
    assert second.origin_index.v6 is not index.v6
    assert second.origin_index.v6.table == {}
    assert EMPTY.prepared  # the shared empty snapshot is prepared at import


@FEW
@given(snapshots(), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
def test_aspa_lookups_agree_prepared_or_not(snap: Snapshot, customer: int, provider: int) -> None:
    twin = Snapshot(snap.v4, snap.v6, snap.router_keys, snap.aspas).prepare()
    for c in {customer, *(a.customer for a in snap.aspas)}:
        assert snap.aspa_for(c) == twin.aspa_for(c)
        assert hop_check(snap, c, provider) is hop_check(twin, c, provider)
    assert not snap.prepared


def run_threads(work: Callable[[], list[OriginValidation]]) -> list[list[OriginValidation]]:
    """Run ``work`` in `THREADS` threads started together; their results, in thread order."""
    barrier = threading.Barrier(THREADS)
    results: list[list[OriginValidation] | None] = [None] * THREADS
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[i] = work()
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive(), "a query thread did not finish"
    assert not errors, errors
    return [r for r in results if r is not None]


def test_threads_querying_one_snapshot_get_the_single_thread_answers() -> None:
    snap = table()
    routes = routes_of(snap, 400)
    expected = [validate_origin(snap, r, a) for r, a in routes]  # unprepared: packed search
    assert {e.state for e in expected} == set(OriginState)  # a mix of outcomes
    snap.prepare()
    assert [validate_origin(snap, r, a) for r, a in routes] == expected
    before = slots(snap)
    results = run_threads(lambda: [validate_origin(snap, r, a) for r, a in routes])
    assert len(results) == THREADS
    assert all(result == expected for result in results)
    assert all(a is b for a, b in zip(before, slots(snap), strict=True))
    unprepared = Snapshot(snap.v4, snap.v6, snap.router_keys, snap.aspas)
    results = run_threads(lambda: [validate_origin(unprepared, r, a) for r, a in routes])
    assert all(result == expected for result in results)
    assert not unprepared.prepared
