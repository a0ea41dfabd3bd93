"""The persisted state (header fields, sources, payloads) and the rules of its shape.

Pure data, no I/O. Times are signed integer microseconds since the Unix epoch (UTC); an entry
that never expires carries `NEVER`. VRPs stay in the packed form of `snapshot.packed` (one
``bytes`` per family, sorted descending) with one expiry per key, so a state of the full global
table costs a few megabytes. Its digest is `persistence.exchange.state_digest` (the SHA-256 of
its exchange document), the header's digests are `persistence.meta_digest`'s.

A `SourceRecord` and a `PersistedState` refuse (``ValueError``) what no valid state holds
(`check_source`, `check_state`), so a commit cannot store it and a read (which builds them)
reports it as damage:

* ``aspa_families`` is zero for a source that cannot deliver ASPAs (zero for one that can: no
  complete ASPA coverage); an ASPA of one address family (afi 1/2) needs that family's bit.
* The v2 -> v1 revocation (contract P-33): metadata saying ``rtr.incremental_usable=false``
  must be exactly `NOT_INCREMENTAL_METADATA` on an RTR version-2 source whose ASPA records,
  coverage and capability were revoked together.
* Groups (P-28): when the state records groups, ids are 0..n-1, names unique, every source is
  in exactly one group (its ``group_id`` and name agree with the group's members), and each
  active group (per kind, or per ASPA family) is a group of that kind holding every source that
  contributes that kind; an aggregate ``aspa`` entry only when both families agree.

The rule of duplicate supports (each is one of its source's entries and ends no later than it)
spans a record's payload, so it is not checked when a record is built (a capture stays
O(sources), P-09) but by `persistence.supports` on every commit, read and import.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

from persistence.kinds import (
    ASPA_FAMILIES_BOTH,
    ASPA_FAMILY_V4,
    ASPA_FAMILY_V6,
    KIND_BITS,
    MODES,
    NOT_INCREMENTAL_METADATA,
    kinds_to_mask,
    mask_to_kinds,
)
from snapshot.model import Aspa, RouterKey
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE

__all__ = [
    "ASN_MAX",
    "ASPA_FAMILIES_BOTH",
    "ASPA_FAMILY_V4",
    "ASPA_FAMILY_V6",
    "KIND_BITS",
    "NEVER",
    "NOT_INCREMENTAL_METADATA",
    "SCHEMA_VERSION",
    "SESSION_MAX",
    "US_PER_SECOND",
    "GroupRecord",
    "PersistReceipt",
    "PersistedState",
    "SourceRecord",
    "StateHeader",
    "StateId",
    "UpstreamRef",
    "check_source",
    "check_state",
    "kinds_to_mask",
    "mask_to_kinds",
    "seconds_to_us",
]

SCHEMA_VERSION = 2
NEVER = (1 << 63) - 1
US_PER_SECOND = 1_000_000
ASN_MAX = 0xFFFF_FFFF
#: The largest RTR session id (16 bits).
SESSION_MAX = 0xFFFF


def seconds_to_us(value: float) -> int:
    """Unix seconds to microseconds; values beyond the int64 range mean `NEVER`."""
    us = round(value * US_PER_SECOND)
    return NEVER if us >= NEVER else us


@dataclass(frozen=True, slots=True)
class StateId:
    """Identifies one persisted state: the owner's epoch (one per start) and its generation."""

    epoch: int
    generation: int

    def __str__(self) -> str:
        return f"{self.epoch}.{self.generation}"


@dataclass(frozen=True, slots=True)
class UpstreamRef:
    """The upstream state a state was derived from (another store's publish): None for us."""

    store_id: str
    epoch: int
    generation: int


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """One configured group: its index in `PersistedState.groups`, name, kinds and members.

    ``source_names`` are sorted (the configuration's order does not change a logical group);
    an empty group is kept.
    """

    group_id: int
    name: str
    kinds: frozenset[str]
    source_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if list(self.source_names) != sorted(set(self.source_names)):
            raise ValueError(f"group {self.name}: source names must be sorted and unique")


class _FromCapabilities(frozenset[str]):
    """The default of `SourceRecord.present`: replaced by the record's capabilities."""


_PRESENT_DEFAULT: frozenset[str] = _FromCapabilities()
_ASPA_FAMILIES_DEFAULT = -1


