"""Each ASPA family judged on its own (P-65): coverage from the sources' ``aspa_families`` and
the writer's per-family active groups, never guessed from the other family or the aggregate;
per-family usable-until times from the family's own entries and its sources' ends."""

from __future__ import annotations

import dataclasses

from persistence.shared import Afi, SharedSnapshot
from persistence.shared.convert import active_groups, judge_families, judge_state, uncovered
from persistence.state import NEVER, GroupRecord, PersistedState, SourceRecord, StateId
from snapshot.kinds import PayloadKind
from snapshot.model import Aspa

US = 1_000_000
NOW = 1_000.0


def source(
    name: str,
    group: str,
    families: int,
    aspas: tuple[tuple[int, float | None, int], ...],
    *,
    expires_at: int = NEVER,
    selected: frozenset[str] = frozenset({"vrp", "aspa"}),
) -> SourceRecord:
    """A source selected for ``selected`` with (customer, end in seconds or None, afi) ASPAs."""
    return SourceRecord(
        name=name,
        group=group,
        kind="file",
        location=f"/tmp/{name}.json",
        complete=True,
        capabilities=frozenset({"vrp", "aspa"}),
        selected=selected,
        accepted_at=0,
        evaluated_at=round(NOW * US),
        expires_at=expires_at,
        aspas=tuple(
            (Aspa(customer, (64511,)), NEVER if end is None else round(end * US))
            for customer, end, _ in aspas
        ),
        aspa_afis=bytes(afi for _, _, afi in aspas),
        aspa_families=families,
    )


def state(*sources: SourceRecord, groups: tuple[tuple[str, str], ...] = ()) -> PersistedState:
    """A state of ``sources`` with the active ``groups`` (each group holds both kinds)."""
    names = sorted({s.group for s in sources})
    records = tuple(
        GroupRecord(
            i,
            name,
            frozenset({"vrp", "aspa"}),
            tuple(sorted(s.name for s in sources if s.group == name)),
        )
        for i, name in enumerate(names)
    )
    placed = tuple(dataclasses.replace(s, group_id=names.index(s.group)) for s in sources)
    return PersistedState(
        "store",
        StateId(1, 1),
        1,
        1,
        (1, 2, 3),
        0,
        "t",
        placed,
        groups=records if groups else (),
        active_groups=groups,
    )


def test_each_family_follows_its_own_active_group_and_entries() -> None:
    v4 = source("a", "left", 1, ((64500, NOW + 10, 1), (64501, NOW + 50, 0)))
    v6 = source(
        "b", "right", 3, ((64502, NOW + 20, 2), (64503, NOW + 5, 1)), selected=frozenset({"aspa"})
    )
    recorded = (("vrp", "left"), ("aspa_v4", "left"), ("aspa_v6", "right"))
    families = judge_families(state(v4, v6, groups=recorded), NOW)
    assert families.covered == {Afi.IPV4, Afi.IPV6}
    assert families.groups == {Afi.IPV4: ("left",), Afi.IPV6: ("right",)}
    # IPv4: its own entry (afi 1) and the both-families one (afi 0) of its group's source; the
    # IPv4 entry of the other group's source is no part of it, though that source covers IPv4.
    assert families.until == {Afi.IPV4: NOW + 10, Afi.IPV6: NOW + 20}
    groups = active_groups(state(v4, v6, groups=recorded))
    assert groups == {
        PayloadKind.VRP: ("left",),
        PayloadKind.ROUTER_KEY: (),
        PayloadKind.ASPA: ("left", "right"),
    }


def test_a_family_without_a_recorded_active_group_is_not_guessed() -> None:
    both = source("a", "left", 3, ((64500, None, 0),))
    families = judge_families(state(both, groups=(("vrp", "left"), ("aspa_v4", "left"))), NOW)
    # The source could cover IPv6 too, but the writer had no active IPv6 ASPA group.
    assert families.covered == {Afi.IPV4}
    assert families.groups == {Afi.IPV4: ("left",), Afi.IPV6: ()}
    assert families.until == {Afi.IPV4: None, Afi.IPV6: None}


def test_without_recorded_groups_coverage_comes_from_the_sources_families() -> None:
    v4_only = source("a", "left", 1, ((64500, NOW + 30, 0),))
    families = judge_families(state(v4_only), NOW)
    assert families.covered == {Afi.IPV4}
    assert families.until == {Afi.IPV4: NOW + 30, Afi.IPV6: None}
    vrp_only = dataclasses.replace(v4_only, selected=frozenset({"vrp"}))
    assert judge_families(state(vrp_only), NOW).covered == frozenset()


def test_a_source_past_its_end_covers_nothing_and_its_end_bounds_the_family() -> None:
    ends = source("a", "left", 3, ((64500, None, 0),), expires_at=round((NOW + 40) * US))
    families = judge_families(state(ends), NOW)
    assert families.covered == {Afi.IPV4, Afi.IPV6}
    assert families.until == {Afi.IPV4: NOW + 40, Afi.IPV6: NOW + 40}
    later = judge_families(state(ends), NOW + 40)
    assert later.covered == frozenset()
    assert later.until == {Afi.IPV4: None, Afi.IPV6: None}


def test_a_source_judged_ahead_reaches_its_family_ends_earlier() -> None:
    ahead = source("a", "left", 1, ((64500, NOW + 30, 1),))
    families = judge_families(state(ahead), NOW, own={"a": NOW + 10})
    assert families.until[Afi.IPV4] == NOW + 20


def test_the_snapshot_serves_a_family_only_while_covered_and_before_its_end() -> None:
    v4_only = source("a", "left", 1, ((64500, NOW + 30, 0),))
    judged = state(v4_only)
    snapshot, until = judge_state(judged, NOW)
    families = judge_families(judged, NOW)
    shared = SharedSnapshot(
        snapshot,
        "store",
        1,
        1,
        1,
        until,
        NOW,
        aspa_covered=families.covered,
        aspa_usable_until_by_afi=families.until,
        aspa_active_groups=families.groups,
    )
    assert shared.aspa_usable(Afi.IPV4, NOW + 29)
    assert not shared.aspa_usable(Afi.IPV4, NOW + 30)
    assert not shared.aspa_usable(Afi.IPV6, NOW)  # never covered
    assert shared.usable_until == NOW + 30
    refused = dataclasses.replace(shared, refused=True)
    assert not refused.aspa_usable(Afi.IPV4, NOW)


def test_the_aggregate_aspa_group_is_both_families_group() -> None:
    both = source("a", "left", 3, ((64500, NOW + 9, 0),))
    families = judge_families(state(both, groups=(("vrp", "left"), ("aspa", "left"))), NOW)
    assert families.covered == {Afi.IPV4, Afi.IPV6}
    assert families.groups == {Afi.IPV4: ("left",), Afi.IPV6: ("left",)}
    assert families.until == {Afi.IPV4: NOW + 9, Afi.IPV6: NOW + 9}


def test_a_refused_state_covers_no_family_but_keeps_the_writers_groups() -> None:
    left = source("a", "left", 3, ())
    right = source("b", "right", 3, (), selected=frozenset())
    recorded = (("vrp", "left"), ("aspa_v4", "left"), ("aspa_v6", "right"))
    refused = uncovered(state(left, right, groups=recorded))
    assert refused.covered == frozenset()
    assert refused.groups == {Afi.IPV4: ("left",), Afi.IPV6: ("right",)}
