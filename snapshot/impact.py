"""The conservative impact of a change between two snapshots: `Changes`, `impact_of`.

Pure (no I/O, may run in a thread); shared by the upstream client's `SnapshotEvent` and the
shared reader's `SharedEvent`. Built on `snapshot.delta` (net changes). A kind with more
changes than the limit is named in ``requires_full_revalidation`` and none of its changes are
listed, never a truncated list; the affected prefixes are the changed VRPs' own prefixes (every
route inside one must be revalidated, whatever its origin or length), the affected customers
every customer whose ASPA record changed.
"""

from __future__ import annotations

from dataclasses import dataclass

from snapshot.delta import AspaChange, Delta, compute_delta
from snapshot.kinds import PayloadKind
from snapshot.model import IPNetwork, RouterKey, Vrp
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE, split_keys
from snapshot.snapshot import Snapshot

__all__ = [
    "DEFAULT_EVENT_SIZE_LIMIT",
    "EVERYTHING",
    "Changes",
    "diff_snapshots",
    "impact_of",
]

#: Changes per kind beyond which an event asks for a full revalidation of that kind.
DEFAULT_EVENT_SIZE_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class Changes:
    """The data changes of one publish, per the limit (see the module docstring)."""

    vrps_added: tuple[Vrp, ...] = ()
    vrps_removed: tuple[Vrp, ...] = ()
    router_keys_added: tuple[RouterKey, ...] = ()
    router_keys_removed: tuple[RouterKey, ...] = ()
    aspa_changes: tuple[AspaChange, ...] = ()
    affected_prefixes: tuple[IPNetwork, ...] = ()
    affected_customers: tuple[int, ...] = ()
    requires_full_revalidation: frozenset[PayloadKind] = frozenset()

    @property
    def empty(self) -> bool:
        """Nothing changed (and nothing needs a full revalidation)."""
        return not (
            self.vrps_added
            or self.vrps_removed
            or self.router_keys_added
            or self.router_keys_removed
            or self.aspa_changes
            or self.requires_full_revalidation
        )


#: What an event says when its diff could not be computed: revalidate everything.
EVERYTHING = Changes(requires_full_revalidation=frozenset(PayloadKind))


def _vrps(v4: bytes, v6: bytes) -> tuple[Vrp, ...]:
    keys = split_keys(v4, V4_KEY_SIZE) + split_keys(v6, V6_KEY_SIZE)
    return tuple(Vrp.from_key(k) for k in keys)


def _sort_key(net: IPNetwork) -> tuple[int, int, int]:
    return (net.version, int(net.network_address), net.prefixlen)


def impact_of(delta: Delta, limit: int) -> Changes:
    """The changes and impact of the net ``delta``, per ``limit`` changes per kind."""
    full: set[PayloadKind] = set()
    counts = delta.counts()
    added: tuple[Vrp, ...] = ()
    removed: tuple[Vrp, ...] = ()
    if counts["vrp_announce"] + counts["vrp_withdraw"] > limit:
        full.add(PayloadKind.VRP)
    else:
        added = _vrps(delta.v4_announce, delta.v6_announce)
        removed = _vrps(delta.v4_withdraw, delta.v6_withdraw)
    keys_added, keys_removed = delta.router_key_announce, delta.router_key_withdraw
    if len(keys_added) + len(keys_removed) > limit:
        full.add(PayloadKind.ROUTER_KEY)
        keys_added = keys_removed = ()
    aspa = delta.aspa
    if len(aspa) > limit:
        full.add(PayloadKind.ASPA)
        aspa = ()
    prefixes = sorted({v.prefix for v in added + removed}, key=_sort_key)
    return Changes(
        added,
        removed,
        keys_added,
        keys_removed,
        aspa,
        tuple(prefixes),
        tuple(c.customer for c in aspa),
        frozenset(full),
    )


def diff_snapshots(before: Snapshot | None, after: Snapshot, limit: int) -> Changes:
    """What changed from ``before`` (None: nothing before) to ``after``, per ``limit``."""
    return impact_of(compute_delta(before if before is not None else Snapshot(), after), limit)
