"""Building one snapshot from the chosen payloads: merge per kind, SLURM, usable-until times.

Pure functions over immutable payloads (run in worker threads by the aggregator): the union of
each kind's payloads judged at one time (ASPA union per customer), the SLURM policy on top,
and the times until which each kind, and each payload, stays as built.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from snapshot.kinds import PayloadKind
from snapshot.model import Aspa
from snapshot.slurm import SlurmPolicy
from snapshot.slurm_apply import apply_policy
from snapshot.snapshot import Snapshot, SnapshotBuilder
from upstream.json_format import SourcePayload

__all__ = [
    "Build",
    "Built",
    "Chosen",
    "SourceInput",
    "Timed",
    "build_snapshot",
    "merge_and_apply",
    "merge_at",
    "merge_by_kind",
]


@dataclass(frozen=True, slots=True)
class SourceInput:
    """One source's payload as used for a build, with what persistence needs to restore it."""

    name: str
    group: str
    kind: str
    location: str
    capabilities: frozenset[PayloadKind]
    #: The payload kinds for which this source's group is active.
    selected: frozenset[PayloadKind]
    payload: SourcePayload
    #: Effective time the payload was first admitted (recovered: when it was first admitted).
    accepted_wall: float
    #: Effective time after which none of this payload is valid (an RTR source's Expire).
    expires_wall: float | None = None
    rtr_session: int | None = None
    rtr_serial: int | None = None


@dataclass(frozen=True, slots=True)
class Build:
    """One built snapshot with everything it was built from and until when it holds."""

    snapshot: Snapshot
    active: dict[PayloadKind, str | None]
    #: Effective time after which a kind's data in ``snapshot`` is no longer exact (None: never).
    usable_until: dict[PayloadKind, float | None]
    inputs: tuple[SourceInput, ...]
    #: The effective time the data was judged at.
    evaluated_at: float


Timed = tuple[SourcePayload, int]  # a payload and the time its entries are judged at


def merge_at(payloads: Sequence[SourcePayload], now: int) -> Snapshot:
    """The union of the entries of ``payloads`` that are valid at ``now``."""
    timed = [(p, now) for p in payloads]
    return merge_by_kind(dict.fromkeys(PayloadKind, timed))


def merge_by_kind(payloads: dict[PayloadKind, list[Timed]]) -> Snapshot:
    """One snapshot whose VRPs, ASPAs and router keys each come from their own payloads."""
    merged: dict[PayloadKind, Snapshot] = {}
    by_id: dict[tuple[tuple[int, int], ...], Snapshot] = {}
    for kind in PayloadKind:
        chosen = payloads.get(kind, [])
        key = tuple((id(p), now) for p, now in chosen)
        if key not in by_id:
            snapshots = [p.snapshot_at(now) for p, now in chosen]
            if len(snapshots) == 1:
                by_id[key] = snapshots[0]
            else:
                builder = SnapshotBuilder()
                for snap in snapshots:
                    builder.update(snap)
                by_id[key] = builder.build()
        merged[kind] = by_id[key]
    vrps = merged[PayloadKind.VRP]
    aspas: tuple[Aspa, ...] = merged[PayloadKind.ASPA].aspas
    return Snapshot(vrps.v4, vrps.v6, merged[PayloadKind.ROUTER_KEY].router_keys, aspas)


def merge_and_apply(payloads: dict[PayloadKind, list[Timed]], policy: SlurmPolicy) -> Snapshot:
    """`merge_by_kind`, then the SLURM ``policy`` (filters, then assertions)."""
    return apply_policy(policy, merge_by_kind(payloads))


#: What one kind is built from: (payload, source-wide deadline) per chosen source.
Chosen = dict[PayloadKind, list[tuple[SourcePayload, float | None]]]


@dataclass(frozen=True, slots=True)
class Built:
    """What `build_snapshot` makes: the snapshot and when anything in it changes by itself."""

    snapshot: Snapshot
    #: Per kind: until when that kind's data stays exact (None: no limit).
    usable_until: dict[PayloadKind, float | None]
    #: The first time after the judged time at which any payload given changes by itself.
    next_change: float
    #: Each payload's last record expiry, keyed by ``id(payload)``.
    last_expiry: dict[int, int | None]


def build_snapshot(
    chosen: Chosen,
    everything: Iterable[tuple[SourcePayload | None, float | None]],
    policy: SlurmPolicy,
    judged: float,
) -> Built:
    """The snapshot of ``chosen`` at ``judged``, and the times that follow (worker thread).

    ``everything`` is every source's payload and deadline, the chosen ones among them: each
    payload's records are scanned once, for its first expiry per kind and its last expiry.
    """
    at = math.floor(judged)
    snapshot = merge_and_apply({k: [(p, at) for p, _ in v] for k, v in chosen.items()}, policy)
    firsts: dict[int, dict[PayloadKind, int | None]] = {}
    last: dict[int, int | None] = {}
    times: list[float] = []
    for payload, deadline in everything:
        if payload is None:
            continue
        if deadline is not None and deadline > judged:
            times.append(deadline)
        if id(payload) not in firsts:
            per_kind = {k: payload.earliest_expiry_after(at, k) for k in PayloadKind}
            firsts[id(payload)] = per_kind
            last[id(payload)] = payload.last_expiry()
            times.extend(t for t in per_kind.values() if t is not None)
    until: dict[PayloadKind, float | None] = {}
    for kind in PayloadKind:
        ends: list[float] = []
        for payload, deadline in chosen.get(kind, []):
            if deadline is not None:
                ends.append(deadline)
            first = firsts[id(payload)][kind]
            if first is not None:
                ends.append(first)
        until[kind] = min(ends, default=None)
    return Built(snapshot, until, min(times, default=math.inf), last)
