"""`DiffLog` driven through `Publisher`: each retained serial vs a full recomputation (P15)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snapshot.delta import EMPTY_DELTA, apply, compute_delta
from snapshot.difflog import DiffLog
from snapshot.model import Aspa, Vrp
from snapshot.publisher import PublishedState, Publisher, SessionIds
from snapshot.serial import Serial
from snapshot.snapshot import EMPTY, Snapshot
from tests.snapshot.strategies import SETTINGS, Masks, masks

IDS = SessionIds(0x1111, 0x2222, 0x3333)
TOP = 2**32 - 1
START_SERIALS = [0, 1, 2**31 - 1, 2**31, TOP - 7, TOP - 1, TOP]

#: A step: a fresh snapshot, a small change of the previous one (XOR), or the same content again.
steps = st.lists(
    st.tuples(st.sampled_from(["fresh", "xor", "repeat"]), masks), min_size=1, max_size=15
)


def realise(plan: list[tuple[str, Masks]]) -> list[Snapshot]:
    """Turn a step plan into snapshots; "repeat" builds a new object with the same content."""
    current = Masks(0, 0, 0)
    out = []
    for kind, m in plan:
        if kind == "fresh":
            current = m
        elif kind == "xor":
            current = current ^ m
        out.append(current.build())
    return out


def check_window(
    state: PublishedState, history: list[tuple[Serial, Snapshot]], retained: list[Serial]
) -> None:
    """Every retained serial gives exactly the recomputed delta; every other serial gives None."""
    log = state.difflog
    assert log.current == state.serial
    assert log.serials == tuple(retained)
    assert len(log) == len(retained)
    by_serial = dict(history)
    for serial, old in history[:-1]:
        delta = state.delta_since(serial)
        if serial in retained:
            assert delta == compute_delta(old, state.snapshot), f"wrong delta since {serial}"
            assert apply(delta, old) == state.snapshot
        else:
            assert delta is None, f"serial {serial} should be outside the window"
    assert state.delta_since(state.serial) == EMPTY_DELTA
    for ahead in (1, 2, 1000, 2**31 - 1):
        assert state.delta_since(state.serial.add(ahead)) is None
    # serials at undefined distance or far in the past are unknown too
    assert state.delta_since(Serial((state.serial.value + 2**31) % 2**32)) is None
    # retained serials are a contiguous run that ends just before the current serial
    if retained:
        for older, newer in zip(retained, [*retained[1:], state.serial], strict=True):
            assert older.add(1) == newer
    assert all(s in by_serial for s in retained)


@SETTINGS
@given(steps, st.integers(3, 5), st.sampled_from(START_SERIALS))
def test_every_retained_serial_matches_recomputation(
    plan: list[tuple[str, Masks]], max_entries: int, start: int
) -> None:
    publisher = Publisher(IDS, initial_serial=Serial(start), max_entries=max_entries)
    history: list[tuple[Serial, Snapshot]] = []
    for snap in realise(plan):
        prev = publisher.current
        state = publisher.publish(snap)
        if prev is not None and snap == prev.snapshot:
            assert state is None
            assert publisher.current is prev  # nothing moved: serial, log, snapshot
            continue
        assert state is not None
        assert publisher.current is state
        assert state.snapshot == snap
        assert state.session_ids == IDS
        if prev is None:
            assert state.serial == Serial(start)
            assert state.last_delta is None
        else:
            assert state.serial == prev.serial.add(1)
            assert state.last_delta == compute_delta(prev.snapshot, snap)
        history.append((state.serial, snap))
        retained = [s for s, _ in history[:-1]][-max_entries:]
        check_window(state, history, retained)
        assert len(state.difflog) <= max_entries


@SETTINGS
@given(steps, st.integers(1, 15), st.integers(0, 3000))
def test_byte_bound_drops_oldest_first(
    plan: list[tuple[str, Masks]], max_entries: int, max_bytes: int
) -> None:
    """Model: after each publish keep the longest run of newest serials within both bounds."""
    publisher = Publisher(IDS, max_entries=max_entries, max_bytes=max_bytes)
    history: list[tuple[Serial, Snapshot]] = []
    retained: list[Serial] = []
    for snap in realise(plan):
        prev = publisher.current
        state = publisher.publish(snap)
        if state is None:
            continue
        history.append((state.serial, snap))
        by_serial = dict(history)
        if prev is not None:
            candidates = [*retained, prev.serial]
            sizes = [compute_delta(by_serial[s], snap).size_bytes() for s in candidates]
            drop = 0
            while drop < len(candidates) and (
                len(candidates) - drop > max_entries or sum(sizes[drop:]) > max_bytes
            ):
                drop += 1
            retained = candidates[drop:]
        check_window(state, history, retained)
        log = state.difflog
        expected_total = sum(compute_delta(by_serial[s], snap).size_bytes() for s in retained)
        assert log.total_bytes == expected_total
        assert log.total_bytes <= max_bytes
        assert len(log) <= max_entries


# ---------------------------------------------------------------- examples


V = [Vrp.parse(f"10.{i}.0.0/16", 16, 64496) for i in range(8)]


def chain(n: int) -> list[Snapshot]:
    """EMPTY, {V0}, {V0, V1}, ...: each step announces one VRP."""
    return [Snapshot.build(V[:i]) for i in range(n)]


def test_count_bound() -> None:
    publisher = Publisher(IDS, max_entries=3)
    for snap in chain(7):
        publisher.publish(snap)
    state = publisher.current
    assert state is not None
    assert state.serial == Serial(6)
    assert state.difflog.serials == (Serial(3), Serial(4), Serial(5))
    assert state.delta_since(Serial(2)) is None
    assert state.delta_since(Serial(3)) == compute_delta(Snapshot.build(V[:3]), state.snapshot)


def test_byte_bound_example() -> None:
    """Cumulative deltas to the current serial: 230, 220 and 210 bytes; 450 keeps the newest two."""
    snaps = chain(4)
    sizes = [compute_delta(s, snaps[-1]).size_bytes() for s in snaps[:-1]]
    assert sizes[0] > sizes[1] > sizes[2]
    publisher = Publisher(IDS, max_bytes=sizes[1] + sizes[2])
    for snap in snaps:
        publisher.publish(snap)
    state = publisher.current
    assert state is not None
    assert state.difflog.serials == (Serial(1), Serial(2))
    assert state.difflog.total_bytes == sizes[1] + sizes[2]
    assert state.delta_since(Serial(0)) is None
    assert state.delta_since(Serial(1)) == compute_delta(snaps[1], snaps[3])


def test_delta_larger_than_budget_is_not_kept() -> None:
    publisher = Publisher(IDS, max_bytes=100)
    publisher.publish(EMPTY)
    state = publisher.publish(Snapshot.build(V[:1]))
    assert state is not None
    assert state.serial == Serial(1)
    assert len(state.difflog) == 0
    assert state.difflog.total_bytes == 0
    assert state.delta_since(Serial(0)) is None  # Cache Reset
    assert state.delta_since(Serial(1)) == EMPTY_DELTA


def test_serial_wraps_around() -> None:
    publisher = Publisher(IDS, initial_serial=Serial(TOP - 1), max_entries=10)
    snaps = chain(6)
    states = [publisher.publish(s) for s in snaps]
    serials = [s.serial.value for s in states if s is not None]
    assert serials == [TOP - 1, TOP, 0, 1, 2, 3]
    state = publisher.current
    assert state is not None
    assert state.difflog.serials == tuple(Serial(v) for v in [TOP - 1, TOP, 0, 1, 2])
    for value, snap in zip(serials, snaps, strict=True):
        assert state.delta_since(Serial(value)) == compute_delta(snap, snaps[-1])
    assert state.delta_since(Serial(4)) is None
    assert state.delta_since(Serial(TOP - 2)) is None


def test_identical_content_is_not_published() -> None:
    publisher = Publisher(IDS, initial_serial=Serial(41))
    first = publisher.publish(Snapshot.build([V[0], V[1]], [Aspa(1, (2,))]))
    assert first is not None
    assert first.serial == Serial(41)
    # the same content, built in another order with duplicates and an AS0 to drop
    again = Snapshot.build([V[1], V[0], V[1]], [Aspa(1, (0,)), Aspa(1, (2,))])
    assert publisher.publish(again) is None
    assert publisher.current is first
    changed = publisher.publish(Snapshot.build([V[0]], [Aspa(1, (2,))]))
    assert changed is not None
    assert changed.serial == Serial(42)
    assert publisher.publish(Snapshot.build([V[0]], [Aspa(1, (2,))])) is None
    assert publisher.current is changed


def test_first_publish_of_empty_snapshot() -> None:
    publisher = Publisher(IDS)
    assert publisher.current is None
    state = publisher.publish(EMPTY)
    assert state is not None
    assert state.serial == Serial(0)
    assert state.last_delta is None
    assert len(state.difflog) == 0
    assert publisher.publish(Snapshot()) is None


# ---------------------------------------------------------------- DiffLog directly


@pytest.mark.parametrize("bad", [Serial(2), Serial(0), Serial(1), Serial(TOP), Serial(2**31)])
def test_advance_requires_the_next_serial(bad: Serial) -> None:
    log = DiffLog(Serial(0))
    if bad == Serial(1):
        assert log.advance(EMPTY_DELTA, bad).current == bad
    else:
        with pytest.raises(ValueError, match="does not follow"):
            log.advance(EMPTY_DELTA, bad)


def test_advance_wraps() -> None:
    log = DiffLog(Serial(TOP)).advance(EMPTY_DELTA, Serial(0))
    assert log.current == Serial(0)
    assert log.serials == (Serial(TOP),)
    with pytest.raises(ValueError, match="does not follow"):
        DiffLog(Serial(TOP)).advance(EMPTY_DELTA, Serial(2**32 - 1))


def test_advance_returns_a_new_log() -> None:
    delta = compute_delta(EMPTY, Snapshot.build(V[:1]))
    log0 = DiffLog(Serial(5), max_entries=2)
    log1 = log0.advance(delta, Serial(6))
    assert log0.current == Serial(5)
    assert len(log0) == 0
    assert log0.delta_since(Serial(5)) == EMPTY_DELTA
    assert log1.delta_since(Serial(5)) == delta
    assert log1.delta_since(Serial(4)) is None
    assert log1.delta_since(Serial(7)) is None


def test_zero_entries_keeps_nothing() -> None:
    log = DiffLog(Serial(0), max_entries=0).advance(EMPTY_DELTA, Serial(1))
    assert len(log) == 0
    assert log.delta_since(Serial(0)) is None
    assert log.delta_since(Serial(1)) == EMPTY_DELTA


@pytest.mark.parametrize(("entries", "size"), [(-1, 10), (10, -1)])
def test_negative_bounds_rejected(entries: int, size: int) -> None:
    with pytest.raises(ValueError, match="negative"):
        DiffLog(Serial(0), max_entries=entries, max_bytes=size)
