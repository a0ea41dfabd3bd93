"""Property: building with a `MergeCache` gives exactly what building without one gives.

Random small payloads (VRPs and ASPAs with their own expiry times), chosen per kind in random
subsets, built at a random non-decreasing sequence of judged times: the cached build equals the
uncached one every time, however the choice and the time move (contract L-49).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from snapshot.kinds import PayloadKind
from snapshot.slurm import EMPTY_POLICY
from tests.upstream.helpers import dumps, roa
from upstream.json_format import parse_export
from upstream.merge import Chosen, MergeCache, build_snapshot
from upstream.payload import SourcePayload

T0 = 1_800_000_000

entry = st.tuples(st.integers(0, 7), st.integers(0, 6))  # (which prefix/customer, expiry step)


def make(entries: list[tuple[int, int]], aspas: list[tuple[int, int]]) -> SourcePayload:
    doc = {
        "roas": [roa(f"10.{i}.0.0/16", 24, 64496 + i, expires=T0 + 10 * e) for i, e in entries],
        "aspas": [
            {"customer_asid": 65000 + c, "providers": [64500 + c], "expires": T0 + 10 * e}
            for c, e in aspas
        ],
    }
    return parse_export(dumps(doc))


payloads = st.lists(
    st.builds(make, st.lists(entry, max_size=6), st.lists(entry, max_size=4)),
    min_size=1,
    max_size=3,
)
steps = st.lists(
    st.tuples(
        st.integers(0, 25),  # seconds the judged time moves on
        st.lists(st.booleans(), min_size=3, max_size=3),  # which payloads VRPs use
        st.lists(st.booleans(), min_size=3, max_size=3),  # which payloads ASPAs use
    ),
    min_size=1,
    max_size=8,
)


def pick(given: list[SourcePayload], use: list[bool]) -> list[tuple[SourcePayload, float | None]]:
    return [(p, None) for p, u in zip(given, use[: len(given)], strict=True) if u]


@settings(max_examples=150, deadline=None)
@given(payloads, steps)
def test_a_cached_build_equals_an_uncached_one(
    given_payloads: list[SourcePayload],
    moves: list[tuple[int, list[bool], list[bool]]],
) -> None:
    cache = MergeCache()
    judged = float(T0)
    everything = [(p, None) for p in given_payloads]
    for step, use_vrps, use_aspas in moves:
        judged += step
        chosen: Chosen = {
            PayloadKind.VRP: pick(given_payloads, use_vrps),
            PayloadKind.ROUTER_KEY: [],
            PayloadKind.ASPA: pick(given_payloads, use_aspas),
        }
        cached = build_snapshot(chosen, everything, EMPTY_POLICY, judged, cache)
        fresh = build_snapshot(chosen, everything, EMPTY_POLICY, judged)
        assert cached.snapshot.v4 == fresh.snapshot.v4
        assert cached.snapshot.v6 == fresh.snapshot.v6
        assert cached.snapshot.aspas == fresh.snapshot.aspas
        assert cached.usable_until == fresh.usable_until
        assert cached.next_change == fresh.next_change


def test_an_unchanged_choice_within_its_validity_is_reused_and_one_past_it_is_not() -> None:
    held = make([(1, 3)], [])  # its VRP expires at T0 + 30
    chosen: Chosen = {PayloadKind.VRP: [(held, None)], PayloadKind.ASPA: []}
    cache = MergeCache()
    build_snapshot(chosen, [(held, None)], EMPTY_POLICY, T0, cache)
    assert cache.merged == 3
    build_snapshot(chosen, [(held, None)], EMPTY_POLICY, T0 + 29, cache)
    assert (cache.merged, cache.reused) == (0, 3)
    built = build_snapshot(chosen, [(held, None)], EMPTY_POLICY, T0 + 30, cache)
    assert cache.merged == 1  # the VRPs: their entry expired
    assert built.snapshot.vrp_count == 0
