"""Read-only queries on a `Snapshot`: RFC 6811 origin validation and ASPA AS_PATH verification.

Every query is a pure function of a snapshot and its arguments. `SnapshotView` adds the one
rule about time: each payload kind of a snapshot has its own usable-until time, and asking about
a kind at ``now >= usable_until`` of that kind raises `SnapshotExpiredError` naming the kind
(``now`` is an argument, never read from a clock).

**Origin validation** (RFC 6811 §2) classifies each VRP that *covers* the route (same address
family, VRP prefix contains the route prefix) as matched (ASN equals the origin and the route
length is at most the max length), unmatched on ASN, or unmatched on length, like Routinator's
validity API. A VRP for AS0 never matches (RFC 6483 §4, RFC 7607), and a route whose origin is
RFC 6811's NONE (``origin_asn=None``: the AS_PATH ends in an AS_SET) is never Valid. A query
writes nothing: on a prepared snapshot (`Snapshot.prepare`, done by the owner before publishing)
it reads the `snapshot.origin_index.OriginIndex`, at most 33 (IPv4) or 129 (IPv6) dict probes;
on one never prepared it binary-searches the packed keys (`covering_in_packed`).

**ASPA verification** follows the text of draft-ietf-sidrops-aspa-verification-23: §5 the
provider authorization function (`hop_check`), §6.1 the ramp bounds (`ramp_bounds`), §6.2 the
upstream and §6.3 the downstream procedure (`verify_as_path`). Summaries of later revisions
(up to -28) show the same steps, numbered §5.3 to §5.6, with the de-prepended path named
COMPRESSED_AS_PATH. Interpretations:

* A path is given as received: ``path[0]`` is the neighbour (most recently added AS), the last
  element is the origin. An element is an ASN (int) or an AS_SET (a `set`/`frozenset` of ASNs).
  Consecutive repeats (prepends) are collapsed before counting N; repeats further apart stay.
* Step 2 (the first AS must be the neighbour AS) runs only when ``neighbor_as`` is given; an
  RS-client receiving from a transparent route server passes ``None`` (the draft's exemption).
* AS0 is never a provider: ``hop_check(c, 0)`` is Not Provider+ when ``c`` has an ASPA, so an
  AS0-only ASPA means "no providers". A path containing AS0 is Invalid, like a path with an
  AS_SET: RFC 7607 makes such an AS_PATH malformed, and the draft leaves AS0 in paths unspecified.
* The mitigation policy (draft §6.4), AFI/SAFI scope (§7.2) and role selection (§7.3) are the
  caller's: choose ``Direction.DOWNSTREAM`` for routes from a provider, ``UPSTREAM`` otherwise.
"""

from __future__ import annotations

import bisect
import ipaddress
import math
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType

from snapshot.kinds import PayloadKind
from snapshot.model import IPNetwork, Vrp, check_asn
from snapshot.origin_index import covering_in_packed
from snapshot.snapshot import Snapshot

__all__ = [
    "AspaResult",
    "Direction",
    "HopResult",
    "OriginState",
    "OriginValidation",
    "PathElement",
    "RampBounds",
    "ResyncRequiredError",
    "SnapshotExpiredError",
    "SnapshotView",
    "UsableUntil",
    "hop_check",
    "ramp_bounds",
    "validate_origin",
    "verify_as_path",
]

#: One AS_PATH element as received: an ASN, or an AS_SET.
PathElement = int | AbstractSet[int]


class ResyncRequiredError(Exception):
    """Raised by a subscription (the client's or a shared reader's ``watch``) that lost events.

    It lost them to a queue overflow or a lost window, or outlived a change of the publisher's
    identity: close it, enter ``watch`` again and revalidate from the new ``initial``.
    """


class SnapshotExpiredError(Exception):
    """Raised when a snapshot is queried about a kind at or after that kind's usable-until time.

    Get a new snapshot from the store or client; an old one never answers for expired data.
    """

    def __init__(
        self, usable_until: float, now: float, kind: PayloadKind = PayloadKind.VRP
    ) -> None:
        super().__init__(
            f"snapshot's {kind.value} data was usable until {usable_until}; asked at {now}"
        )
        self.usable_until = usable_until
        self.now = now
        self.kind = kind


# ------------------------------------------------------------------ origin validation


class OriginState(Enum):
    """Route origin validation state (RFC 6811 §2)."""

    #: At least one covering VRP matches origin ASN and length.
    VALID = "valid"
    #: Covering VRPs exist but none matches.
    INVALID = "invalid"
    #: No VRP covers the route.
    NOT_FOUND = "not-found"