@dataclass(frozen=True, slots=True, eq=False)
class SourceRecord:
    """One source's complete payload, as it was accepted, with its metadata."""

    name: str
    group: str
    #: Source kind: ``file``, ``http`` or ``rtr``.
    kind: str
    #: Whether the payload is a complete load (always true today: partial loads are never kept).
    complete: bool
    #: Payload kinds the source can deliver, and the kinds it contributed to the published set.
    capabilities: frozenset[str]
    selected: frozenset[str]
    #: Wall time the payload was accepted.
    accepted_at: int
    #: Where the source reads from (path or URL); with the name, its identity.
    location: str = ""
    #: Effective time at which the payload was last evaluated (judged usable and admitted into
    #: the published set): a lower bound of UTC. Stored, but no part of the digest.
    evaluated_at: int = 0
    #: Source-wide end of validity (an RTR source's Expire interval); `NEVER` if none.
    expires_at: int = NEVER
    rtr_session: int | None = None
    rtr_serial: int | None = None
    generated_at: int | None = None
    #: The source's full identity as a non-sensitive digest (kind, endpoint, protocol range,
    #: format, trust configuration, validity policy; header values never): recovery revives
    #: the record only into a source of the same identity. None: stored before it was.
    identity: str | None = None
    #: Packed VRP keys per family and their expiries. The expiries (and the router key and ASPA
    #: sequences below) are arrays and tuples, or a `persistence.deferred.Deferred` over the
    #: source payload's own when a state is captured for commit (P-09: built where written).
    v4: bytes = b""
    v4_expires: Sequence[int] = field(default_factory=lambda: array("q"))
    v6: bytes = b""
    v6_expires: Sequence[int] = field(default_factory=lambda: array("q"))
    router_keys: Sequence[tuple[RouterKey, int]] = ()
    aspas: Sequence[tuple[Aspa, int]] = ()
    #: Index of the source's group in `PersistedState.groups`.
    group_id: int = 0
    #: RTR protocol version of an rtr source's data (0, 1 or 2); None for a JSON source.
    protocol: int | None = None
    #: Kinds whose section (JSON) or PDUs (RTR) were present in the accepted load; by default
    #: the capabilities.
    present: frozenset[str] = _PRESENT_DEFAULT
    invalidated: bool = False
    #: Bit 0 IPv4, bit 1 IPv6: complete ASPA coverage; 0: no ASPA support. By default both
    #: families when the source can deliver ASPAs, else 0.
    aspa_families: int = _ASPA_FAMILIES_DEFAULT
    #: One byte per `aspas` entry: 0 both families (not an IANA value), 1 IPv4, 2 IPv6; empty
    #: means every entry is 0.
    aspa_afis: bytes = b""
    #: The source's raw metadata as canonical JSON (see `NOT_INCREMENTAL_METADATA`).
    metadata_json: str | None = None
    #: Extra supports of payloads already present (contract P-27: a duplicate keeps its own
    #: support position): VRPs as (family 4/6, packed key, expiry), router keys and ASPAs
    #: (with their afi) as (record, expiry).
    vrp_duplicates: Sequence[tuple[int, bytes, int]] = ()
    router_key_duplicates: Sequence[tuple[RouterKey, int]] = ()
    aspa_duplicates: Sequence[tuple[Aspa, int, int]] = ()

    def __post_init__(self) -> None:
        if isinstance(self.present, _FromCapabilities):
            object.__setattr__(self, "present", frozenset(self.capabilities))
        if self.aspa_families == _ASPA_FAMILIES_DEFAULT:
            both = ASPA_FAMILIES_BOTH if "aspa" in self.capabilities else 0
            object.__setattr__(self, "aspa_families", both)
        if not 0 <= self.aspa_families <= ASPA_FAMILIES_BOTH:
            raise ValueError(f"source {self.name}: aspa_families out of range")
        if self.aspa_afis and len(self.aspa_afis) != len(self.aspas):
            raise ValueError(f"source {self.name}: one ASPA afi per ASPA")
        if any(afi > 2 for afi in self.aspa_afis):
            raise ValueError(f"source {self.name}: ASPA afi must be 0, 1 or 2")
        check_source(self)
        if len(self.v4) % V4_KEY_SIZE or len(self.v4) // V4_KEY_SIZE != len(self.v4_expires):
            raise ValueError(f"source {self.name}: IPv4 keys and expiries do not match")
        if len(self.v6) % V6_KEY_SIZE or len(self.v6) // V6_KEY_SIZE != len(self.v6_expires):
            raise ValueError(f"source {self.name}: IPv6 keys and expiries do not match")

    @property
    def incremental_usable(self) -> bool:
        """False only in the retained shape of a v2 -> v1 ASPA revocation (no Serial Query base)."""
        return self.metadata_json != NOT_INCREMENTAL_METADATA

    def afi_of(self, index: int) -> int:
        """The stored afi (0/1/2) of the ``index``-th ASPA."""
        return self.aspa_afis[index] if self.aspa_afis else 0

    @property
    def vrp_count(self) -> int:
        """Number of VRPs (both families)."""
        return len(self.v4_expires) + len(self.v6_expires)


