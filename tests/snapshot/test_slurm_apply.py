"""`apply_policy` on packed snapshots against a naive recomputation over value objects.

The naive side decodes every VRP, filters with `ipaddress.subnet_of`, adds the assertions and
builds a fresh snapshot; the packed side must give the identical (canonical) snapshot.
"""

from __future__ import annotations

import ipaddress
import json

from hypothesis import given
from hypothesis import strategies as st

from snapshot.model import Aspa, IPNetwork, RouterKey, Vrp
from snapshot.slurm import (
    EMPTY_POLICY,
    AspaAssertion,
    AspaFilter,
    BgpsecAssertion,
    BgpsecFilter,
    PrefixAssertion,
    PrefixFilter,
    SlurmPolicy,
    parse_slurm,
)
from snapshot.slurm_apply import apply_policy
from snapshot.snapshot import Snapshot
from tests.snapshot.strategies import (
    ASPA_POOL,
    CUSTOMERS,
    SETTINGS,
    SKIS,
    SMALL_ASNS,
    V4_PREFIXES,
    V6_PREFIXES,
    VRP_POOL,
    any_vrps,
    naive_providers,
    small_aspas,
    small_router_keys,
    tie_heavy_vrps,
)

FILTER_PREFIXES: list[IPNetwork] = [
    *V4_PREFIXES,
    *V6_PREFIXES,
    ipaddress.IPv4Network("10.0.0.0/9"),
    ipaddress.IPv4Network("192.0.2.0/25"),
    ipaddress.IPv4Network("128.0.0.0/1"),
    ipaddress.IPv6Network("2001:db8::/31"),
    ipaddress.IPv6Network("8000::/1"),
]


def _networks(version: int) -> st.SearchStrategy[IPNetwork]:
    bits = 32 if version == 4 else 128

    def build(length: int, address: int) -> IPNetwork:
        address = address >> (bits - length) << (bits - length)
        if version == 4:
            return ipaddress.IPv4Network((address, length))
        return ipaddress.IPv6Network((address, length))

    return st.builds(build, st.integers(0, bits), st.integers(0, 2**bits - 1))


networks = st.sampled_from(FILTER_PREFIXES) | _networks(4) | _networks(6)
asns = st.sampled_from(SMALL_ASNS) | st.integers(0, 2**32 - 1)

bgpsec_filters = st.builds(
    BgpsecFilter, st.none() | st.sampled_from(SMALL_ASNS), st.none() | st.sampled_from(SKIS)
).filter(lambda f: f.asn is not None or f.ski is not None)
aspa_filters = st.builds(AspaFilter, st.sampled_from(CUSTOMERS))
vrps = st.sampled_from(VRP_POOL) | any_vrps() | tie_heavy_vrps(4) | tie_heavy_vrps(6)


@st.composite
def tables(draw: st.DrawFn) -> Snapshot:
    """Snapshots with VRPs from the small pools and from anywhere, plus keys and ASPAs."""
    return Snapshot.build(
        draw(st.lists(vrps, max_size=40)),
        draw(st.lists(small_aspas(), max_size=6)),
        draw(st.lists(small_router_keys(), max_size=6)),
    )


@st.composite
def cases(draw: st.DrawFn) -> tuple[SlurmPolicy, Snapshot]:
    """A table and a policy whose filters often hit it: filter prefixes are often a served
    VRP's own prefix or one of its supernets, filter ASNs often a served origin."""
    snap = draw(tables())
    served = list(snap.vrps())
    near_prefixes = networks
    near_asns = asns
    if served:
        near_prefixes = networks | st.builds(
            lambda v, up: v.prefix.supernet(min(up, v.prefix.prefixlen)),
            st.sampled_from(served),
            st.sampled_from([0, 0, 1, 8]),
        )
        near_asns = asns | st.sampled_from([v.asn for v in served])
    prefix_filters = st.builds(
        PrefixFilter, st.none() | near_prefixes, st.none() | near_asns
    ).filter(lambda f: f.prefix is not None or f.asn is not None)
    policy = SlurmPolicy(
        prefix_filters=tuple(draw(st.lists(prefix_filters, max_size=5))),
        bgpsec_filters=tuple(draw(st.lists(bgpsec_filters, max_size=3))),
        aspa_filters=tuple(draw(st.lists(aspa_filters, max_size=3))),
        prefix_assertions=tuple(map(PrefixAssertion, draw(st.lists(vrps, max_size=6)))),
        bgpsec_assertions=tuple(
            map(BgpsecAssertion, draw(st.lists(small_router_keys(), max_size=3)))
        ),
        aspa_assertions=tuple(map(AspaAssertion, draw(st.lists(small_aspas(), max_size=3)))),
    )
    return policy, snap


