"""The consistency rules of a state's shape, checked by common code on every build, commit and read.

A `SourceRecord` and a `PersistedState` refuse (``ValueError``) what no valid state holds, so a
commit cannot store it and a read (which builds them) reports it as damage:

* ``aspa_families`` is zero for a source that cannot deliver ASPAs (zero for one that can: no
  complete ASPA coverage); an ASPA of one address family (afi 1/2) needs that family's bit.
* The v2 -> v1 revocation (contract P-33): metadata saying ``rtr.incremental_usable=false``
  must be exactly `NOT_INCREMENTAL_METADATA` on an RTR version-2 source whose ASPA records,
  coverage and capability were revoked together.
* Groups (P-28): when the state records groups, ids are 0..n-1, names unique, every source is
  in exactly one group (its ``group_id`` and name agree with the group's members), and each
  active group (per kind, or per ASPA family) is a group of that kind holding every source that
  contributes that kind; an aggregate ``aspa`` entry only when both families agree.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from persistence.kinds import ASPA_FAMILY_V4, ASPA_FAMILY_V6, NOT_INCREMENTAL_METADATA

if TYPE_CHECKING:
    from persistence.state import PersistedState, SourceRecord

__all__ = ["ACTIVE_KINDS", "check_source", "check_state"]

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
