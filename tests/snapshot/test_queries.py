"""`snapshot.queries`: origin validation and ASPA verification against brute-force references.

Origin validation is compared with a loop over every VRP that decides coverage with
``ipaddress.subnet_of`` (the implementation masks integers through an index). ASPA verification
is compared with a model of what the draft's ramps stand for: every attestation an AS did not
make is a free boolean, and a path is Valid when it is valley-free whatever they are, Invalid
when it is valley-free for none of them, Unknown otherwise. The ramp bounds are also checked
against a literal, 1-indexed transcription of draft-23 §6.1.
"""

from __future__ import annotations

import ipaddress
import itertools
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from snapshot.model import IPNetwork, PayloadError, Vrp
from snapshot.queries import (
    AspaResult,
    Direction,
    HopResult,
    OriginState,
    OriginValidation,
    PathElement,
    RampBounds,
    SnapshotExpiredError,
    SnapshotView,
    hop_check,
    ramp_bounds,
    validate_origin,
    verify_as_path,
)
from snapshot.snapshot import Snapshot
from tests.snapshot.strategies import ASN_MAX, SETTINGS, any_vrps

VALID, INVALID, NOT_FOUND = OriginState.VALID, OriginState.INVALID, OriginState.NOT_FOUND
UP, DOWN = Direction.UPSTREAM, Direction.DOWNSTREAM
PP, NOT_PP, NO_ATT = HopResult.PROVIDER_PLUS, HopResult.NOT_PROVIDER_PLUS, HopResult.NO_ATTESTATION

RPKILOG = Path(__file__).resolve().parents[3] / "shared" / "data" / "rpkilog"


def vrp(prefix: str, max_length: int | None, asn: int) -> Vrp:
    return Vrp.parse(prefix, max_length, asn)


# ================================================================== origin validation


def naive_origin(snapshot: Snapshot, route: IPNetwork, origin: int | None) -> OriginValidation:
    """RFC 6811 §2 read directly: loop over all VRPs, coverage by ``subnet_of``."""
    matched: list[Vrp] = []
    unmatched_as: list[Vrp] = []
    unmatched_length: list[Vrp] = []
    for v in snapshot.vrps():
        if v.prefix.version != route.version:
            continue
        if not route.subnet_of(v.prefix):  # type: ignore[arg-type]  # same family, checked
            continue
        if origin is None or v.asn == 0 or v.asn != origin:
            unmatched_as.append(v)
        elif route.prefixlen > v.max_length:
            unmatched_length.append(v)
        else:
            matched.append(v)
    if matched:
        state = VALID
    elif unmatched_as or unmatched_length:
        state = INVALID
    else:
        state = NOT_FOUND

    def order(vs: list[Vrp]) -> tuple[Vrp, ...]:
        return tuple(sorted(vs, key=lambda v: (v.prefix.prefixlen, v.max_length, v.asn)))

    return OriginValidation(
        route, origin, state, order(matched), order(unmatched_as), order(unmatched_length)
    )


# Small pools: nested and sibling prefixes, so that routes are covered by several VRPs.
_V4_NETS = ["0.0.0.0/0", "10.0.0.0/8", "10.0.0.0/16", "10.1.0.0/16", "10.0.0.0/24",
            "10.0.0.128/25", "11.0.0.0/8", "192.0.2.0/24", "255.255.255.255/32"]  # fmt: skip