# ---------------------------------------------------------------- the naive model


def naive_prefix_match(f: PrefixFilter, vrp: Vrp) -> bool:
    if f.asn is not None and f.asn != vrp.asn:
        return False
    if f.prefix is None:
        return True
    if isinstance(f.prefix, ipaddress.IPv4Network):
        return isinstance(vrp.prefix, ipaddress.IPv4Network) and vrp.prefix.subnet_of(f.prefix)
    return isinstance(vrp.prefix, ipaddress.IPv6Network) and vrp.prefix.subnet_of(f.prefix)


def naive_key_match(f: BgpsecFilter, key: RouterKey) -> bool:
    return (f.asn is None or f.asn == key.asn) and (f.ski is None or f.ski == key.ski)


def naive_apply(policy: SlurmPolicy, snap: Snapshot) -> Snapshot:
    """Filters then assertions, recomputed over value objects."""
    kept_vrps = {
        v for v in snap.vrps() if not any(naive_prefix_match(f, v) for f in policy.prefix_filters)
    }
    kept_vrps |= {a.vrp for a in policy.prefix_assertions}
    kept_keys = {
        k for k in snap.router_keys if not any(naive_key_match(f, k) for f in policy.bgpsec_filters)
    }
    kept_keys |= {a.key for a in policy.bgpsec_assertions}
    dropped = {f.customer for f in policy.aspa_filters}
    providers: dict[int, set[int]] = {}
    for aspa in snap.aspas:
        if aspa.customer not in dropped:
            providers.setdefault(aspa.customer, set()).update(aspa.providers)
    for assertion in policy.aspa_assertions:
        providers.setdefault(assertion.aspa.customer, set()).update(assertion.aspa.providers)
    aspas = [Aspa(c, naive_providers(frozenset(p))) for c, p in providers.items()]
    return Snapshot.build(kept_vrps, aspas, kept_keys)


# ---------------------------------------------------------------- properties


@SETTINGS
@given(cases())
def test_apply_equals_naive_recomputation(case: tuple[SlurmPolicy, Snapshot]) -> None:
    policy, snap = case
    result = apply_policy(policy, snap)
    assert result == naive_apply(policy, snap)
    # Canonical: exactly what building from the result's own records gives.
    assert result == Snapshot.build(result.vrps(), result.aspas, result.router_keys)


@SETTINGS
@given(cases())
def test_assertions_are_never_filtered(case: tuple[SlurmPolicy, Snapshot]) -> None:
    policy, snap = case
    result = apply_policy(policy, snap)
    served = set(result.vrps())
    assert {a.vrp for a in policy.prefix_assertions} <= served
    assert {a.key for a in policy.bgpsec_assertions} <= set(result.router_keys)
    for assertion in policy.aspa_assertions:
        aspa = result.aspa_for(assertion.aspa.customer)
        assert aspa is not None
        assert set(assertion.aspa.providers) - {0} <= set(aspa.providers)


@SETTINGS
@given(cases())
def test_apply_is_idempotent(case: tuple[SlurmPolicy, Snapshot]) -> None:
    policy, snap = case
    once = apply_policy(policy, snap)
    assert apply_policy(policy, once) == once


@SETTINGS
@given(tables())
def test_empty_policy_returns_the_snapshot(snap: Snapshot) -> None:
    assert apply_policy(EMPTY_POLICY, snap) is snap


# ---------------------------------------------------------------- examples


