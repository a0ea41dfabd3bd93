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
    "Chosen",
    "SourceInput",
    "Timed",
    "build_snapshot",
    "merge_and_apply",
    "merge_at",
    "merge_by_kind",
    "next_change",
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


def build_snapshot(
    chosen: Chosen, policy: SlurmPolicy, judged: float
) -> tuple[Snapshot, dict[PayloadKind, float | None]]:
    """The snapshot at ``judged`` and each kind's usable-until time (worker thread)."""
    at = math.floor(judged)
    snapshot = merge_and_apply({k: [(p, at) for p, _ in v] for k, v in chosen.items()}, policy)
    until: dict[PayloadKind, float | None] = {}
    for kind in PayloadKind:
        times: list[float] = []
        for payload, deadline in chosen.get(kind, []):
            if deadline is not None:
                times.append(deadline)
            first = payload.next_expiry(at, kind)
            if first is not None:
                times.append(first)
        until[kind] = min(times, default=None)
    return snapshot, until


def next_change(
    entries: Iterable[tuple[SourcePayload | None, float | None]], now: float
) -> tuple[float, dict[int, int | None]]:
    """When any of ``entries`` next changes by itself after ``now``; each payload's last expiry.

    The last record expiries are keyed by ``id(payload)``. Runs in a worker thread: both scan
    every record.
    """
    times: list[float] = []
    last: dict[int, int | None] = {}
    for payload, deadline in entries:
        if payload is None:
            continue
        if deadline is not None and deadline > now:
            times.append(deadline)
        first = payload.next_expiry(now)
        if first is not None:
            times.append(first)
        last[id(payload)] = payload.last_expiry()
    return min(times, default=math.inf), last