_V6_NETS = ["::/0", "2001:db8::/32", "2001:db8::/48", "2001:db8:1::/48", "2001:db8::/64",
            "2001:db9::/32", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"]  # fmt: skip
_ASNS = [0, 1, 64496, ASN_MAX]


def _query_vrp_pool() -> list[Vrp]:
    pool: list[Vrp] = []
    for text in _V4_NETS + _V6_NETS:
        net = ipaddress.ip_network(text)
        top = net.max_prefixlen
        for max_length in sorted({net.prefixlen, min(net.prefixlen + 1, top),
                                  min(net.prefixlen + 8, top), top}):  # fmt: skip
            pool.extend(Vrp(net, max_length, asn) for asn in _ASNS)
    return pool


QUERY_VRPS = _query_vrp_pool()
ROUTES = [ipaddress.ip_network(t) for t in _V4_NETS + _V6_NETS + [
    "10.0.0.0/25", "10.0.0.0/32", "10.0.0.129/32", "10.1.2.0/24", "10.2.0.0/16", "192.0.2.128/25",
    "172.16.0.0/12", "2001:db8::/56", "2001:db8:0:1::/64", "2001:db8::1/128", "2001:db8:1::/49",
    "2001:db8:8000::/33",
]]  # fmt: skip
ORIGINS: list[int | None] = [None, *_ASNS, 64497]


def edge_routes(v: Vrp) -> list[IPNetwork]:
    """The VRP's own prefix and its first subnets at, and one past, its max length."""
    top = v.prefix.max_prefixlen
    lengths = {v.prefix.prefixlen, v.max_length, min(v.max_length + 1, top)}
    return [ipaddress.ip_network((v.prefix.network_address, n)) for n in sorted(lengths)]


@st.composite
def pool_cases(draw: st.DrawFn) -> tuple[list[Vrp], IPNetwork, int | None]:
    """VRPs from the pool; a route from the pool or at the edges of a drawn VRP; an origin."""
    vrps = draw(st.lists(st.sampled_from(QUERY_VRPS), max_size=25))
    routes = st.sampled_from(ROUTES)
    origins = st.sampled_from(ORIGINS)
    if vrps:
        routes |= st.sampled_from(vrps).flatmap(lambda v: st.sampled_from(edge_routes(v)))
        origins |= st.sampled_from([v.asn for v in vrps])
    return vrps, draw(routes), draw(origins)


@SETTINGS
@given(pool_cases())
def test_origin_validation_matches_brute_force_on_small_pools(
    case: tuple[list[Vrp], IPNetwork, int | None],
) -> None:
    vrps, route, origin = case
    snap = Snapshot.build(vrps)  # never prepared: the packed keys are searched
    expected = naive_origin(snap, route, origin)
    assert validate_origin(snap, route, origin) == expected
    assert validate_origin(Snapshot.build(vrps).prepare(), route, origin) == expected  # indexed


@st.composite
def vrps_and_related_route(draw: st.DrawFn) -> tuple[list[Vrp], IPNetwork, int | None]:
    """Random VRPs of one family and a route sharing address bits with one of them."""
    version = draw(st.sampled_from([4, 6]))
    vrps = draw(st.lists(any_vrps(version), min_size=1, max_size=8))
    base = draw(st.sampled_from(vrps))
    bits = base.prefix.max_prefixlen
    noise = draw(st.integers(0, 2**bits - 1)) >> base.prefix.prefixlen
    address = int(base.prefix.network_address) | noise
    length = draw(st.integers(0, bits))
    address = address >> (bits - length) << (bits - length)
    route: IPNetwork = (
        ipaddress.IPv4Network((address, length))
        if version == 4
        else ipaddress.IPv6Network((address, length))
    )
    origin = draw(st.sampled_from([None, 0, base.asn, 64496]) | st.integers(0, ASN_MAX))
    return vrps, route, origin


@SETTINGS
@given(vrps_and_related_route())
def test_origin_validation_matches_brute_force_on_random_prefixes(
    case: tuple[list[Vrp], IPNetwork, int | None],
) -> None:
    vrps, route, origin = case
    snap = Snapshot.build(vrps)  # never prepared: the packed keys are searched
    expected = naive_origin(snap, route, origin)
    assert validate_origin(snap, route, origin) == expected
    assert validate_origin(Snapshot.build(vrps).prepare(), route, origin) == expected  # indexed


@SETTINGS
@given(st.lists(st.sampled_from(QUERY_VRPS), max_size=25), st.sampled_from(ORIGINS))
def test_every_vrp_validates_its_own_route(vrps: list[Vrp], origin: int | None) -> None:
    """A VRP's own prefix at its own ASN is Valid (unless AS0) and lists the VRP as matched."""
    snap = Snapshot.build(vrps)
    for v in vrps:
        result = validate_origin(snap, v.prefix, v.asn)
        if v.asn == 0:
            assert v in result.unmatched_as
        else:
            assert result.state is VALID
            assert v in result.matched


# RFC 6811 §2, one case per rule. VRP 10.0.0.0/16-24 AS64496 (the usual documentation example).
RFC6811 = Snapshot.build([vrp("10.0.0.0/16", 24, 64496)])


@pytest.mark.parametrize(
    ("prefix", "origin", "state"),
    [
        ("10.0.0.0/16", 64496, VALID),  # covered, same ASN, length == prefix length
        ("10.0.5.0/24", 64496, VALID),  # covered, length == max length
        ("10.0.5.0/25", 64496, INVALID),  # longer than max length
        ("10.0.5.0/24", 64497, INVALID),  # covered by a VRP of another AS
        ("10.0.5.0/24", None, INVALID),  # no origin (AS_SET): covered, can never match
        ("10.0.0.0/8", 64496, NOT_FOUND),  # less specific than the VRP: not covered
        ("10.1.0.0/16", 64496, NOT_FOUND),  # sibling
        ("11.0.0.0/16", None, NOT_FOUND),
        ("::/0", 64496, NOT_FOUND),  # other family
    ],
)
def test_rfc6811_rules(prefix: str, origin: int | None, state: OriginState) -> None:
    assert validate_origin(RFC6811, prefix, origin).state is state


def test_valid_wins_over_invalid_and_lists_every_covering_vrp() -> None:
    snap = Snapshot.build(
        [
            vrp("10.0.0.0/8", 8, 64497),  # other ASN
            vrp("10.0.0.0/16", 16, 64496),  # right ASN, too short max length
            vrp("10.0.0.0/16", 24, 64496),  # matches
            vrp("10.0.0.0/24", 24, 0),  # AS0
            vrp("10.0.0.0/25", 32, 64496),  # more specific than the route: not covering
        ]
    )
    result = validate_origin(snap, "10.0.0.0/24", 64496)
    assert result.state is VALID
    assert result.prefix == ipaddress.IPv4Network("10.0.0.0/24")
    assert result.origin_asn == 64496
    assert result.matched == (vrp("10.0.0.0/16", 24, 64496),)
    assert result.unmatched_as == (vrp("10.0.0.0/8", 8, 64497), vrp("10.0.0.0/24", 24, 0))
    assert result.unmatched_length == (vrp("10.0.0.0/16", 16, 64496),)


def test_as0_vrps_never_match() -> None:
    """RFC 6483 §4 / RFC 7607: an AS0 VRP only ever makes covered routes Invalid."""
    snap = Snapshot.build([vrp("192.0.2.0/24", 32, 0), vrp("2001:db8::/32", 128, 0)])
    for prefix in ("192.0.2.0/24", "192.0.2.7/32", "2001:db8::/32", "2001:db8:1::/48"):
        for origin in (0, 1, None):
            result = validate_origin(snap, prefix, origin)
            assert result.state is INVALID
            assert not result.matched
            assert not result.unmatched_length
            assert len(result.unmatched_as) == 1
    assert validate_origin(snap, "192.0.3.0/24", 0).state is NOT_FOUND


def test_max_length_boundaries_v4_and_v6() -> None:
    snap = Snapshot.build([vrp("192.0.2.0/24", 26, 64496), vrp("2001:db8::/32", 48, 64496)])
    for prefix, state in [
        ("192.0.2.0/24", VALID),
        ("192.0.2.64/26", VALID),
        ("192.0.2.64/27", INVALID),
        ("192.0.2.255/32", INVALID),
        ("2001:db8::/32", VALID),
        ("2001:db8:ffff::/48", VALID),
        ("2001:db8:ffff:8000::/49", INVALID),
        ("2001:db8::1/128", INVALID),
    ]:
        result = validate_origin(snap, prefix, 64496)
        assert result.state is state, prefix
        if state is INVALID:
            assert len(result.unmatched_length) == 1
            assert not result.unmatched_as


def test_default_route_and_host_routes() -> None:
    snap = Snapshot.build([vrp("0.0.0.0/0", 32, 1), vrp("::/0", 0, 2)])
    assert validate_origin(snap, "0.0.0.0/0", 1).state is VALID
    assert validate_origin(snap, "203.0.113.9/32", 1).state is VALID
    assert validate_origin(snap, "::/0", 2).state is VALID
    assert validate_origin(snap, "2001:db8::/32", 2).state is INVALID
    assert validate_origin(Snapshot(), "0.0.0.0/0", 1).state is NOT_FOUND


def test_prefix_input_forms_and_errors() -> None:
    net = ipaddress.IPv6Network("2001:db8::/48")
    snap = Snapshot.build([vrp("2001:db8::/32", 48, 64496)])
    assert validate_origin(snap, net, 64496) == validate_origin(snap, "2001:db8::/48", 64496)
    with pytest.raises(ValueError, match="host bits"):
        validate_origin(snap, "192.0.2.1/24", 64496)
    with pytest.raises(ValueError, match="does not appear to be"):
        validate_origin(snap, "not a prefix", 64496)
    with pytest.raises(TypeError):
        validate_origin(snap, 3232235520, 64496)  # type: ignore[arg-type]
    for bad in (-1, 2**32, True):
        with pytest.raises(PayloadError):
            validate_origin(snap, net, bad)


# ================================================================== ASPA: the draft's examples


def aspa_snapshot(aspas: Mapping[int, Sequence[int]]) -> Snapshot:
    from snapshot.model import Aspa

    return Snapshot.build(aspas=[Aspa(c, tuple(p)) for c, p in aspas.items()])


# NIST BRIO ASPA example 14 (examples #1-#4), built on the draft's §6.1 definitions. AS names:
# A 65000, B 65010 (the verifier), C 65020, D 65030, E 65040, F 65050, G 65060; E and F have
# no ASPA, G has an AS0 ASPA.
A, B, C, D, E, F, G = 65000, 65010, 65020, 65030, 65040, 65050, 65060
BRIO = aspa_snapshot({A: [C, D], B: [E], C: [F], D: [F, G], G: [0]})


@pytest.mark.parametrize(
    ("path", "bounds", "downstream"),
    [
        # path (neighbour first), (N, max_up, min_up, max_down, min_down), result of §6.3
        ([E, G, F, C, A], (5, 4, 3, 2, 1), AspaResult.UNKNOWN),
        ([E, G, D, A], (4, 3, 3, 2, 1), AspaResult.VALID),
        ([E, D, C, A], (4, 2, 2, 2, 1), AspaResult.UNKNOWN),
        ([E, G, D, C, A], (5, 2, 2, 2, 1), AspaResult.INVALID),
    ],
)
def test_brio_examples(
    path: list[int], bounds: tuple[int, int, int, int, int], downstream: AspaResult
) -> None:
    # The published tables label these results "upstream", but they are what the §6.3
    # (downstream) comparison of the listed ramps gives; upstream, max_up_ramp < N throughout.
    assert ramp_bounds(BRIO, path) == RampBounds(*bounds)
    assert verify_as_path(BRIO, path, DOWN, neighbor_as=E) is downstream
    assert verify_as_path(BRIO, path, UP, neighbor_as=E) is AspaResult.INVALID


# ================================================================== ASPA: hand-built, per branch


def test_hop_check_outcomes_and_as0() -> None:
    snap = aspa_snapshot({10: [20, 21], 30: [0], 40: [0, 41]})
    assert hop_check(snap, 10, 20) is PP
    assert hop_check(snap, 10, 21) is PP
    assert hop_check(snap, 10, 22) is NOT_PP
    assert hop_check(snap, 20, 10) is NO_ATT  # 20 has no ASPA
    assert hop_check(snap, 30, 31) is NOT_PP  # AS0 alone: no providers at all
    assert hop_check(snap, 30, 0) is NOT_PP  # AS0 is never a provider
    assert hop_check(snap, 40, 41) is PP  # AS0 next to real providers is dropped
    assert hop_check(snap, 40, 0) is NOT_PP
    assert hop_check(snap, 0, 10) is NO_ATT  # AS0 cannot hold an ASPA
    assert hop_check(snap, ASN_MAX, 10) is NO_ATT
    for bad in ((-1, 1), (1, 2**32), (True, 1), (1, 1.0)):
        with pytest.raises(PayloadError):
            hop_check(snap, *bad)


# Upstream: origin 10 -> provider 20 -> provider 30 -> (us, 30's provider or peer).
@pytest.mark.parametrize(
    ("aspas", "path", "result"),
    [
        ({10: [20], 20: [30]}, [30, 20, 10], AspaResult.VALID),
        ({10: [20]}, [30, 20, 10], AspaResult.UNKNOWN),  # 20 attests nothing
        ({20: [30]}, [30, 20, 10], AspaResult.UNKNOWN),  # 10 attests nothing
        ({10: [20], 20: [99]}, [30, 20, 10], AspaResult.INVALID),  # 30 is not 20's provider
        ({20: [99]}, [30, 20, 10], AspaResult.INVALID),  # Invalid beats missing attestations
        ({10: [20], 20: [30]}, [30, 30, 30, 20, 20, 10, 10, 10], AspaResult.VALID),  # prepends
        # Only consecutive repeats collapse: 30 -> 20 is a hop 30 never attested.
        ({10: [20], 20: [30]}, [30, 20, 30, 20, 10], AspaResult.UNKNOWN),
        ({10: [20], 20: [30], 30: [40]}, [30, 20, 30, 20, 10], AspaResult.INVALID),
        ({10: [0]}, [20, 10], AspaResult.INVALID),  # AS0 ASPA: 10 has no provider at all
        ({10: [0]}, [10], AspaResult.VALID),  # ... but may announce to its own peers
        ({}, [10], AspaResult.VALID),  # single AS: nothing to check
        ({}, [10, 10, 10], AspaResult.VALID),
        ({}, [20, 10], AspaResult.UNKNOWN),
        ({10: [20]}, [20, 10], AspaResult.VALID),
    ],
)
def test_upstream_cases(aspas: dict[int, list[int]], path: list[int], result: AspaResult) -> None:
    assert verify_as_path(aspa_snapshot(aspas), path, UP) is result


# Downstream: received from our provider 5. Up-ramp 1 -> 2 -> 3, lateral 3 - 4, down-ramp
# 4 -> 5 -> us (4 is 5's provider).
VALLEY_FREE = {1: [2], 2: [3], 3: [30], 4: [40], 5: [4]}


@pytest.mark.parametrize(
    ("aspas", "path", "result", "bounds"),
    [
        (VALLEY_FREE, [5, 4, 3, 2, 1], AspaResult.VALID, (5, 3, 3, 2, 2)),
        # 5 attests nothing: the down-ramp may be only AS 5 long.
        ({**VALLEY_FREE, 5: []}, [5, 4, 3, 2, 1], AspaResult.UNKNOWN, (5, 3, 3, 2, 1)),
        # nobody attests anything: every path of 3 or more is Unknown, never Invalid
        ({}, [5, 4, 3, 2, 1], AspaResult.UNKNOWN, (5, 5, 1, 5, 1)),
        # 3 takes the route from provider 2 and sends it up to provider 4: a leak.
        (
            {1: [2], 2: [9], 3: [2, 4], 4: [5], 5: [4]},
            [5, 4, 3, 2, 1],
            AspaResult.INVALID,
            (5, 2, 2, 2, 2),
        ),
        # Two lateral hops (2 - 3 and 3 - 4) between the apexes.
        (
            {1: [2], 2: [20], 3: [30], 4: [40], 5: [4]},
            [5, 4, 3, 2, 1],
            AspaResult.INVALID,
            (5, 2, 2, 2, 2),
        ),
        # 3 and 4 silent: 4 -> 3 -> 2 may be a down-ramp, so only Unknown.
        ({1: [2], 2: [20], 5: [4]}, [5, 4, 3, 2, 1], AspaResult.UNKNOWN, (5, 2, 2, 4, 2)),
        # Only an up-ramp (our provider 5 is the apex) and only a down-ramp.
        ({1: [2], 2: [3], 3: [4], 4: [5]}, [5, 4, 3, 2, 1], AspaResult.VALID, (5, 5, 5, 2, 1)),
        ({5: [4], 4: [3], 3: [2], 2: [1]}, [5, 4, 3, 2, 1], AspaResult.VALID, (5, 2, 1, 5, 5)),
        # Two ASes: the hop between them is the free apex hop, whatever the ASPAs say.
        ({1: [0], 2: [0]}, [2, 1], AspaResult.VALID, (2, 1, 1, 1, 1)),
        ({}, [1], AspaResult.VALID, (1, 1, 1, 1, 1)),
    ],
)
def test_downstream_cases(
    aspas: dict[int, list[int]],
    path: list[int],
    result: AspaResult,
    bounds: tuple[int, int, int, int, int],
) -> None:
    snap = aspa_snapshot({c: p for c, p in aspas.items() if p})
    assert ramp_bounds(snap, path) == RampBounds(*bounds)
    assert verify_as_path(snap, path, DOWN) is result


def test_downstream_is_never_stricter_than_upstream() -> None:
    snap = aspa_snapshot(VALLEY_FREE)
    assert verify_as_path(snap, [5, 4, 3, 2, 1], UP) is AspaResult.INVALID
    assert verify_as_path(snap, [5, 4, 3, 2, 1], DOWN) is AspaResult.VALID


@pytest.mark.parametrize("direction", [UP, DOWN])
def test_structural_checks(direction: Direction) -> None:
    snap = aspa_snapshot({10: [20], 20: [30]})
    good: list[PathElement] = [30, 20, 10]
    assert verify_as_path(snap, good, direction) is AspaResult.VALID
    assert verify_as_path(snap, [], direction) is AspaResult.INVALID  # step 1
    assert verify_as_path(snap, good, direction, neighbor_as=30) is AspaResult.VALID
    assert verify_as_path(snap, good, direction, neighbor_as=31) is AspaResult.INVALID  # step 2
    # step 3: an AS_SET anywhere, even one that would fit
    assert verify_as_path(snap, [30, 20, frozenset({10})], direction) is AspaResult.INVALID
    assert verify_as_path(snap, [30, {20, 21}, 10], direction) is AspaResult.INVALID
    assert verify_as_path(snap, [frozenset()], direction) is AspaResult.INVALID
    assert verify_as_path(snap, [frozenset({30})], direction, neighbor_as=30) is AspaResult.INVALID
    # AS0 anywhere is malformed (RFC 7607)
    assert verify_as_path(snap, [30, 20, 10, 0], direction) is AspaResult.INVALID
    assert verify_as_path(snap, [0], direction) is AspaResult.INVALID


def test_path_input_errors() -> None:
    snap = aspa_snapshot({10: [20]})
    for bad in ([20, -1], [20, 2**32], [True], ["20"], [20, [10]], [frozenset({-5})]):
        with pytest.raises(PayloadError):
            verify_as_path(snap, bad, UP)  # type: ignore[arg-type]
    with pytest.raises(PayloadError):
        verify_as_path(snap, [20, 10], UP, neighbor_as=-1)
    with pytest.raises(TypeError):
        verify_as_path(snap, [20, 10], "upstream")  # type: ignore[arg-type]
    with pytest.raises(PayloadError):
        ramp_bounds(snap, [20, frozenset({10})])  # type: ignore[list-item]
    assert ramp_bounds(snap, []) == RampBounds(0, 0, 0, 0, 0)


# ================================================================== ASPA: against a model

SMALL_ASNS = [1, 2, 3, 4, 5]


def naive_authorized(aspas: dict[int, frozenset[int]], customer: int, provider: int) -> bool | None:
    """True/False when the customer attests, None when it does not."""
    if customer not in aspas:
        return None
    return provider != 0 and provider in aspas[customer]


def model_verify(
    aspas: dict[int, frozenset[int]],
    path: Sequence[PathElement],
    direction: Direction,
    neighbor_as: int | None,
) -> AspaResult:
    """Valid iff valley-free for every truth of the unattested relations; Invalid iff for none."""
    if not path or (neighbor_as is not None and path[0] != neighbor_as):
        return AspaResult.INVALID
    asns = [e for e in path if isinstance(e, int)]
    if len(asns) < len(path) or 0 in asns:
        return AspaResult.INVALID
    ases = [asn for asn, _ in itertools.groupby(asns)][::-1]  # origin first
    pairs = [(ases[i], ases[i + 1]) for i in range(len(ases) - 1)]
    # Each unattested (customer, provider) relation is one free variable.
    free = sorted(
        {
            (c, p)
            for x, y in pairs
            for c, p in ((x, y), (y, x))
            if naive_authorized(aspas, c, p) is None
        }
    )
    outcomes = set()
    for truth in itertools.product((False, True), repeat=len(free)):
        assumed = dict(zip(free, truth, strict=True))

        def is_provider(c: int, p: int, assumed: dict[tuple[int, int], bool] = assumed) -> bool:
            known = naive_authorized(aspas, c, p)
            return assumed[c, p] if known is None else known

        up = [is_provider(x, y) for x, y in pairs]  # y is x's provider: the route went up
        down = [is_provider(y, x) for x, y in pairs]  # x is y's provider: it went down
        if direction is UP:
            outcomes.add(all(up))
        else:
            # one hop (the k-th, between the apexes) may be lateral; or none (k = len(pairs))
            outcomes.add(any(all(up[:k]) and all(down[k + 1 :]) for k in range(len(pairs) + 1)))
    if outcomes == {True}:
        return AspaResult.VALID
    if outcomes == {False}:
        return AspaResult.INVALID
    return AspaResult.UNKNOWN


def literal_bounds(aspas: dict[int, frozenset[int]], path: Sequence[int]) -> RampBounds:
    """Draft-23 §6.1 transcribed with its own 1-based indexing, A(1) the origin."""
    unique = [asn for asn, _ in itertools.groupby(path)]
    n = len(unique)

    def a(i: int) -> int:
        return unique[n - i]

    def auth(x: int, y: int) -> HopResult:
        verdict = naive_authorized(aspas, x, y)
        return NO_ATT if verdict is None else PP if verdict else NOT_PP

    max_up = min((i for i in range(1, n) if auth(a(i), a(i + 1)) is NOT_PP), default=n)
    min_up = min((i for i in range(1, n) if auth(a(i), a(i + 1)) is not PP), default=n)
    j_max = max((j for j in range(2, n + 1) if auth(a(j), a(j - 1)) is NOT_PP), default=None)
    j_min = max((j for j in range(2, n + 1) if auth(a(j), a(j - 1)) is not PP), default=None)
    max_down = n if j_max is None else n - j_max + 1
    min_down = n if j_min is None else n - j_min + 1
    return RampBounds(n, max_up, min_up, max_down, min_down)


provider_sets = st.frozensets(st.sampled_from([0, *SMALL_ASNS, 6]), min_size=1, max_size=4)
aspa_sets = st.dictionaries(
    st.sampled_from(SMALL_ASNS),
    provider_sets | st.just(frozenset({0})),  # AS0-only ASPAs often
    max_size=len(SMALL_ASNS),
)
plain_paths = st.lists(st.sampled_from(SMALL_ASNS), max_size=7)


@st.composite
def odd_paths(draw: st.DrawFn) -> tuple[list[PathElement], int | None]:
    """A plain path, sometimes with an AS_SET or AS0 put in; a neighbour AS or None."""
    path: list[PathElement] = list(draw(st.lists(st.sampled_from(SMALL_ASNS), max_size=6)))
    odd = draw(st.sampled_from(["none", "none", "set", "as0"]))
    if odd != "none":
        element: PathElement = (
            0 if odd == "as0" else draw(st.frozensets(st.sampled_from(SMALL_ASNS), max_size=2))
        )
        path.insert(draw(st.integers(0, len(path))), element)
    ends = [e for e in path[:1] + path[-1:] if isinstance(e, int)]
    neighbor = draw(st.none() | st.sampled_from(SMALL_ASNS) | st.sampled_from(ends or [1]))
    return path, neighbor


def snapshot_and_model(
    aspas: dict[int, frozenset[int]],
) -> tuple[Snapshot, dict[int, frozenset[int]]]:
    snap = aspa_snapshot({c: sorted(p) for c, p in aspas.items()})
    # The model reads the normalised provider sets (AS0 dropped next to real providers).
    return snap, {a.customer: frozenset(a.providers) for a in snap.aspas}


@SETTINGS
@given(aspa_sets, plain_paths, st.sampled_from([UP, DOWN]))
def test_verification_matches_model_on_plain_paths(
    aspas: dict[int, frozenset[int]], path: list[int], direction: Direction
) -> None:
    snap, model = snapshot_and_model(aspas)
    assert verify_as_path(snap, path, direction) is model_verify(model, path, direction, None)
    assert ramp_bounds(snap, path) == literal_bounds(model, path)


@SETTINGS
@given(aspa_sets, odd_paths(), st.sampled_from([UP, DOWN]))
def test_verification_matches_model_with_sets_as0_and_neighbour(
    aspas: dict[int, frozenset[int]],
    case: tuple[list[PathElement], int | None],
    direction: Direction,
) -> None:
    path, neighbor_as = case
    snap, model = snapshot_and_model(aspas)
    expected = model_verify(model, path, direction, neighbor_as)
    assert verify_as_path(snap, path, direction, neighbor_as=neighbor_as) is expected


@SETTINGS
@given(aspa_sets, st.sampled_from([0, *SMALL_ASNS]), st.sampled_from([0, *SMALL_ASNS, 6]))
def test_hop_check_matches_model(
    aspas: dict[int, frozenset[int]], customer: int, provider: int
) -> None:
    snap, model = snapshot_and_model(aspas)
    verdict = naive_authorized(model, customer, provider)
    assert hop_check(snap, customer, provider) is (
        NO_ATT if verdict is None else PP if verdict else NOT_PP
    )


@SETTINGS
@given(aspa_sets, plain_paths)
def test_prepending_never_changes_the_outcome(
    aspas: dict[int, frozenset[int]], path: list[int]
) -> None:
    assume(path)
    snap, _ = snapshot_and_model(aspas)
    padded = [asn for asn in path for _ in range(1 + asn % 3)]
    for direction in (UP, DOWN):
        assert verify_as_path(snap, padded, direction) is verify_as_path(snap, path, direction)


# ================================================================== expiry


QUERIES: list[tuple[str, Callable[[SnapshotView, float], object]]] = [
    ("validate_origin", lambda view, now: view.validate_origin("192.0.2.0/24", 64496, now=now)),
    ("hop_check", lambda view, now: view.hop_check(10, 20, now=now)),
    ("ramp_bounds", lambda view, now: view.ramp_bounds([20, 10], now=now)),
    ("verify_as_path", lambda view, now: view.verify_as_path([20, 10], UP, now=now)),
]
VIEW_SNAPSHOT = Snapshot.build([vrp("192.0.2.0/24", 24, 64496)])


@pytest.mark.parametrize(("name", "query"), QUERIES, ids=[name for name, _ in QUERIES])
def test_view_queries_until_usable_until_then_raise(
    name: str, query: Callable[[SnapshotView, float], object]
) -> None:
    view = SnapshotView(VIEW_SNAPSHOT, usable_until=1000.0)
    query(view, 0.0)
    query(view, 999.999)
    for now in (1000.0, 1000.5, math.inf):
        with pytest.raises(SnapshotExpiredError) as info:
            query(view, now)
        assert info.value.usable_until == 1000.0
        assert info.value.now == now
        assert "1000.0" in str(info.value)


def test_view_answers_like_the_plain_functions() -> None:
    snap = Snapshot.build([vrp("192.0.2.0/24", 24, 64496)], aspas=[])
    view = SnapshotView(snap, usable_until=None)
    assert not view.expired(1e18)
    assert view.check(1e18) is snap
    assert view.validate_origin("192.0.2.0/24", 64496, now=1e18) == validate_origin(
        snap, "192.0.2.0/24", 64496
    )
    assert view.hop_check(10, 20, now=0) is NO_ATT
    assert view.verify_as_path([20, 10], DOWN, now=0, neighbor_as=21) is AspaResult.INVALID
    assert view.ramp_bounds([20, 10], now=0) == RampBounds(2, 2, 1, 2, 1)


def test_view_rejects_nan() -> None:
    with pytest.raises(ValueError, match="NaN"):
        SnapshotView(VIEW_SNAPSHOT, usable_until=math.nan)
    with pytest.raises(ValueError, match="NaN"):
        SnapshotView(VIEW_SNAPSHOT, usable_until=5.0).check(math.nan)


def test_expired_error_is_not_a_value_error() -> None:
    """Callers catch bad input (ValueError) and staleness separately."""
    assert not issubclass(SnapshotExpiredError, ValueError)


# ================================================================== real table


@pytest.mark.slow
def test_real_global_table() -> None:
    from upstream.decompress import decompress
    from upstream.json_format import parse_export

    raw = decompress((RPKILOG / "rpkiclient_summary_20250720T093135Z.json.bz2").read_bytes())
    snap = parse_export(raw).snapshot_at(1753003893)
    del raw
    assert snap.vrp_count == 723_521

    unprepared = Snapshot(snap.v4, snap.v6, snap.router_keys, snap.aspas)
    started = time.perf_counter()
    snap.prepare()
    build = time.perf_counter() - started
    print(f"prepare (origin index, ASPA index, digest): {build:.2f} s for {snap.vrp_count} VRPs")
    assert build < 5.0  # ~0.7 s here; the budget is ~2 s, with slack for slow CI machines

    one = validate_origin(snap, "1.1.1.0/24", 13335)
    assert one.state is VALID
    assert vrp("1.1.1.0/24", 24, 13335) in one.matched
    hijack = validate_origin(snap, "1.1.1.0/24", 64496)
    assert hijack.state is INVALID
    assert vrp("1.1.1.0/24", 24, 13335) in hijack.unmatched_as
    assert validate_origin(snap, "1.1.1.0/25", 13335).state is INVALID  # max length 24
    assert validate_origin(snap, "192.0.2.0/24", 64496).state is NOT_FOUND  # documentation

    # Every VRP validates its own route; one bit longer than its max length it does not match.
    rng = random.Random(6811)
    n4 = snap.v4_count
    sample = [
        Vrp.from_key(snap.v4[i * 10 : i * 10 + 10] if i < n4 else snap.v6[(i - n4) * 22 :][:22])
        for i in rng.sample(range(snap.vrp_count), 2000)
    ]
    for v in sample:
        result = validate_origin(snap, v.prefix, v.asn)
        if v.asn == 0:
            assert v in result.unmatched_as
        else:
            assert result.state is VALID, v
            assert v in result.matched, v
        if v.max_length < v.prefix.max_prefixlen:
            longer = ipaddress.ip_network((v.prefix.network_address, v.max_length + 1))
            assert v not in validate_origin(snap, longer, v.asn).matched

    routes = [(v.prefix, v.asn) for v in sample[:500]]
    started = time.perf_counter()
    for prefix, asn in routes:
        validate_origin(snap, prefix, asn)
    per_query = (time.perf_counter() - started) / len(routes)
    print(f"origin validation: {per_query * 1e6:.1f} µs per query")
    assert per_query < 500e-6
    started = time.perf_counter()
    for prefix, asn in routes:
        assert validate_origin(unprepared, prefix, asn) == validate_origin(snap, prefix, asn)
    searched = (time.perf_counter() - started) / len(routes) - per_query
    print(f"origin validation without prepare (packed search): {searched * 1e6:.1f} µs per query")
    assert searched < 5e-3
    assert not unprepared.prepared

    # Each ASPA's own hops are Provider+, and a customer -> provider path is upstream Valid.
    for aspa in snap.aspas:
        for provider in aspa.providers:
            if provider:
                assert hop_check(snap, aspa.customer, provider) is PP
                path = [provider, aspa.customer]
                assert verify_as_path(snap, path, UP, neighbor_as=provider) is AspaResult.VALID


def test_view_expires_per_kind() -> None:
    """VRP queries read the VRP time, ASPA queries the ASPA time; the error names the kind."""
    from snapshot.kinds import PayloadKind

    view = SnapshotView(
        VIEW_SNAPSHOT, usable_until={PayloadKind.VRP: 100.0, PayloadKind.ASPA: 50.0}
    )
    assert view.usable_until == 50.0
    assert view.usable_until_by_kind[PayloadKind.ROUTER_KEY] is None
    view.validate_origin("192.0.2.0/24", 64496, now=60.0)
    with pytest.raises(SnapshotExpiredError) as info:
        view.hop_check(10, 20, now=60.0)
    assert info.value.kind is PayloadKind.ASPA
    with pytest.raises(SnapshotExpiredError) as info:
        view.validate_origin("192.0.2.0/24", 64496, now=100.0)
    assert info.value.kind is PayloadKind.VRP
    assert "vrp" in str(info.value)
    assert not view.expired(60.0, PayloadKind.VRP)
    assert view.expired(60.0)
