"""Pure conversion of a persisted state into a `Snapshot` with per-kind usable-until times.

No I/O, no clock: the caller passes the time ``now`` (Unix seconds) it judges the state at.
Each source contributes the kinds it was selected for, judged at its own time: ``now``, but
never earlier than its own anchor in ``own`` (its ``evaluated_at`` as the reader carries it; the
stored one when absent), never at another source's. An entry is kept while its expiry (capped by
the source's own end of validity) is after that time. A kind's usable-until time is the
earliest expiry among the entries kept for it, taken back to the reader's time ``now`` (a source
judged ahead of ``now`` reaches its ends that much earlier; None: nothing of it ever expires),
so a snapshot never answers for an entry past its end. The stored payloads are the sources'
selected payloads before the owner's SLURM (the owner re-applies its own on recovery); a
reader's own ``policy`` is applied to the result when given, none otherwise.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping

from persistence.state import NEVER, US_PER_SECOND, PersistedState, StateHeader
from snapshot.kinds import PayloadKind
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE
from snapshot.slurm import SlurmPolicy
from snapshot.slurm_apply import apply_policy
from snapshot.snapshot import Snapshot, SnapshotBuilder

__all__ = ["active_groups", "floor_of", "judge_state"]


def floor_of(header: StateHeader, state: PersistedState) -> float:
    """The lower bound of UTC the state shows (its write and observed times), in seconds."""
    return max(header.written_at, state.observed_at) / US_PER_SECOND


def active_groups(state: PersistedState) -> dict[PayloadKind, tuple[str, ...]]:
    """The writer's active groups per kind: the groups of the sources selected for it.

    A source's ``selected`` kinds are the ones it contributed to the writer's published set,
    so its group was active for them; this reads the writer's choice, it guesses nothing.
    """
    groups: dict[PayloadKind, set[str]] = {kind: set() for kind in PayloadKind}
    for source in state.sources:
        for kind in PayloadKind:
            if kind.value in source.selected:
                groups[kind].add(source.group)
    return {kind: tuple(sorted(names)) for kind, names in groups.items()}


def _keys(
    packed: bytes, expires: array[int], width: int, cap: int, now: int
) -> Iterable[tuple[bytes, int]]:
    for index, expiry in enumerate(expires):
        end = min(expiry, cap)
        if end > now:
            yield packed[index * width : (index + 1) * width], end


def _back(end: int, ahead: int) -> int:
    """An end on a source's own time, taken back by ``ahead`` to the reader's time."""
    return end if end >= NEVER else end - ahead


def judge_state(
    state: PersistedState,
    now: float,
    *,
    own: Mapping[str, float] | None = None,
    policy: SlurmPolicy | None = None,
) -> tuple[Snapshot, dict[PayloadKind, float | None]]:
    """The snapshot of ``state`` at ``now`` and each kind's usable-until time (seconds).

    ``own`` gives a source's own time (see the module docstring); ``policy`` a SLURM policy
    applied to the result (None: the stored payload as it is).
    """
    given = own or {}
    builder = SnapshotBuilder()
    v4: set[bytes] = set()
    v6: set[bytes] = set()
    earliest = dict.fromkeys(PayloadKind, NEVER)
    base_us = round(now * US_PER_SECOND)
    for source in state.sources:
        at = max(now, given.get(source.name, source.evaluated_at / US_PER_SECOND))
        now_us = round(at * US_PER_SECOND)
        ahead = now_us - base_us  # the source's ends, seen from the reader's time
        cap = source.expires_at
        if PayloadKind.VRP.value in source.selected:
            for packed, expires, width, target in (
                (source.v4, source.v4_expires, V4_KEY_SIZE, v4),
                (source.v6, source.v6_expires, V6_KEY_SIZE, v6),
            ):
                for key, end in _keys(packed, expires, width, cap, now_us):
                    target.add(key)
                    earliest[PayloadKind.VRP] = min(earliest[PayloadKind.VRP], _back(end, ahead))
        if PayloadKind.ROUTER_KEY.value in source.selected:
            for router_key, expiry in source.router_keys:
                end = min(expiry, cap)
                if end > now_us:
                    builder.add_router_key(router_key)
                    earliest[PayloadKind.ROUTER_KEY] = min(
                        earliest[PayloadKind.ROUTER_KEY], _back(end, ahead)
                    )
        if PayloadKind.ASPA.value in source.selected:
            for aspa, expiry in source.aspas:
                end = min(expiry, cap)
                if end > now_us:
                    builder.add_aspa(aspa)
                    earliest[PayloadKind.ASPA] = min(earliest[PayloadKind.ASPA], _back(end, ahead))
    built = builder.build()
    snapshot = Snapshot(
        b"".join(sorted(v4, reverse=True)),
        b"".join(sorted(v6, reverse=True)),
        built.router_keys,
        built.aspas,
    )
    if policy is not None:
        snapshot = apply_policy(policy, snapshot)
    until = {k: None if t >= NEVER else t / US_PER_SECOND for k, t in earliest.items()}
    return snapshot, until
