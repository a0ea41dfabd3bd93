"""The pure group selection rules: start-up, failover, fail-back, per-kind independence."""

from __future__ import annotations

import pytest

from upstream.selection import (
    ALL_KINDS,
    Decision,
    GroupSelector,
    GroupSpec,
    PayloadKind,
    SourceView,
)

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


def src(
    group: str, synced: bool, caps: frozenset[PayloadKind] = ALL_KINDS, **state: bool
) -> SourceView:
    return SourceView(f"{group}-src", group, caps, synced, **state)


def names(d: Decision) -> tuple[str, ...]:
    """The names of the groups a decision started."""
    return tuple(name for name, _ in d.newly_started)


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
    assert names(d) == ("backup",)
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
    assert names(d) == ("backup",)
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
    # A group that cannot provide ASPA at all does not make the backup wait its window.
    assert names(d) == ("primary", "backup")
    assert "cannot refresh aspa" in d.newly_started[1][1]
    d = sel.update(1.0, [src("primary", True, V1), src("backup", True)])
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


def test_a_primary_that_fails_at_once_starts_the_backup_without_its_window() -> None:
    """Connection refused, DNS or HTTP error at start: no wait for the window (item 7)."""
    sel = groups()
    d = sel.update(0.0, [src("primary", False, attempted=False)])
    assert names(d) == ("primary",)
    d = sel.update(0.5, [src("primary", False, refreshing=False)])
    assert names(d) == ("backup",)
    assert "cannot refresh vrp" in d.newly_started[0][1]


def test_a_healthy_backup_replaces_a_ready_primary_that_cannot_refresh() -> None:
    """The primary's data is still valid but it cannot refresh: the backup is prepared and
    takes over once it is ready, not when the primary's data expires (item 6)."""
    sel = groups()
    assert sel.update(0.0, [src("primary", True)]).active[VRP] == "primary"
    d = sel.update(10.0, [src("primary", True, refreshing=False)])
    assert names(d) == ("backup",)
    assert d.active[VRP] == "primary"  # nothing healthier yet: its data still serves
    d = sel.update(12.0, [src("primary", True, refreshing=False), src("backup", True)])
    assert d.active[VRP] == "backup"
    assert "can no longer refresh" in d.changes[0]


def test_reconfigure_keeps_started_groups_windows_and_failback_clocks() -> None:
    """A configuration commit is not a restart of the selection (item 8)."""
    sel = groups()
    sel.update(0.0, [src("primary", False)])
    sel.update(30.0, [src("primary", False), src("backup", True)])
    both = [src("primary", True), src("backup", True)]
    assert sel.update(100.0, both).active[VRP] == "backup"
    for _ in range(3):
        sel.reconfigure(
            [
                GroupSpec("primary", priority=10, startup_timeout=5, failback_delay=300),
                GroupSpec("backup", priority=20, startup_timeout=30, failback_delay=300),
            ]
        )
        d = sel.update(200.0, both)
        assert d.active[VRP] == "backup"
        assert d.started == ("primary", "backup")
    assert sel.update(400.0, both).active[VRP] == "primary"


def test_the_first_choice_waits_for_a_primary_still_starting() -> None:
    """A backup started for ASPA that loads first does not take the VRPs the primary is
    about to provide."""
    sel = groups()
    v1 = src("primary", False, V1, attempted=False)
    sel.update(0.0, [v1])
    d = sel.update(0.1, [v1, src("backup", True)])
    assert d.active == {VRP: None, KEY: None, ASPA: "backup"}
    d = sel.update(0.2, [src("primary", True, V1), src("backup", True)])
    assert d.active == {VRP: "primary", KEY: "primary", ASPA: "backup"}


def test_a_new_startup_timeout_leaves_a_running_window_alone() -> None:
    """Changing startup_timeout applies to windows that start later (contract L-59)."""
    sel = groups()
    d = sel.update(0.0, [src("primary", False)])
    assert d.next_wake == 30.0
    sel.reconfigure(
        [
            GroupSpec("primary", priority=10, startup_timeout=5, failback_delay=300),
            GroupSpec("backup", priority=20, startup_timeout=30, failback_delay=300),
        ]
    )
    d = sel.update(10.0, [src("primary", False)])
    assert names(d) == ()
    assert d.next_wake == 30.0
    assert names(sel.update(30.0, [src("primary", False)])) == ("backup",)
