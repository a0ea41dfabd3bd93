"""Hypothesis strategies and naive models shared by the snapshot tests.

Payload is drawn from small pools (a handful of prefixes, ASNs, customers, providers and keys) so
that generated snapshots overlap a lot: duplicates, re-announcements, provider changes and
withdrawals all happen often. The naive model of a snapshot is three plain Python collections
(frozensets and a dict); the tests compare the packed implementation against it.
"""

from __future__ import annotations

import ipaddress
import itertools
import random
from dataclasses import dataclass
from typing import TypeVar

from hypothesis import settings
from hypothesis import strategies as st

from snapshot.model import Aspa, RouterKey, Vrp
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE, split_keys
from snapshot.snapshot import Snapshot

#: Shared settings: property tests must stay fast and never trip on timing.
SETTINGS = settings(max_examples=200, deadline=None)
FEW = settings(max_examples=100, deadline=None)

ASN_MAX = 2**32 - 1
T = TypeVar("T")

V4_PREFIXES = [
    ipaddress.IPv4Network(text)
    for text in (
        "0.0.0.0/0",
        "10.0.0.0/8",
        "10.0.0.0/16",
        "10.1.0.0/16",
        "192.0.2.0/24",
        "255.255.255.255/32",
    )
]
V6_PREFIXES = [
    ipaddress.IPv6Network(text)
    for text in (
        "::/0",
        "2001:db8::/32",
        "2001:db8::/48",
        "2001:db8:1::/48",
        "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128",
    )
]
SMALL_ASNS = [0, 1, 64496, ASN_MAX]
CUSTOMERS = [1, 2, 64496, ASN_MAX]
PROVIDERS = [0, 1, 2, 3, 64497, ASN_MAX]
SKIS = [bytes(20), b"\x01" * 20, bytes(19) + b"\xff"]
SPKIS = [b"\x01", b"\xff", b"\x00\x00", b"\x30\x59" + bytes(89)]


def _vrp_pool() -> list[Vrp]:
    pool: list[Vrp] = []
    prefixes: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = [*V4_PREFIXES, *V6_PREFIXES]
    for net in prefixes:
        top = 32 if net.version == 4 else 128
        for max_length in sorted({net.prefixlen, min(net.prefixlen + 1, top), top}):
            pool.extend(Vrp(net, max_length, asn) for asn in SMALL_ASNS)
    return pool


#: Every VRP the small strategies can produce (pre-built: drawing from a list is cheap).
VRP_POOL = _vrp_pool()
PROVIDER_SETS = [combo for n in (1, 2, 3) for combo in itertools.combinations(PROVIDERS, n)]
ASPA_POOL = [Aspa(c, p) for c in CUSTOMERS for p in PROVIDER_SETS]
ROUTER_KEY_POOL = [
    RouterKey(ski, asn, spki) for ski in SKIS for asn in SMALL_ASNS for spki in SPKIS
]


def small_vrps() -> st.SearchStrategy[Vrp]:
    """A VRP from a small pool, so that collisions are frequent."""
    return st.sampled_from(VRP_POOL)


@st.composite
def any_vrps(draw: st.DrawFn, version: int | None = None) -> Vrp:
    """Any valid VRP (full address, length and ASN ranges), optionally of one IP version."""
    if version is None:
        version = draw(st.sampled_from([4, 6]))
    bits = 32 if version == 4 else 128
    prefix_length = draw(st.integers(0, bits))
    address = draw(st.integers(0, 2**bits - 1)) >> (bits - prefix_length) << (bits - prefix_length)
    max_length = draw(st.integers(prefix_length, bits))
    asn = draw(st.integers(0, ASN_MAX))
    net: ipaddress.IPv4Network | ipaddress.IPv6Network
    if version == 4:
        net = ipaddress.IPv4Network((address, prefix_length))
    else:
        net = ipaddress.IPv6Network((address, prefix_length))
    return Vrp(net, max_length, asn)


@st.composite
def tie_heavy_vrps(draw: st.DrawFn, version: int) -> Vrp:
    """VRPs of one family whose fields are often equal, to exercise every tie-break."""
    bits = 32 if version == 4 else 128
    prefix_length = draw(st.sampled_from([0, 1, 8, 9, bits - 1, bits]))
    address = draw(
        st.sampled_from([0, 1, 2**bits - 1, 2 ** (bits - 1), 0x0A00_0000 << (bits - 32)])
        | st.integers(0, 2**bits - 1)
    )
    address = address >> (bits - prefix_length) << (bits - prefix_length)
    max_length = draw(st.sampled_from(sorted({prefix_length, min(prefix_length + 1, bits), bits})))
    asn = draw(st.sampled_from([0, 1, 255, 256, 2**24, ASN_MAX]))
    net: ipaddress.IPv4Network | ipaddress.IPv6Network
    if version == 4:
        net = ipaddress.IPv4Network((address, prefix_length))
    else:
        net = ipaddress.IPv6Network((address, prefix_length))
    return Vrp(net, max_length, asn)


def small_aspas() -> st.SearchStrategy[Aspa]:
    """An ASPA from small customer and provider pools (AS0 included, alone and mixed)."""
    return st.sampled_from(ASPA_POOL)


