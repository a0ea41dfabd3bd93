"""What a publish changed: `diff_snapshots` (pure, may run in a thread), `snapshot_event`.

Built on `snapshot.delta.compute_delta` (net changes). A kind with more changes than the limit
is named in ``requires_full_revalidation`` and none of its changes are listed, never a
truncated list; the affected prefixes are the changed VRPs' own prefixes (every route inside
one must be revalidated, whatever its origin or length), the affected customers every customer
whose ASPA record changed.
"""

from __future__ import annotations

from dataclasses import dataclass

from snapshot.delta import AspaChange, compute_delta
from snapshot.kinds import PayloadKind
from snapshot.model import IPNetwork, RouterKey, Vrp
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE, split_keys
from snapshot.snapshot import Snapshot
from upstream.events import ClientSnapshot, ClientStatus, EventId, SnapshotEvent, SourceChange

__all__ = [
    "DEFAULT_EVENT_SIZE_LIMIT",
    "EVERYTHING",
    "OFF_LOOP_RECORDS",
    "Changes",
    "diff_snapshots",
    "input_changes",
    "snapshot_event",
    "status_changes",
    "status_key",
]

#: Changes per kind beyond which an event asks for a full revalidation of that kind.
DEFAULT_EVENT_SIZE_LIMIT = 10_000
#: Records (both snapshots together) above which the diff is computed in a worker thread.
OFF_LOOP_RECORDS = 20_000


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


def diff_snapshots(before: Snapshot | None, after: Snapshot, limit: int) -> Changes:
    """What changed from ``before`` (None: nothing before) to ``after``, per ``limit``."""
    delta = compute_delta(before if before is not None else Snapshot(), after)
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


def snapshot_event(
    event_id: EventId, before: ClientSnapshot | None, after: ClientSnapshot, changes: Changes
) -> SnapshotEvent:
    """The event publishing ``after`` (``before``: the snapshot it replaces)."""
    if before is None:
        reason = "initial"
    elif before.config_revision != after.config_revision:
        reason = "config"
    else:
        reason = "refresh" if changes.empty else "data"
    return SnapshotEvent(
        event_id,
        after,
        None if before is None else before.id,
        after.id,
        None if before is None else before.config_revision,
        after.config_revision,
        reason,
        changes.vrps_added,
        changes.vrps_removed,
        changes.router_keys_added,
        changes.router_keys_removed,
        changes.aspa_changes,
        input_changes(before, after),
        changes.affected_prefixes,
        changes.affected_customers,
        changes.requires_full_revalidation,
    )


def input_changes(before: ClientSnapshot | None, after: ClientSnapshot) -> tuple[SourceChange, ...]:
    """Sources added, removed, with a new payload or a new selection (by source name)."""
    old = {i.name: i for i in (before.inputs if before is not None else ())}
    new = {i.name: i for i in after.inputs}
    changes: list[SourceChange] = []
    for name in sorted(old.keys() | new.keys()):
        a, b = old.get(name), new.get(name)
        if a is None or b is None:
            what = "added" if a is None else "removed"
            changes.append(SourceChange(name, what, None if a is None else a.group, None))
            continue
        if a.payload is not b.payload:
            changes.append(
                SourceChange(name, "payload", str(a.accepted_wall), str(b.accepted_wall))
            )
        if a.selected != b.selected:
            changes.append(SourceChange(name, "selection", _kinds(a.selected), _kinds(b.selected)))
    return tuple(changes)


def _kinds(kinds: frozenset[PayloadKind]) -> str:
    return ",".join(sorted(k.value for k in kinds))


def status_key(status: ClientStatus) -> object:
    """What a status event is sent for: groups, source states, connections, availability."""
    return (
        tuple(sorted((k.value, v or "") for k, v in status.active.items())),
        tuple((s.name, s.state, s.connected) for s in status.sources),
        tuple(sorted(status.availability.items())),
    )


def _text(value: object) -> str | None:
    if value is None:
        return None
    return str(getattr(value, "value", value))


def status_changes(before: ClientStatus | None, after: ClientStatus) -> tuple[SourceChange, ...]:
    """Each source's change of state, connection or availability (by source name)."""
    old = {s.name: s for s in (before.sources if before is not None else ())}
    changes: list[SourceChange] = []
    for source in after.sources:
        prior = old.get(source.name)
        for what in ("state", "connected"):
            a = None if prior is None else getattr(prior, what)
            b = getattr(source, what)
            if prior is None or a != b:
                changes.append(SourceChange(source.name, what, _text(a), _text(b)))
    was = {} if before is None else before.availability
    for name, value in sorted(after.availability.items()):
        if was.get(name) != value:
            changes.append(SourceChange(name, "availability", was.get(name), value))
    gone = sorted(old.keys() - {s.name for s in after.sources})
    changes.extend(SourceChange(name, "removed", _text(old[name].state), None) for name in gone)
    return tuple(changes)