@dataclass(frozen=True, slots=True, eq=False)
class PersistedState:
    """Everything one commit writes, except the time it is written."""

    store_id: str
    state_id: StateId
    config_revision: int
    serial: int
    #: The RTR session ids (v0, v1, v2) routers were served under.
    session_ids: tuple[int, int, int]
    published_at: int
    package_version: str
    sources: tuple[SourceRecord, ...] = ()
    #: The lower bound of effective time the owner had observed when it built the state.
    #: Stored with the state, no part of the digest; it raises the commit's ``written_at``.
    observed_at: int = 0
    #: The stored state a restart recovered from, when this state was built by a recovery (the
    #: database's old publish version, contract P-54); None otherwise. Stored in the header and
    #: covered by the header digest, no part of the state digest.
    recovered_from: StateId | None = None
    #: Every configured group (empty ones kept), indexed by `SourceRecord.group_id`.
    groups: tuple[GroupRecord, ...] = ()
    #: The active group of each kind ("vrp", "router_key", or "aspa_v4"/"aspa_v6"): its name.
    active_groups: tuple[tuple[str, str], ...] = ()
    #: Digest of the SLURM policy in force and that policy as canonical JSON.
    policy_id: str | None = None
    policy_json: str | None = None
    #: "online" or "offline", and an offline state's fixed evaluation time.
    mode: str = "online"
    reference_time: int | None = None
    upstream: UpstreamRef | None = None
    #: The configuration's publish identity and digest (set by the client).
    config_store_id: str | None = None
    config_epoch: int | None = None
    config_identity: str | None = None

    def __post_init__(self) -> None:
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise ValueError(f"source names must be unique: {names}")
        if self.mode not in MODES:
            raise ValueError(f"state mode must be one of {MODES}: {self.mode!r}")
        object.__setattr__(self, "active_groups", tuple(sorted(self.active_groups)))
        check_state(self)

    def time_floor(self) -> int:
        """The latest time the state shows was reached: a commit's ``written_at`` is no earlier.

        The maximum of ``observed_at``, ``published_at`` and every source's ``evaluated_at``
        and ``accepted_at``.
        """
        return max(
            self.observed_at,
            self.published_at,
            *(max(s.evaluated_at, s.accepted_at) for s in self.sources),
        )

    def vrp_count(self) -> int:
        """VRPs over all sources."""
        return sum(s.vrp_count for s in self.sources)


@dataclass(frozen=True, slots=True)
class StateHeader:
    """The stored header: the ``store_meta`` row and our ``publication`` row, as one value.

    ``meta_digest`` covers the ``store_meta`` fields, ``publication_digest`` the publication's
    and the ``meta_digest`` (`persistence.meta_digest`).
    """

    schema_version: int
    store_id: str
    state_id: StateId
    config_revision: int
    serial: int
    session_ids: tuple[int, int, int]
    published_at: int
    written_at: int
    state_digest: bytes
    meta_digest: bytes
    package_version: str
    #: `PersistedState.observed_at` and the `evaluated_digest` of the sources.
    observed_at: int | None = None
    evaluated_digest: bytes | None = None
    recovered_from: StateId | None = None
    config_store_id: str | None = None
    config_epoch: int | None = None
    mode: str = "online"
    reference_time: int | None = None
    upstream: UpstreamRef | None = None
    policy_id: str | None = None
    versions_json: str = ""
    config_identity: str | None = None
    policy_json: str | None = None
    publication_digest: bytes = b""

    def receipt(self, *, retried: bool = False) -> PersistReceipt:
        """The `PersistReceipt` of the commit that wrote this header."""
        return PersistReceipt(
            snapshot_id=self.state_id,
            config_revision=self.config_revision,
            committed_at=self.written_at,
            schema_version=self.schema_version,
            state_digest=self.state_digest,
            retried=retried,
        )