def small_router_keys() -> st.SearchStrategy[RouterKey]:
    """A router key from small SKI, ASN and SPKI pools."""
    return st.sampled_from(ROUTER_KEY_POOL)


@dataclass(frozen=True)
class Records:
    """The raw records a snapshot was built from (possibly with duplicates)."""

    vrps: tuple[Vrp, ...]
    aspas: tuple[Aspa, ...]
    router_keys: tuple[RouterKey, ...]

    def build(self) -> Snapshot:
        """Build the snapshot through the public constructor."""
        return Snapshot.build(self.vrps, self.aspas, self.router_keys)


@st.composite
def records(draw: st.DrawFn) -> Records:
    """Raw record lists from the small pools."""
    return Records(
        tuple(draw(st.lists(small_vrps(), max_size=10))),
        tuple(draw(st.lists(small_aspas(), max_size=5))),
        tuple(draw(st.lists(small_router_keys(), max_size=4))),
    )


# Mask-based snapshots: one integer draw per kind selects a subset of a pool. Much cheaper to
# generate than lists, which matters for sequences of up to 15 snapshots.
# The pools are shuffled (fixed seed) because small integers, which Hypothesis favours, select
# only the first few entries: each kind of record must be able to appear among them.
MASK_VRPS = VRP_POOL[::3]
MASK_ASPAS = [Aspa(c, p) for c in CUSTOMERS for p in ((0,), (1,), (1, 2), (2, 3), (0, 3))]
MASK_ROUTER_KEYS = ROUTER_KEY_POOL[::5]
for _pool in (MASK_VRPS, MASK_ASPAS, MASK_ROUTER_KEYS):
    random.Random(1982).shuffle(_pool)


@dataclass(frozen=True)
class Masks:
    """Subset selectors over MASK_VRPS, MASK_ASPAS and MASK_ROUTER_KEYS."""

    vrps: int
    aspas: int
    router_keys: int

    def __xor__(self, other: Masks) -> Masks:
        return Masks(
            self.vrps ^ other.vrps, self.aspas ^ other.aspas, self.router_keys ^ other.router_keys
        )

    def build(self) -> Snapshot:
        """The snapshot holding the selected records."""

        def pick(pool: list[T], mask: int) -> list[T]:
            return [item for i, item in enumerate(pool) if mask >> i & 1]

        return Snapshot.build(
            pick(MASK_VRPS, self.vrps),
            pick(MASK_ASPAS, self.aspas),
            pick(MASK_ROUTER_KEYS, self.router_keys),
        )


masks = st.builds(
    Masks,
    st.integers(0, 2 ** len(MASK_VRPS) - 1),
    st.integers(0, 2 ** len(MASK_ASPAS) - 1),
    st.integers(0, 2 ** len(MASK_ROUTER_KEYS) - 1),
)


def snapshots() -> st.SearchStrategy[Snapshot]:
    """Snapshots over the small mask pools (cheap to draw; overlapping by construction)."""
    return masks.map(Masks.build)


# ---------------------------------------------------------------- naive model


@dataclass(frozen=True)
class Model:
    """A snapshot as plain sets: what the packed representation must be equivalent to."""

    vrps: frozenset[Vrp]
    router_keys: frozenset[RouterKey]
    aspas: dict[int, frozenset[int]]


def naive_providers(providers: frozenset[int]) -> tuple[int, ...]:
    """Sorted providers with AS0 dropped when anything else is present."""
    rest = providers - {0} if len(providers) > 1 else providers
    return tuple(sorted(rest))


def model_of_records(recs: Records) -> Model:
    """The naive model of what `Snapshot.build` should produce from ``recs``."""
    aspas: dict[int, set[int]] = {}
    for aspa in recs.aspas:
        aspas.setdefault(aspa.customer, set()).update(aspa.providers)
    return Model(
        frozenset(recs.vrps),
        frozenset(recs.router_keys),
        {c: frozenset(naive_providers(frozenset(p))) for c, p in aspas.items()},
    )


def model_of(snap: Snapshot) -> Model:
    """Read a snapshot back into the naive model."""
    return Model(
        frozenset(snap.vrps()),
        frozenset(snap.router_keys),
        {a.customer: frozenset(a.providers) for a in snap.aspas},
    )


def vrps_of(packed: bytes, width: int) -> list[Vrp]:
    """Decode a packed key string (in its stored order)."""
    return [Vrp.from_key(k) for k in split_keys(packed, width)]


def v4_keys(packed: bytes) -> list[bytes]:
    """Cut an IPv4 packed string into keys."""
    return split_keys(packed, V4_KEY_SIZE)


def v6_keys(packed: bytes) -> list[bytes]:
    """Cut an IPv6 packed string into keys."""
    return split_keys(packed, V6_KEY_SIZE)


def order_tuple(vrp: Vrp) -> tuple[int, int, int, int]:
    """The 8210bis §11.2 sort fields, independent of the packed key: (address, max, prefix, asn)."""
    return (int(vrp.prefix.network_address), vrp.max_length, vrp.prefix.prefixlen, vrp.asn)
