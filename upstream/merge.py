"""Building one snapshot from the chosen payloads: merge per kind, SLURM, usable-until times.

Pure functions over immutable payloads (run in worker threads by the aggregator): the union of
each kind's payloads judged at one time (ASPA union per customer), the SLURM policy on top,
and the times until which each kind, and each payload, stays as built.

A `MergeCache` keeps each kind's last merge with the time until which it stays exact: a build
that reuses a kind's payloads within that time reuses the merge (a rebuild after another
group's change, or after a discarded build, merges only the kinds whose inputs changed).
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
from upstream.payload import SourcePayload

__all__ = [
    "Build",
    "Built",
    "Chosen",
    "MergeCache",
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
    #: The RTR protocol version its data was received at (`SourceRecord.protocol`); None: JSON.
    protocol: int | None = None


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
    #: `SlurmPolicy.identity` of the SLURM policy applied.
    slurm_id: str = ""


Timed = tuple[SourcePayload, int]  # a payload and the time its entries are judged at


def merge_at(payloads: Sequence[SourcePayload], now: int) -> Snapshot:
    """The union of the entries of ``payloads`` that are valid at ``now``."""
    timed = [(p, now) for p in payloads]
    return merge_by_kind(dict.fromkeys(PayloadKind, timed))


@dataclass(slots=True)
class _Merged:
    payloads: tuple[SourcePayload, ...]  # held, so identity comparisons stay sound
    at: int
    valid_below: float
    snapshot: Snapshot


class MergeCache:
    """The last merge of each kind, reused while its payloads and their entries are unchanged.

    Owned by one builder and used by one build at a time (it is not locked).
    """

    def __init__(self) -> None:
        """An empty cache."""
        self._kinds: dict[PayloadKind, _Merged] = {}
        #: How many kinds the last build merged anew and how many it reused (for tests, logs).
        self.merged = 0
        self.reused = 0

    def get(self, kind: PayloadKind, chosen: Sequence[Timed]) -> Snapshot | None:
        """The cached merge of ``chosen`` for ``kind`` if it is still exact, else None."""
        hit = self._kinds.get(kind)
        if hit is None or len(hit.payloads) != len(chosen):
            return None
        for payload, (given, at) in zip(hit.payloads, chosen, strict=True):
            if payload is not given or not hit.at <= at < hit.valid_below:
                return None
        return hit.snapshot

    def put(
        self, kind: PayloadKind, chosen: Sequence[Timed], snapshot: Snapshot, valid_below: float
    ) -> None:
        """Keep ``snapshot`` as the merge of ``chosen`` for ``kind`` (all judged at one time)."""
        at = chosen[0][1] if chosen else 0
        self._kinds[kind] = _Merged(tuple(p for p, _ in chosen), at, valid_below, snapshot)


def merge_by_kind(payloads: dict[PayloadKind, list[Timed]]) -> Snapshot:
    """One snapshot whose VRPs, ASPAs and router keys each come from their own payloads."""
    return _assemble(_merge_kinds(payloads, None)[0])


def _merge_kinds(
    payloads: dict[PayloadKind, list[Timed]], cache: MergeCache | None
) -> tuple[dict[PayloadKind, Snapshot], set[PayloadKind]]:
    """Each kind's merge, and the kinds merged anew (not taken from ``cache``)."""
    merged: dict[PayloadKind, Snapshot] = {}
    fresh: set[PayloadKind] = set()
    by_id: dict[tuple[tuple[int, int], ...], Snapshot] = {}
    for kind in PayloadKind:
        chosen = payloads.get(kind, [])
        cached = None if cache is None else cache.get(kind, chosen)
        if cached is not None:
            merged[kind] = cached
            continue
        fresh.add(kind)
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
    if cache is not None:
        cache.merged, cache.reused = len(fresh), len(PayloadKind) - len(fresh)
    return merged, fresh


def _assemble(merged: dict[PayloadKind, Snapshot]) -> Snapshot:
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
    cache: MergeCache | None = None,
) -> Built:
    """The snapshot of ``chosen`` at ``judged``, and the times that follow (worker thread).

    ``everything`` is every source's payload and deadline, the chosen ones among them: each
    payload's records are scanned once, for its first expiry per kind and its last expiry.
    With ``cache``, a kind merged before from the same payloads and still exact is reused,
    and the kinds merged anew are kept in it.
    """
    at = math.floor(judged)
    timed = {k: [(p, at) for p, _ in v] for k, v in chosen.items()}
    merged, fresh = _merge_kinds(timed, cache)
    snapshot = apply_policy(policy, _assemble(merged))
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
    if cache is not None:
        for kind in fresh:
            firsts_of_kind = (firsts[id(p)][kind] for p, _ in chosen.get(kind, []))
            valid_below = min((t for t in firsts_of_kind if t is not None), default=math.inf)
            cache.put(kind, timed.get(kind, []), merged[kind], valid_below)
    return Built(snapshot, until, min(times, default=math.inf), last)