@dataclass(frozen=True, slots=True)
class OriginValidation:
    """The outcome for one route, with the covering VRPs sorted by prefix length, max length, ASN.

    ``matched`` decide Valid; ``unmatched_as`` are covering VRPs of another ASN (AS0 VRPs always,
    and every covering VRP when the origin is None); ``unmatched_length`` have the route's
    origin ASN but a max length shorter than the route.
    """

    prefix: IPNetwork
    origin_asn: int | None
    state: OriginState
    matched: tuple[Vrp, ...]
    unmatched_as: tuple[Vrp, ...]
    unmatched_length: tuple[Vrp, ...]


def _route_prefix(prefix: str | IPNetwork) -> IPNetwork:
    if isinstance(prefix, ipaddress.IPv4Network | ipaddress.IPv6Network):
        return prefix
    if isinstance(prefix, str):
        return ipaddress.ip_network(prefix, strict=True)  # ValueError names the host bits
    raise TypeError(f"prefix must be a str or an IP network, not {type(prefix).__name__}")


def validate_origin(
    snapshot: Snapshot, prefix: str | IPNetwork, origin_asn: int | None
) -> OriginValidation:
    """Validate the route (``prefix``, ``origin_asn``) against the snapshot's VRPs (RFC 6811).

    ``origin_asn=None`` stands for RFC 6811's origin NONE (the AS_PATH ends in an AS_SET); such
    a route is Invalid when covered and Not Found otherwise. (For an empty AS_PATH the RFC takes
    the speaker's own AS as the origin; pass that.)

    Raises:
        ValueError: ``prefix`` is not a prefix or has host bits set; `PayloadError` (a
            ValueError) when ``origin_asn`` is not a 32-bit ASN.
    """
    route = _route_prefix(prefix)
    if origin_asn is not None:
        check_asn(origin_asn, "origin_asn")
    route_length = route.prefixlen
    address = int(route.network_address)
    index = snapshot.origin_index
    if index is not None:
        family = index.family(route.version)
        bits = family.bits
        covering = family.covering(address, route_length)
    else:  # never prepared: search the packed keys (slower; writes nothing)
        bits = 32 if route.version == 4 else 128
        packed = snapshot.v4 if route.version == 4 else snapshot.v6
        covering = covering_in_packed(packed, route.version, address, route_length)
    matched: list[Vrp] = []
    unmatched_as: list[Vrp] = []
    unmatched_length: list[Vrp] = []
    network_type = type(route)
    for length, value in sorted(covering):
        max_length, asn = value >> 32, value & 0xFFFF_FFFF
        shift = bits - length
        vrp = Vrp(network_type((address >> shift << shift, length)), max_length, asn)
        if asn == 0 or asn != origin_asn:
            unmatched_as.append(vrp)
        elif route_length > max_length:
            unmatched_length.append(vrp)
        else:
            matched.append(vrp)
    if matched:
        state = OriginState.VALID
    elif covering:
        state = OriginState.INVALID
    else:
        state = OriginState.NOT_FOUND
    return OriginValidation(
        route, origin_asn, state, tuple(matched), tuple(unmatched_as), tuple(unmatched_length)
    )


# ------------------------------------------------------------------ ASPA verification


class HopResult(Enum):
    """The provider authorization function ``authorized(AS x, AS y)`` (draft-23 §5)."""

    #: The customer's ASPAs list the other AS as a provider (or non-transparent RS).
    PROVIDER_PLUS = "Provider+"
    #: The customer has ASPAs and they do not list the other AS.
    NOT_PROVIDER_PLUS = "Not Provider+"
    #: The customer has no ASPA.
    NO_ATTESTATION = "No Attestation"


class Direction(Enum):
    """Which procedure applies, from the BGP role of the neighbour the route came from."""

    #: From a customer, a lateral peer, an RS-client (at an RS) or an RS (at an RS-client): §6.2.
    UPSTREAM = "upstream"
    #: From a provider: §6.3.
    DOWNSTREAM = "downstream"


class AspaResult(Enum):
    """Outcome of ASPA-based AS_PATH verification (draft-23 §6.2, §6.3)."""

    VALID = "valid"
    INVALID = "invalid"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class RampBounds:
    """The draft-23 §6.1 ramp bounds of a de-prepended path of ``length`` (N) ASes."""

    length: int
    max_up_ramp: int
    min_up_ramp: int
    max_down_ramp: int
    min_down_ramp: int


