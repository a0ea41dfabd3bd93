"""The pure group selection rules: start-up, failover, fail-back, per-kind independence."""

from __future__ import annotations

import pytest

from upstream.selection import ALL_KINDS, GroupSelector, GroupSpec, PayloadKind, SourceView

VRP = PayloadKind.VRP
ASPA = PayloadKind.ASPA
KEY = PayloadKind.ROUTER_KEY
V1 = frozenset({VRP, KEY})


def groups() -> GroupSelector:
    return GroupSelector(
        [
            GroupSpec("backup", priority=20, startup_timeout=30, failback_delay=300),
            GroupSpec("primary", priority=10, startup_timeout=30, failback_delay=300),
        ]
    )


def src(group: str, synced: bool, caps: frozenset[PayloadKind] = ALL_KINDS) -> SourceView:
    return SourceView(f"{group}-src", group, caps, synced)


def test_primary_ready_at_start_backup_never_started() -> None:
    sel = groups()
    d = sel.update(0.0, [src("primary", True)])
    assert d.started == ("primary",)
    assert d.active == dict.fromkeys(PayloadKind, "primary")
    assert len(d.changes) == 3
    assert "first ready group" in d.changes[0]
    d = sel.update(1000.0, [src("primary", True)])
    assert d.started == ("primary",)
    assert d.changes == ()


def test_primary_down_at_start_backup_serves_after_startup_timeout() -> None:
    sel = groups()
    d = sel.update(0.0, [src("primary", False)])
    assert d.started == ("primary",)
    assert d.active[VRP] is None
    assert d.next_wake == 30.0
    d = sel.update(29.9, [src("primary", False)])
    assert d.started == ("primary",)
    d = sel.update(30.0, [src("primary", False), src("backup", False)])
    assert d.newly_started == ("backup",)
    d = sel.update(31.0, [src("primary", False), src("backup", True)])
    assert d.active[VRP] == "backup"


def test_failback_only_after_continuous_readiness_for_the_delay() -> None:
    sel = groups()
    sel.update(0.0, [src("primary", False)])
    sel.update(30.0, [src("primary", False), src("backup", True)])
    both = [src("primary", True), src("backup", True)]
    d = sel.update(100.0, both)
    assert d.active[VRP] == "backup"
    assert d.next_wake == 400.0
    # An unrelated update in between does not reset the primary's clock.
    assert sel.update(250.0, both).active[VRP] == "backup"
    assert sel.update(399.9, both).active[VRP] == "backup"
    d = sel.update(400.0, both)
    assert d.active[VRP] == "primary"
    assert any("fail-back" in line for line in d.changes)


def test_flapping_primary_restarts_its_failback_clock() -> None:
    sel = groups()
    sel.update(0.0, [src("primary", False)])
    sel.update(30.0, [src("primary", False), src("backup", True)])
    sel.update(100.0, [src("primary", True), src("backup", True)])
    sel.update(200.0, [src("primary", False), src("backup", True)])
    sel.update(210.0, [src("primary", True), src("backup", True)])
    assert sel.update(400.0, [src("primary", True), src("backup", True)]).active[VRP] == "backup"
    assert sel.update(510.0, [src("primary", True), src("backup", True)]).active[VRP] == "primary"


def test_failover_is_immediate_when_the_active_group_loses_readiness() -> None:
    sel = groups()
    sel.update(0.0, [src("primary", True)])
    d = sel.update(10.0, [src("primary", False)])
    # The primary failed: the backup starts at once, without waiting for the start-up timeout.
    assert d.newly_started == ("backup",)
    assert d.active[VRP] is None
    d = sel.update(11.0, [src("primary", False), src("backup", True)])
    assert d.active[VRP] == "backup"
    assert "first ready group" in d.changes[0]


def test_kinds_are_selected_independently() -> None:
    sel = groups()
    # The primary is an RTR cache at v1: VRPs and router keys, no ASPA.
    d = sel.update(0.0, [src("primary", True, V1)])
    assert d.active[VRP] == "primary"
    assert d.active[ASPA] is None
    d = sel.update(30.0, [src("primary", True, V1), src("backup", True)])
    assert d.newly_started == ("backup",)
    assert d.active == {VRP: "primary", KEY: "primary", ASPA: "backup"}


def test_downgrade_reselects_the_aspa_group() -> None:
    sel = groups()
    sel.update(0.0, [src("primary", True)])
    assert sel.active[ASPA] == "primary"
    d = sel.update(5.0, [src("primary", True, V1)])
    assert d.active[ASPA] is None
    assert d.changes == ("aspa: active group primary -> - (group primary is no longer ready)",)
    assert d.active[VRP] == "primary"


def test_more_records_never_win() -> None:
    sel = groups()
    sel.update(0.0, [src("primary", False)])
    sel.update(30.0, [src("primary", False), src("backup", True)])
    # Priority decides, not size: nothing about record counts enters the decision at all.
    d = sel.update(31.0, [src("primary", False), src("backup", True)])
    assert d.active[VRP] == "backup"


def test_group_validation() -> None:
    with pytest.raises(ValueError, match="unique"):
        GroupSelector([GroupSpec("a", 1), GroupSpec("a", 2)])
    with pytest.raises(ValueError, match="priorities"):
        GroupSelector([GroupSpec("a", 1), GroupSpec("b", 1)])
    with pytest.raises(ValueError, match="at least one"):
        GroupSelector([])
    with pytest.raises(ValueError, match="negative"):
        GroupSpec("a", 1, startup_timeout=-1)
    sel = GroupSelector([GroupSpec("a", 1)])
    with pytest.raises(ValueError, match="unknown group"):
        sel.update(0.0, [src("nope", True)])