@dataclass(frozen=True, slots=True)
class PersistReceipt:
    """What a commit (or its idempotent retry) actually stored: the persistence contract's receipt.

    ``committed_at`` is the stored ``written_at`` (integer microseconds, UTC); a retry returns the
    original one. ``retried`` is our addition and takes no part in equality.
    """

    snapshot_id: StateId
    config_revision: int
    committed_at: int
    schema_version: int
    state_digest: bytes
    #: True when the same state was already stored (a retry after an unknown outcome).
    retried: bool = field(default=False, compare=False)


#: The keys of `PersistedState.active_groups` and the payload kind each one is of.
ACTIVE_KINDS = {
    "vrp": "vrp",
    "router_key": "router_key",
    "aspa": "aspa",
    "aspa_v4": "aspa",
    "aspa_v6": "aspa",
}
_FAMILY_BIT = {1: ASPA_FAMILY_V4, 2: ASPA_FAMILY_V6}


def _not_incremental(name: str, metadata: str | None) -> bool:
    """Whether ``metadata`` says the data may not serve as an incremental base."""
    if metadata is None:
        return False
    try:
        value = json.loads(metadata)
    except ValueError as exc:
        raise ValueError(f"source {name}: metadata_json is no JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"source {name}: metadata_json is no JSON object")  # noqa: TRY004
    rtr = value.get("rtr")
    return isinstance(rtr, dict) and rtr.get("incremental_usable") is False


def check_source(source: SourceRecord) -> None:
    """``ValueError`` for a source record no valid state holds (see the module text)."""
    name = source.name
    if source.aspa_families and "aspa" not in source.capabilities:
        raise ValueError(f"source {name}: ASPA families of a source without ASPAs")
    for afi in set(source.aspa_afis) | {afi for _, afi, _ in source.aspa_duplicates}:
        if afi and not source.aspa_families & _FAMILY_BIT.get(afi, 0):
            raise ValueError(f"source {name}: an ASPA of afi {afi} outside its families")
    if source.protocol is not None and source.protocol not in {0, 1, 2}:
        raise ValueError(f"source {name}: protocol {source.protocol} is not 0, 1 or 2")
    if _not_incremental(name, source.metadata_json):
        revoked = not (source.aspas or source.aspa_duplicates) and "aspa" not in (
            source.capabilities | source.selected | source.present
        )
        if (
            source.metadata_json != NOT_INCREMENTAL_METADATA
            or source.protocol != 2
            or source.kind != "rtr"
            or not revoked
        ):
            raise ValueError(
                f"source {name}: incremental_usable=false only in the retained shape of a "
                "v2 -> v1 ASPA revocation (rtr, protocol 2, ASPAs, coverage and capability revoked)"
            )


def check_state(state: PersistedState) -> None:
    """``ValueError`` for a state whose groups or active groups disagree with its sources."""
    if state.policy_json is not None and state.policy_id is None:
        raise ValueError("a policy_json without its policy_id")
    if not state.groups:
        if state.active_groups:
            raise ValueError("active groups of a state without groups")
        return
    groups = state.groups
    if [g.group_id for g in groups] != list(range(len(groups))):
        raise ValueError("group ids must be 0..n-1 in order")
    by_name = {g.name: g for g in groups}
    if len(by_name) != len(groups):
        raise ValueError("group names must be unique")
    members = sorted(n for g in groups for n in g.source_names)
    if members != sorted(s.name for s in state.sources):
        raise ValueError("every source must be in exactly one group")
    for source in state.sources:
        if not 0 <= source.group_id < len(groups):
            raise ValueError(f"source {source.name}: group id {source.group_id} is no group")
        group = groups[source.group_id]
        if group.name != source.group or source.name not in group.source_names:
            raise ValueError(f"source {source.name}: not a member of group {group.name}")
    active = dict(state.active_groups)
    if len(active) != len(state.active_groups):
        raise ValueError("one active group per kind")
    for key, name in active.items():
        kind = ACTIVE_KINDS.get(key)
        if kind is None or name not in by_name or kind not in by_name[name].kinds:
            raise ValueError(f"active group {key}={name} is no group of that kind")
    if "aspa" in active and {active.get("aspa_v4"), active.get("aspa_v6")} - {None, active["aspa"]}:
        raise ValueError("an aggregate aspa active group only when both families agree")
    for source in state.sources:
        for kind in source.selected:
            keys = ("aspa", "aspa_v4", "aspa_v6") if kind == "aspa" else (kind,)
            if source.group not in {active.get(k) for k in keys}:
                raise ValueError(
                    f"source {source.name} contributes {kind} outside its kind's active group"
                )