def hop_check(snapshot: Snapshot, customer: int, provider: int) -> HopResult:
    """The draft's ``authorized(customer, provider)`` (§5): the ASPA verdict on one hop.

    The snapshot holds one merged ASPA per customer, i.e. the draft's U-SPAS. AS0 is never a
    provider (an AS0-only ASPA says "no providers").
    """
    check_asn(customer, "customer")
    check_asn(provider, "provider")
    return _hop(snapshot, customer, provider)


def _hop(snapshot: Snapshot, customer: int, provider: int) -> HopResult:
    aspa = snapshot.aspa_for(customer)
    if aspa is None:
        return HopResult.NO_ATTESTATION
    providers = aspa.providers  # sorted and unique (snapshot.model)
    i = bisect.bisect_left(providers, provider)
    if provider != 0 and i < len(providers) and providers[i] == provider:
        return HopResult.PROVIDER_PLUS
    return HopResult.NOT_PROVIDER_PLUS


def _collapse(asns: Sequence[int]) -> list[int]:
    """Drop consecutive repeats (AS_PATH prepending)."""
    out: list[int] = []
    for asn in asns:
        if not out or out[-1] != asn:
            out.append(asn)
    return out


def _bounds(snapshot: Snapshot, collapsed: list[int]) -> RampBounds:
    # The draft numbers from the origin: A(1) is the origin, A(N) the neighbour.
    a = collapsed[::-1]
    n = len(a)
    up = [_hop(snapshot, a[i], a[i + 1]) for i in range(n - 1)]  # authorized(A(i+1), A(i+2))
    down = [_hop(snapshot, a[i + 1], a[i]) for i in range(n - 1)]  # authorized(A(i+2), A(i+1))
    not_pp = HopResult.NOT_PROVIDER_PLUS
    pp = HopResult.PROVIDER_PLUS
    # max/min_up_ramp: the smallest I with authorized(A(I), A(I+1)) Not Provider+ / not
    # Provider+, else N. Hop list position i is I = i + 1.
    max_up = next((i + 1 for i, h in enumerate(up) if h is not_pp), n)
    min_up = next((i + 1 for i, h in enumerate(up) if h is not pp), n)
    # max/min_down_ramp: N - J + 1 for the largest J with authorized(A(J), A(J-1)) Not
    # Provider+ / not Provider+, else N. Hop list position i is J = i + 2.
    max_down = next((n - i - 1 for i in reversed(range(n - 1)) if down[i] is not_pp), n)
    min_down = next((n - i - 1 for i in reversed(range(n - 1)) if down[i] is not pp), n)
    return RampBounds(n, max_up, min_up, max_down, min_down)


def ramp_bounds(snapshot: Snapshot, path: Sequence[int]) -> RampBounds:
    """The four ramp bounds of ``path`` (neighbour first, prepends collapsed), for diagnostics.

    Raises:
        PayloadError: an element is not a 32-bit ASN (AS_SETs have no ramps).
    """
    for asn in path:
        check_asn(asn, "path")
    return _bounds(snapshot, _collapse(path))


def verify_as_path(
    snapshot: Snapshot,
    path: Sequence[PathElement],
    direction: Direction,
    *,
    neighbor_as: int | None = None,
) -> AspaResult:
    """Verify an AS_PATH as received (``path[0]`` is the neighbour) by the draft's procedure.

    Steps (draft-23 §6.2 upstream, §6.3 downstream): an empty path is Invalid; a first AS other
    than ``neighbor_as`` (when given) is Invalid; an AS_SET anywhere is Invalid (as is AS0, see
    the module docstring); then, with N the de-prepended length, upstream compares
    ``max_up_ramp`` / ``min_up_ramp`` with N, downstream the sums with the down-ramp bounds:
    below N at the max bounds is Invalid, below N at the min bounds is Unknown, else Valid.

    Raises:
        PayloadError: an element (or an AS_SET member, or ``neighbor_as``) is not a 32-bit ASN.
        TypeError: ``direction`` is not a `Direction`.
    """
    if not isinstance(direction, Direction):
        raise TypeError(f"direction must be a Direction, not {direction!r}")
    if neighbor_as is not None:
        check_asn(neighbor_as, "neighbor_as")
    asns: list[int] = []
    has_set = False
    for element in path:
        if isinstance(element, AbstractSet):
            for member in element:
                check_asn(member, "path")
            has_set = True
        else:
            asns.append(check_asn(element, "path"))
    if not path:
        return AspaResult.INVALID  # step 1
    if neighbor_as is not None and path[0] != neighbor_as:
        return AspaResult.INVALID  # step 2
    if has_set or 0 in asns:
        return AspaResult.INVALID  # step 3; AS0 (RFC 7607)
    bounds = _bounds(snapshot, _collapse(asns))
    if direction is Direction.UPSTREAM:
        # max_down_ramp and min_down_ramp are taken as 0.
        most, least = bounds.max_up_ramp, bounds.min_up_ramp
    else:
        most = bounds.max_up_ramp + bounds.max_down_ramp
        least = bounds.min_up_ramp + bounds.min_down_ramp
    if most < bounds.length:
        return AspaResult.INVALID
    if least < bounds.length:
        return AspaResult.UNKNOWN
    return AspaResult.VALID


