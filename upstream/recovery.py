"""Between the upstream client and persisted state: build a state to commit, plan a recovery.

Pure functions, no I/O. Recovery keeps only what the rules of the upstream half allow: sources
still configured (same name, kind and location), entries still valid when judged at the wall
clock but never earlier than the state's floor (its ``written_at``, ``observed_at`` and the
source's own ``evaluated_at``), and nothing at all when the wall clock is earlier than the write
time by more than the clock tolerance (the clock cannot be trusted: resynchronise from the
network). Expiry is never recomputed from the restart time; raw expiries are kept.

Each source is judged at its own time: the state's floor (a lower bound of UTC for every source
the state holds) raised by that source's own ``evaluated_at``, never by another source's; a
valid state's ``written_at`` is no earlier than any ``evaluated_at`` (the read checks it). A
reader of another process's state judges it by `persistence.shared` (the same rule, with each
source's own time carried forward on the reader's clock).
"""

from __future__ import annotations

import dataclasses
import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from persistence.deferred import Deferred
from persistence.state import (
    NEVER,
    NOT_INCREMENTAL_METADATA,
    US_PER_SECOND,
    GroupRecord,
    PersistedState,
    SourceRecord,
    StateHeader,
    StateId,
    seconds_to_us,
)
from snapshot.slurm import EMPTY_POLICY, SlurmPolicy
from snapshot.snapshot import Snapshot
from upstream.merge import SourceInput, merge_and_apply
from upstream.payload import NO_EXPIRY, SourcePayload
from upstream.selection import PayloadKind
from upstream.source_entry import Recovered

T = TypeVar("T")


def _us(expires: int) -> int:
    return NEVER if expires >= NO_EXPIRY else expires * US_PER_SECOND


def _us_array(seconds: array[int]) -> array[int]:
    us, never, no_expiry = US_PER_SECOND, NEVER, NO_EXPIRY
    return array("q", [never if e >= no_expiry else e * us for e in seconds])


def _us_last(items: Sequence[tuple[Any, ...]]) -> tuple[Any, ...]:
    return tuple((*head, _us(e)) for *head, e in items)


def _deferred_us(seconds: array[int]) -> Sequence[int]:
    """``seconds`` as stored microseconds, built on first use (P-09: capture shares them)."""
    if not seconds:
        return array("q")
    return Deferred(len(seconds), partial(_us_array, seconds))


def _deferred_last(items: Sequence[T]) -> Sequence[T]:
    """Tuples whose last member (an expiry in seconds) is stored microseconds, built on use."""
    if not items:
        return ()
    return Deferred(len(items), partial(_us_last, items))  # type: ignore[arg-type]


def _seconds(expires_us: int, cap_us: int) -> int:
    value = min(expires_us, cap_us)
    return NO_EXPIRY if value >= NEVER else value // US_PER_SECOND


