"""What a publish changed: `snapshot_event` of a `diff_snapshots` result, source changes.

The diff and its conservative impact (`Changes`: a kind over the limit is named in
``requires_full_revalidation``, never a truncated list; affected prefixes and customers) are
`snapshot.impact`'s, pure and shared with the persistence layer's shared reader; they are
re-exported here for the client.
"""

from __future__ import annotations

from snapshot.impact import DEFAULT_EVENT_SIZE_LIMIT, EVERYTHING, Changes, diff_snapshots
from snapshot.kinds import PayloadKind
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

#: Records (both snapshots together) above which the diff is computed in a worker thread.
OFF_LOOP_RECORDS = 20_000


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