def test_example_from_a_file() -> None:
    table = Snapshot.build(
        [
            Vrp.parse("192.0.2.0/24", 24, 64496),
            Vrp.parse("192.0.2.128/25", 25, 64497),
            Vrp.parse("192.0.0.0/16", 24, 64497),  # less specific than the filter: kept
            Vrp.parse("198.51.100.0/24", 24, 64498),
            Vrp.parse("2001:db8::/32", 48, 64498),
        ],
        [Aspa(64500, (64501,)), Aspa(64510, (64511,))],
    )
    doc = {
        "slurmVersion": 2,
        "validationOutputFilters": {
            "prefixFilters": [{"prefix": "192.0.2.0/24", "asn": 64497}, {"asn": 64498}],
            "bgpsecFilters": [],
            "aspaFilters": [{"customerAsn": 64510}],
        },
        "locallyAddedAssertions": {
            "prefixAssertions": [
                {"prefix": "203.0.113.0/24", "asn": 64499, "maxPrefixLength": 25},
                {"prefix": "192.0.2.0/24", "asn": 64496},  # already there: served once
            ],
            "bgpsecAssertions": [],
            "aspaAssertions": [
                {"customerAsn": 64500, "providerAsns": [64502]},
                {"customerAsn": 64520, "providerAsns": [0]},
            ],
        },
    }
    result = apply_policy(parse_slurm(json.dumps(doc)), table)
    assert set(result.vrps()) == {
        Vrp.parse("192.0.2.0/24", 24, 64496),
        Vrp.parse("192.0.0.0/16", 24, 64497),
        Vrp.parse("203.0.113.0/24", 25, 64499),
    }
    assert result.aspas == (Aspa(64500, (64501, 64502)), Aspa(64520, (0,)))


def test_filter_prefix_equal_to_the_vrp_prefix() -> None:
    table = Snapshot.build([Vrp.parse("10.0.0.0/8", 8, 1), Vrp.parse("10.0.0.0/7", 8, 1)])
    policy = SlurmPolicy(prefix_filters=(PrefixFilter(ipaddress.ip_network("10.0.0.0/8"), None),))
    assert list(apply_policy(policy, table).vrps()) == [Vrp.parse("10.0.0.0/7", 8, 1)]


def test_asn_filter_on_a_larger_table() -> None:
    # Enough keys that the ASN column is gathered with strided copies over many rows.
    vrps = [Vrp.parse(f"10.{i // 256}.{i % 256}.0/24", 24, 64496 + i % 7) for i in range(5000)]
    vrps += [Vrp.parse(f"2001:db8:{i:x}::/48", 48, 64496 + i % 7) for i in range(3000)]
    table = Snapshot.build(vrps)
    policy = SlurmPolicy(prefix_filters=(PrefixFilter(None, 64497), PrefixFilter(None, 64502)))
    result = apply_policy(policy, table)
    assert result == Snapshot.build(v for v in vrps if v.asn not in (64497, 64502))


def test_many_asn_filters() -> None:
    # ASNs that differ only in their high octets (the column is read big-endian).
    vrps = [Vrp.parse(f"10.{i // 256}.{i % 256}.0/24", 24, i % 40) for i in range(2000)]
    vrps += [Vrp.parse(f"2001:db8:{i:x}::/48", 48, 2**24 * (i % 40)) for i in range(500)]
    table = Snapshot.build(vrps)
    dropped = set(range(0, 40, 2)) | {2**24 * 3, 2**24 * 7}
    policy = SlurmPolicy(prefix_filters=tuple(PrefixFilter(None, a) for a in sorted(dropped)))
    assert apply_policy(policy, table) == Snapshot.build(v for v in vrps if v.asn not in dropped)


def test_asn_filter_reads_whole_asns() -> None:
    # ASN 0x00010000 followed by ASN 0x00000100 holds 00 00 00 00 across the boundary.
    vrps = [Vrp.parse("10.0.0.0/24", 24, 0x00010000), Vrp.parse("9.0.0.0/24", 24, 0x00000100)]
    table = Snapshot.build(vrps)
    policy = SlurmPolicy(prefix_filters=(PrefixFilter(None, 0),))
    assert apply_policy(policy, table) == table


def test_aspa_pool_customers_are_filterable() -> None:
    table = Snapshot.build(aspas=ASPA_POOL)
    policy = SlurmPolicy(aspa_filters=tuple(AspaFilter(c) for c in CUSTOMERS))
    assert apply_policy(policy, table).aspas == ()