# ------------------------------------------------------------------ time-bounded view


#: A usable-until time for every kind, or one for all of them (None: no limit).
UsableUntil = float | None | Mapping[PayloadKind, float | None]


@dataclass(frozen=True, slots=True, init=False)
class SnapshotView:
    """A snapshot with the time until which each kind of its data may be used (None: no limit).

    Every query takes ``now`` (Unix seconds, from the caller's clock) and raises
    `SnapshotExpiredError` when ``now`` is at or past the usable-until time of the kind it asks
    about: origin validation reads VRPs, the ASPA procedures read ASPAs.
    """

    snapshot: Snapshot
    usable_until_by_kind: Mapping[PayloadKind, float | None]

    def __init__(self, snapshot: Snapshot, usable_until: UsableUntil = None) -> None:
        """``usable_until``: one time for every kind, or a mapping (missing kinds: no limit)."""
        if isinstance(usable_until, Mapping):
            times = {kind: usable_until.get(kind) for kind in PayloadKind}
        else:
            times = dict.fromkeys(PayloadKind, usable_until)
        if any(t is not None and math.isnan(t) for t in times.values()):
            raise ValueError("usable_until must not be NaN")
        object.__setattr__(self, "snapshot", snapshot)
        object.__setattr__(self, "usable_until_by_kind", MappingProxyType(times))

    @property
    def usable_until(self) -> float | None:
        """The earliest usable-until time over the kinds (None: no limit)."""
        times = [t for t in self.usable_until_by_kind.values() if t is not None]
        return min(times, default=None)

    def expired(self, now: float, kind: PayloadKind | None = None) -> bool:
        """True when ``kind`` (any kind when None) may no longer be used at ``now``."""
        if math.isnan(now):
            raise ValueError("now must not be NaN")
        until = self.usable_until if kind is None else self.usable_until_by_kind[kind]
        return until is not None and now >= until

    def check(self, now: float, kind: PayloadKind = PayloadKind.VRP) -> Snapshot:
        """The snapshot, if ``kind`` is still usable at ``now``; else `SnapshotExpiredError`."""
        if self.expired(now, kind):
            until = self.usable_until_by_kind[kind]
            assert until is not None
            raise SnapshotExpiredError(until, now, kind)
        return self.snapshot

    def validate_origin(
        self, prefix: str | IPNetwork, origin_asn: int | None, *, now: float
    ) -> OriginValidation:
        """`validate_origin` on the snapshot, if its VRPs are usable at ``now``."""
        return validate_origin(self.check(now, PayloadKind.VRP), prefix, origin_asn)

    def hop_check(self, customer: int, provider: int, *, now: float) -> HopResult:
        """`hop_check` on the snapshot, if its ASPAs are usable at ``now``."""
        return hop_check(self.check(now, PayloadKind.ASPA), customer, provider)

    def ramp_bounds(self, path: Sequence[int], *, now: float) -> RampBounds:
        """`ramp_bounds` on the snapshot, if its ASPAs are usable at ``now``."""
        return ramp_bounds(self.check(now, PayloadKind.ASPA), path)

    def verify_as_path(
        self,
        path: Sequence[PathElement],
        direction: Direction,
        *,
        now: float,
        neighbor_as: int | None = None,
    ) -> AspaResult:
        """`verify_as_path` on the snapshot, if its ASPAs are usable at ``now``."""
        return verify_as_path(
            self.check(now, PayloadKind.ASPA), path, direction, neighbor_as=neighbor_as
        )
