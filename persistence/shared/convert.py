"""Pure conversion of a persisted state into a `Snapshot` with per-kind usable-until times.

No I/O, no clock: the caller passes the time ``now`` (Unix seconds) it judges the state at.
Each source contributes the kinds it was selected for, judged at its own time: ``now``, but
never earlier than its own anchor in ``own`` (its ``evaluated_at`` as the reader carries it; the
stored one when absent), never at another source's. An entry is kept while its expiry (capped by
the source's own end of validity) is after that time. A kind's usable-until time is the
earliest expiry among the entries kept for it, taken back to the reader's time ``now`` (a source
judged ahead of ``now`` reaches its ends that much earlier; None: nothing of it ever expires),
so a snapshot never answers for an entry past its end. The stored payloads are the sources'
selected payloads before SLURM; the ``policy`` given (the reader's own, or the owner's stored
one, `owner_policy`) is applied to the result.

ASPA families (`judge_families`) are judged each on its own, never one guessed from the other:
a family is covered while a source selected for ASPA, in the group the writer recorded as
active for that family (``aspa_v4``/``aspa_v6`` of `PersistedState.active_groups`, or the
aggregate ``aspa`` entry, which the state holds only when both families agree; any group when
the state records no active groups at all), has the family's bit in its
``aspa_families`` and has not reached its own end of validity. Its usable-until time is the
earliest end among those sources' ends of validity and their kept ASPA entries of that family
(stored afi 0, both families, or the family's own), taken back to the reader's time as above.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from persistence.kinds import ASPA_FAMILY_V4, ASPA_FAMILY_V6
from persistence.shared.types import Afi
from persistence.state import NEVER, US_PER_SECOND, PersistedState, SourceRecord, StateHeader
from snapshot.kinds import PayloadKind
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE
from snapshot.slurm import SlurmPolicy
from snapshot.slurm_apply import apply_policy
from snapshot.slurm_document import read_policy_document
from snapshot.snapshot import Snapshot, SnapshotBuilder

__all__ = [
    "FAMILY_GROUP",
    "AspaFamilies",
    "active_groups",
    "floor_of",
    "judge_families",
    "judge_state",
    "owner_policy",
    "uncovered",
]

#: Each family's `SourceRecord.aspa_families` bit, stored ASPA afi and active-group key.
FAMILY_BIT = {Afi.IPV4: ASPA_FAMILY_V4, Afi.IPV6: ASPA_FAMILY_V6}
FAMILY_AFI = {Afi.IPV4: 1, Afi.IPV6: 2}
FAMILY_GROUP = {Afi.IPV4: "aspa_v4", Afi.IPV6: "aspa_v6"}
#: The `PersistedState.active_groups` key of each kind.
KIND_GROUP = {PayloadKind.VRP: "vrp", PayloadKind.ROUTER_KEY: "router_key"}


def floor_of(header: StateHeader, state: PersistedState) -> float:
    """The lower bound of UTC the state shows (its write and observed times), in seconds."""
    return max(header.written_at, state.observed_at) / US_PER_SECOND


def owner_policy(state: PersistedState) -> SlurmPolicy | None:
    """The SLURM policy the owner stored with ``state`` (None: it stored none).

    Raises:
        SlurmError: the stored text is no valid SLURM document.
    """
    text = state.policy_json
    return None if text is None else read_policy_document(text, "the owner's stored SLURM policy")


def active_groups(state: PersistedState) -> dict[PayloadKind, tuple[str, ...]]:
    """The writer's active groups per kind.

    As the state records them (`PersistedState.active_groups`: VRP and router keys by kind,
    ASPA the groups of both families); for a state that records none, the groups of the
    sources selected for each kind: a source's ``selected`` kinds are the ones it contributed
    to the writer's published set, so its group was active for them. Either way this reads the
    writer's choice, it guesses nothing.
    """
    if state.active_groups:
        recorded = dict(state.active_groups)
        by_kind = {kind: recorded.get(key) for kind, key in KIND_GROUP.items()}
        families = {recorded.get(key) for key in (*FAMILY_GROUP.values(), "aspa")} - {None}
        result = {kind: () if name is None else (name,) for kind, name in by_kind.items()}
        return {**result, PayloadKind.ASPA: tuple(sorted(n for n in families if n is not None))}
    groups: dict[PayloadKind, set[str]] = {kind: set() for kind in PayloadKind}
    for source in state.sources:
        for kind in PayloadKind:
            if kind.value in source.selected:
                groups[kind].add(source.group)
    return {kind: tuple(sorted(names)) for kind, names in groups.items()}


@dataclass(frozen=True, slots=True)
class AspaFamilies:
    """Each ASPA family of a state judged on its own (see the module docstring)."""

    #: The families some live source of the family's active group covers completely.
    covered: frozenset[Afi]
    #: Each family's usable-until time (None: never, or not covered).
    until: dict[Afi, float | None]
    #: The writer's active group of each family, as the state records it (none: ``()``).
    groups: dict[Afi, tuple[str, ...]]


def _family_sources(state: PersistedState, afi: Afi, group: str | None) -> Iterable[SourceRecord]:
    """The sources that may cover ``afi``: selected for ASPA, of its group, with its bit."""
    for source in state.sources:
        if "aspa" not in source.selected or not source.aspa_families & FAMILY_BIT[afi]:
            continue
        if group is None or source.group == group:
            yield source


def judge_families(
    state: PersistedState, now: float, *, own: Mapping[str, float] | None = None
) -> AspaFamilies:
    """Each ASPA family of ``state`` at ``now`` (sources at ``own``, as `judge_state`)."""
    given = own or {}
    recorded = dict(state.active_groups)
    base_us = round(now * US_PER_SECOND)
    covered: set[Afi] = set()
    until: dict[Afi, float | None] = dict.fromkeys(Afi)
    for afi in Afi:
        group = _family_group(recorded, afi)
        if recorded and group is None:
            continue  # the writer had no active group for this family
        earliest = NEVER
        for source in _family_sources(state, afi, group):
            at = max(now, given.get(source.name, source.evaluated_at / US_PER_SECOND))
            now_us = round(at * US_PER_SECOND)
            ahead = now_us - base_us
            cap = source.expires_at
            if cap <= now_us:
                continue  # past its own end of validity: it covers nothing
            covered.add(afi)
            earliest = min(earliest, _back(cap, ahead))
            for index, (_, expiry) in enumerate(source.aspas):
                end = min(expiry, cap)
                if source.afi_of(index) in {0, FAMILY_AFI[afi]} and end > now_us:
                    earliest = min(earliest, _back(end, ahead))
        if afi in covered and earliest < NEVER:
            until[afi] = earliest / US_PER_SECOND
    return AspaFamilies(frozenset(covered), until, uncovered(state).groups)


def uncovered(state: PersistedState) -> AspaFamilies:
    """No family covered (a refused state), with the writer's active group of each family."""
    recorded = dict(state.active_groups)
    groups = {afi: tuple(filter(None, [_family_group(recorded, afi)])) for afi in Afi}
    return AspaFamilies(frozenset(), dict.fromkeys(Afi), groups)


def _family_group(recorded: Mapping[str, str], afi: Afi) -> str | None:
    """The writer's active group of ``afi``: its own entry, else the aggregate of both."""
    return recorded.get(FAMILY_GROUP[afi], recorded.get("aspa"))


def _keys(
    packed: bytes, expires: Sequence[int], width: int, cap: int, now: int
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
