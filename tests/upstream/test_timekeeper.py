"""`TimeKeeper`: effective time never moves back; anchors measure drift; a frozen clock is fixed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.clock import FakeClock
from upstream.clock import FixedWallClock
from upstream.timekeeper import Anchor, TimeKeeper


def test_set_back_wall_clock_is_carried_forward_on_the_monotonic_clock() -> None:
    clock = FakeClock(monotonic=100.0)
    keeper = TimeKeeper(clock)
    assert keeper.now() == clock.wall()
    clock.move_monotonic(10)
    clock.move_wall(-3600)
    assert keeper.now() == 1_800_000_010.0


def test_forward_jump_then_back_keeps_the_jumped_time() -> None:
    clock = FakeClock(monotonic=100.0)
    keeper = TimeKeeper(clock)
    clock.move_wall(86_400)
    assert keeper.now() == 1_800_086_400.0
    clock.move_wall(-86_400)
    clock.move_monotonic(5)
    assert keeper.now() == 1_800_086_405.0


def test_observe_raises_the_floor_and_it_advances() -> None:
    clock = FakeClock(monotonic=100.0)
    keeper = TimeKeeper(clock)
    keeper.observe(1_800_000_100.0)
    assert keeper.now() == 1_800_000_100.0
    clock.move_monotonic(3)
    assert keeper.now() == 1_800_000_103.0
    keeper.observe(1.0)  # lower: nothing changes
    assert keeper.now() == 1_800_000_103.0


def test_anchor_drift_and_tolerance() -> None:
    clock = FakeClock(monotonic=100.0)
    keeper = TimeKeeper(clock, tolerance=60)
    anchor = keeper.anchor()
    clock.move_monotonic(100)
    clock.move_wall(100)
    assert keeper.drift(anchor) == 0
    clock.move_wall(-61)
    assert keeper.untrusted(anchor)
    assert Anchor(10.0, 5.0).extrapolated(7.0) == 12.0


def test_frozen_clock_is_fixed() -> None:
    keeper = TimeKeeper(FixedWallClock(1_700_000_000.0))
    keeper.observe(1_900_000_000.0)
    assert keeper.now() == 1_700_000_000.0
    assert keeper.drift(keeper.anchor()) == 0.0


@given(st.lists(st.tuples(st.floats(-1e6, 1e6), st.floats(0, 1e4)), max_size=40))
def test_effective_time_never_moves_back(steps: list[tuple[float, float]]) -> None:
    clock = FakeClock(monotonic=100.0)
    keeper = TimeKeeper(clock)
    last = keeper.now()
    for wall_step, mono_step in steps:
        clock.move_wall(wall_step)
        clock.move_monotonic(mono_step)
        now = keeper.now()
        assert now >= last
        assert now >= clock.wall()
        last = now