def _seconds_array(expires_us: Sequence[int], cap_us: int) -> array[int]:
    """`_seconds` of every expiry, in one comprehension (no call per entry: 723k at recovery)."""
    if cap_us < NEVER:  # the source's own expiry caps every entry: none is NO_EXPIRY
        return array("q", [(e if e < cap_us else cap_us) // US_PER_SECOND for e in expires_us])
    return array("q", [e // US_PER_SECOND if e < NEVER else NO_EXPIRY for e in expires_us])


def to_record(
    source: SourceInput, evaluated_wall: float = 0.0, identity: str | None = None
) -> SourceRecord:
    """The persisted form of one source's payload (expiry in microseconds).

    ``evaluated_wall`` is the effective time the build judged the payload at; the record's
    ``evaluated_at`` is never earlier than its ``accepted_at``. O(1) in the payload's size: the
    record shares the payload's packed keys, and its expiries, router keys and ASPAs are
    `persistence.deferred.Deferred` views over the payload's own, converted to microseconds
    where they are first read (the digest and the rows, on the persister's thread; P-09).
    """
    payload = source.payload
    return SourceRecord(
        name=source.name,
        group=source.group,
        kind=source.kind,
        location=source.location,
        complete=True,
        capabilities=frozenset(k.value for k in source.capabilities),
        selected=frozenset(k.value for k in source.selected),
        accepted_at=seconds_to_us(source.accepted_wall),
        evaluated_at=seconds_to_us(max(evaluated_wall, source.accepted_wall)),
        expires_at=NEVER if source.expires_wall is None else seconds_to_us(source.expires_wall),
        rtr_session=source.rtr_session,
        rtr_serial=source.rtr_serial,
        identity=identity,
        generated_at=None if payload.generated is None else payload.generated * US_PER_SECOND,
        v4=payload.v4,
        v4_expires=_deferred_us(payload.v4_expires),
        v6=payload.v6,
        v6_expires=_deferred_us(payload.v6_expires),
        router_keys=_deferred_last(payload.router_keys),
        aspas=_deferred_last(payload.aspas),
        aspa_afis=payload.aspa_afis,
        vrp_duplicates=_deferred_last(payload.vrp_duplicates),
        router_key_duplicates=_deferred_last(payload.router_key_duplicates),
    )


def to_payload(record: SourceRecord) -> SourcePayload:
    """The upstream payload of a record; every entry ends no later than the source's expiry."""
    cap = record.expires_at
    return SourcePayload(
        v4=record.v4,
        v4_expires=_seconds_array(record.v4_expires, cap),
        v6=record.v6,
        v6_expires=_seconds_array(record.v6_expires, cap),
        router_keys=tuple((key, _seconds(e, cap)) for key, e in record.router_keys),
        aspas=tuple((aspa, _seconds(e, cap)) for aspa, e in record.aspas),
        aspa_afis=record.aspa_afis,
        generated=None if record.generated_at is None else record.generated_at // US_PER_SECOND,
        vrp_duplicates=tuple(
            (family, key, _seconds(e, cap)) for family, key, e in record.vrp_duplicates
        ),
        router_key_duplicates=tuple(
            (key, _seconds(e, cap)) for key, e in record.router_key_duplicates
        ),
    )


@dataclass(frozen=True, slots=True)
class Configured:
    """What the client's configuration in force gives every state it stores (P-10, P-28).

    ``groups`` are the configured groups' names in priority order (an empty one is stored
    too); ``identity`` digests the configuration's identity (`upstream.delivery.config_identity`);
    ``policy_json`` is the SLURM policy in force as a document
    (`snapshot.slurm_document.policy_document`), stored only with a state judged under it: its
    ``policy_id``.
    """

    placeholders: tuple[Placeholder, ...] = ()
    groups: tuple[str, ...] = ()
    identity: str | None = None
    policy_id: str | None = None
    policy_json: str | None = None


#: A configuration with nothing configured (tests, a keeping offered no configuration).
NOTHING_CONFIGURED = Configured()


@dataclass(frozen=True, slots=True)
class Placeholder:
    """A configured source with no usable payload in the state: stored as such (P-53)."""

    name: str
    group: str
    kind: str
    location: str
    capabilities: frozenset[PayloadKind]
    #: `upstream.config.source_identity` of its configuration.
    identity: str | None = None


def to_placeholder(source: Placeholder, evaluated_wall: float) -> SourceRecord:
    """The record of a configured but unloaded source: ``complete`` false, no payload."""
    at = seconds_to_us(evaluated_wall)
    return SourceRecord(
        name=source.name,
        group=source.group,
        kind=source.kind,
        location=source.location,
        complete=False,
        capabilities=frozenset(k.value for k in source.capabilities),
        selected=frozenset(),
        accepted_at=at,
        evaluated_at=at,
        identity=source.identity,
    )


def build_state(
    *,
    store_id: str,
    state_id: StateId,
    config_revision: int,
    serial: int,
    session_ids: tuple[int, int, int],
    published_wall: float,
    package_version: str,
    inputs: Iterable[SourceInput],
    observed_wall: float = 0.0,
    evaluated_wall: float = 0.0,
    recovered_from: StateId | None = None,
    placeholders: Iterable[Placeholder] = (),
    active: Mapping[PayloadKind, str | None] | None = None,
    policy_id: str | None = None,
    policy_json: str | None = None,
    groups: Sequence[str] = (),
    config_store_id: str | None = None,
    config_epoch: int | None = None,
    config_identity: str | None = None,
) -> PersistedState:
    """The complete state to commit after a publish.

    ``recovered_from`` is the stored state this process recovered from (P-54), if any;
    ``placeholders`` are the configured sources without a payload in ``inputs`` (P-53).

    ``published_wall``, ``observed_wall`` and ``evaluated_wall`` (the time the build judged the
    sources at, each source's ``evaluated_at``) are effective times (the process's lower bound
    of UTC, which never moves back): all are stored, and the commit's ``written_at`` is never
    earlier than any, so a restart under a set-back wall clock cannot trust the file (issue 12,
    item 10).

    The groups are the configured ``groups`` (empty ones kept) followed by any other group of
    the sources (every configured source is an input or a placeholder), in order of appearance;
    ``active`` is the selection's active group per kind (`grouped`). ``policy_id`` identifies
    the SLURM policy the snapshot was judged under and ``policy_json`` is that policy (None:
    not stored; a reader without its own policy then applies none). ``config_store_id``,
    ``config_epoch`` and ``config_identity`` are the publish identity of the configuration
    (the store's id, the client's epoch) and its digest; each source's ``protocol`` is the RTR
    version its data was received at (None for JSON).
    """
    records, group_records, active_groups = grouped(
        _records(inputs, placeholders, evaluated_wall), active or {}, groups
    )
    return PersistedState(
        store_id=store_id,
        state_id=state_id,
        config_revision=config_revision,
        serial=serial,
        session_ids=session_ids,
        published_at=seconds_to_us(published_wall),
        package_version=package_version,
        sources=records,
        observed_at=seconds_to_us(observed_wall),
        recovered_from=recovered_from,
        groups=group_records,
        active_groups=active_groups,
        policy_id=policy_id or None,
        policy_json=policy_json if policy_id else None,
        config_store_id=config_store_id or None,
        config_epoch=config_epoch,
        config_identity=config_identity,
    )


def grouped(
    records: tuple[SourceRecord, ...],
    active: Mapping[PayloadKind, str | None],
    configured: Sequence[str] = (),
) -> tuple[tuple[SourceRecord, ...], tuple[GroupRecord, ...], tuple[tuple[str, str], ...]]:
    """The records with their ``group_id``, their groups and the active groups (P-28, P-82).

    The groups are the ``configured`` ones (empty ones kept), then any other group of the
    records, in order of appearance; members are sorted by name. A group's kinds are its
    sources' capabilities. The active group of a kind is the group of
    the sources that contributed it (one group by the selection's rule); a kind no source
    contributed keeps ``active``'s group when that is one of the groups.
    """
    names = list(dict.fromkeys([*configured, *(r.group for r in records)]))
    ids = {name: i for i, name in enumerate(names)}
    groups = tuple(
        GroupRecord(
            group_id=i,
            name=name,
            kinds=frozenset(k for r in records if r.group == name for k in r.capabilities),
            source_names=tuple(sorted(r.name for r in records if r.group == name)),
        )
        for i, name in enumerate(names)
    )
    chosen = {k.value: name for k, name in active.items() if name in ids}
    for record in records:
        for kind in record.selected:
            chosen[kind] = record.group
    kinds = {g.name: g.kinds for g in groups}
    active_groups = tuple((k, n) for k, n in sorted(chosen.items()) if k in kinds[n])
    with_ids = tuple(dataclasses.replace(r, group_id=ids[r.group]) for r in records)
    return with_ids, groups, active_groups


def _records(
    inputs: Iterable[SourceInput], placeholders: Iterable[Placeholder], evaluated_wall: float
) -> tuple[SourceRecord, ...]:
    placeholders = tuple(placeholders)
    identities = {p.name: p.identity for p in placeholders}
    loaded = tuple(
        _with_protocol(to_record(s, evaluated_wall, identities.get(s.name)), s.protocol)
        for s in inputs
    )
    names = {r.name for r in loaded}
    unloaded = (to_placeholder(p, evaluated_wall) for p in placeholders if p.name not in names)
    return loaded + tuple(unloaded)


def _with_protocol(record: SourceRecord, protocol: int | None) -> SourceRecord:
    """``record`` with the RTR version its data was received at (an RTR source's only).

    Data of a version-2 sync held by a source that now speaks only version 1 (no ASPA
    capability: a downgrade trimmed its ASPAs) is stored in the retained shape of that
    revocation (P-33): `NOT_INCREMENTAL_METADATA`, protocol 2, the sync's own times, never a
    new v1 End of Data; recovery then starts the source with a Reset.
    """
    if protocol is None or record.kind != "rtr":
        return record
    revoked = protocol == 2 and not record.aspas and "aspa" not in record.capabilities
    metadata = NOT_INCREMENTAL_METADATA if revoked else record.metadata_json
    if record.protocol == protocol and record.metadata_json == metadata:
        return record
    return dataclasses.replace(record, protocol=protocol, metadata_json=metadata)


@dataclass(frozen=True, slots=True)
class SourceIdentity:
    """What must match for a persisted source to be revived."""

    name: str
    kind: str
    location: str
    #: `upstream.config.source_identity` (None: compare kind and location only).
    identity: str | None = None


@dataclass(slots=True)
class RecoveryPlan:
    """What recovery restores, and why anything was left out."""

    recovered: dict[str, Recovered] = field(default_factory=dict)
    #: The snapshot to publish before the network starts (None: nothing valid to serve).
    snapshot: Snapshot | None = None
    #: One line per decision, for the log.
    notes: list[str] = field(default_factory=list)
    #: Whether the wall clock was trusted.
    trusted: bool = True


def plan_recovery(
    header: StateHeader,
    state: PersistedState,
    configured: Sequence[SourceIdentity],
    *,
    wall: float,
    clock_tolerance: float,
    policy: SlurmPolicy | None = EMPTY_POLICY,
) -> RecoveryPlan:
    """Decide what of ``state`` comes back at wall time ``wall``.

    The snapshot gets the SLURM ``policy``, as every snapshot the sources build; None (the
    configured SLURM files are not valid) publishes nothing, so routers never get data
    without the operator's filters.
    """
    plan = RecoveryPlan()
    written = header.written_at / US_PER_SECOND
    if wall < written - clock_tolerance:
        plan.trusted = False
        plan.notes.append(
            f"the wall clock ({wall:.0f}) is {written - wall:.0f} s earlier than the state's "
            f"write time ({written:.0f}), beyond the {clock_tolerance:.0f} s tolerance: "
            "nothing is trusted, resynchronising from the network"
        )
        return plan
    floor = max(wall, written, state.observed_at / US_PER_SECOND)
    known: Mapping[str, SourceIdentity] = {s.name: s for s in configured}
    selected: list[tuple[SourcePayload, frozenset[PayloadKind], float]] = []
    for record in state.sources:
        identity = known.get(record.name)
        if not record.complete:  # a placeholder: configured then, nothing loaded (no error)
            plan.notes.append(f"source {record.name}: not loaded when the state was written")
            continue
        if record.invalidated:
            plan.notes.append(f"source {record.name}: invalidated when written, not revived")
            continue
        if identity is None:
            plan.notes.append(f"source {record.name}: no longer configured, not revived")
            continue
        if (identity.kind, identity.location) != (record.kind, record.location):
            plan.notes.append(
                f"source {record.name}: now {identity.kind} {identity.location}, was "
                f"{record.kind} {record.location}: not revived"
            )
            continue
        if None not in (identity.identity, record.identity) and identity.identity != (
            record.identity
        ):  # a file of before has none: kind and location alone decide there
            plan.notes.append(
                f"source {record.name}: its protocol range, trust or validity configuration "
                "changed: not revived"
            )
            continue
        payload = to_payload(record)
        own = max(floor, record.evaluated_at / US_PER_SECOND)
        valid = payload.snapshot_at(math.floor(own))
        if valid.is_empty():
            plan.notes.append(f"source {record.name}: nothing left valid, not revived")
            continue
        # A v2 -> v1 ASPA revocation (P-33) keeps its entries' remaining life but is no
        # Serial Query base: without the session and serial the source starts with a Reset.
        incremental = record.incremental_usable
        plan.recovered[record.name] = Recovered(
            payload,
            record.accepted_at / US_PER_SECOND,
            max(written, own),
            expires_at=None if record.expires_at >= NEVER else record.expires_at / US_PER_SECOND,
            rtr_session=record.rtr_session if incremental else None,
            rtr_serial=record.rtr_serial if incremental else None,
            rtr_version=record.protocol,
        )
        if not incremental:
            plan.notes.append(f"source {record.name}: no incremental base, it starts with a Reset")
        counts = ", ".join(f"{k}={v}" for k, v in valid.counts().items() if v)
        plan.notes.append(f"source {record.name}: revived ({counts})")
        selected.append((payload, frozenset(PayloadKind(k) for k in record.selected), own))
    if plan.recovered and policy is None:
        plan.notes.append("the SLURM files are not valid: nothing is published until they are")
    elif plan.recovered and policy is not None:
        snapshot = merge_and_apply(_chosen(selected), policy)
        plan.snapshot = None if snapshot.is_empty() else snapshot
    return plan


def _chosen(
    selected: Iterable[tuple[SourcePayload, frozenset[PayloadKind], float]],
) -> dict[PayloadKind, list[tuple[SourcePayload, int]]]:
    """The payloads per kind, each judged at its own time (what `merge_and_apply` takes)."""
    chosen: dict[PayloadKind, list[tuple[SourcePayload, int]]] = {k: [] for k in PayloadKind}
    for payload, kinds, at in selected:
        for kind in kinds:
            chosen[kind].append((payload, math.floor(at)))
    return chosen
