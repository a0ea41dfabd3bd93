"""The shared reader's own build slots (P-61, P-68): builds in bounded managed threads, one
header candidate and one calibration at most, slots held until the thread ends, and events
that never repeat an expiry already reported."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from persistence.shared import (
    ReaderState,
    SharedEvent,
    SharedReaderConfig,
    SharedReaderLimits,
    SharedSnapshotClient,
    SharedWatch,
)
from persistence.state import PersistedState, StateId
from snapshot.kinds import PayloadKind
from tests.persistence.shared_faults import GatedJudge
from tests.persistence.shared_harness import (
    TIMEOUT,
    config,
    eventually,
    next_event,
    owner,
    until_generation,
)
from tests.persistence.shared_states import state

pytestmark = pytest.mark.anyio


def generation_two(state: PersistedState) -> bool:
    """Hold the build of the writer's generation 2 (the new header)."""
    return state.state_id.generation == 2


async def drain(watch: SharedWatch, until: int) -> list[SharedEvent]:
    """Events of ``watch`` until one is at local generation ``until`` (bounded)."""
    events: list[SharedEvent] = []
    while not events or events[-1].snapshot.local_generation < until:
        events.append(await next_event(watch))
    return events


def test_the_limit_is_the_readers_own_and_at_least_one() -> None:
    assert SharedReaderConfig(path="x.db").limits.max_concurrent_builds == 2
    with pytest.raises(ValueError, match="at least 1"):
        SharedReaderLimits(max_concurrent_builds=0)
    reader = SharedSnapshotClient(config(Path("x.db"), slots=3))
    metrics = reader.get_metrics()
    assert (metrics.max_concurrent_builds, metrics.builds_running, metrics.builds_waiting) == (
        3,
        0,
        0,
    )


async def test_with_two_slots_a_calibration_runs_beside_a_header_build(tmp_path: Path) -> None:
    """The calibration runs while the header build holds its slot; the header published
    after it does not bring back, nor report again, the VRP the calibration withdrew."""
    path = tmp_path / "state.db"
    now = time.time()
    offset = [0.0]
    async with owner(path) as db:
        assert db.store_id is not None
        await db.commit(state(db.store_id, StateId(1, 1), now, vrp_ends=(now + 100,)), None)
        reader = SharedSnapshotClient(config(path, lambda: time.time() + offset[0], slots=2))
        gated = GatedJudge(generation_two)
        reader._builds.judge = gated
        async with reader, reader.watch() as watch, anyio.create_task_group() as tg:
            assert (await next_event(watch)).kind == "initial"
            await tg.start(reader.run)
            await db.commit(
                state(db.store_id, StateId(1, 2), now, vrp_ends=(now + 100,)), StateId(1, 1)
            )
            await eventually(gated.entered.is_set)
            assert reader.get_metrics().builds_running == 1
            offset[0] = 200.0  # the VRP ends: the calibration is due while the header builds
            expired = await next_event(watch)
            assert (expired.kind, expired.start, expired.end) == ("expired", (1, 1), (1, 1))
            assert (expired.added, expired.removed) == (0, 1)
            assert gated.most == 2  # both builds were in their threads at once
            gated.gate.set()
            changed = await next_event(watch)
            assert (changed.kind, changed.start, changed.end) == ("changed", (1, 1), (1, 2))
            assert (changed.added, changed.removed) == (0, 0)  # the expiry is not repeated
            assert changed.snapshot.snapshot.vrp_count == 1  # nor is the VRP back
            metrics = reader.get_metrics()
            assert (metrics.header_builds, metrics.calibrations) == (2, 1)
            assert gated.most <= 2
            await reader.aclose()


async def test_with_one_slot_a_calibration_waits_for_the_header_build(tmp_path: Path) -> None:
    """Never two builds in threads at once; the expiry is reported exactly once."""
    path = tmp_path / "state.db"
    now = time.time()
    offset = [0.0]
    async with owner(path) as db:
        assert db.store_id is not None
        await db.commit(state(db.store_id, StateId(1, 1), now, vrp_ends=(now + 100,)), None)
        reader = SharedSnapshotClient(config(path, lambda: time.time() + offset[0], slots=1))
        gated = GatedJudge(generation_two)
        reader._builds.judge = gated
        async with reader, reader.watch() as watch, anyio.create_task_group() as tg:
            assert (await next_event(watch)).kind == "initial"
            await tg.start(reader.run)
            await db.commit(
                state(db.store_id, StateId(1, 2), now, vrp_ends=(now + 100,)), StateId(1, 1)
            )
            await eventually(gated.entered.is_set)
            offset[0] = 200.0
            await eventually(lambda: reader.get_metrics().builds_waiting == 1)
            await anyio.sleep(0.1)  # the calibration still waits: nothing is published
            snap = reader.get_snapshot()
            assert snap is not None
            assert (snap.generation, snap.local_generation) == (1, 1)
            assert gated.most == 1
            gated.gate.set()
            await until_generation(reader, 2)
            await eventually(
                lambda: (s := reader.get_snapshot()) is not None and s.snapshot.vrp_count == 1
            )
            final = reader.get_snapshot()
            assert final is not None
            events = await drain(watch, final.local_generation)
            assert gated.most == 1
            assert sum(e.removed for e in events) == 1  # reported once, in whichever order
            assert sum(e.added for e in events) == 0
            assert events[-1].end == (1, 2)
            assert reader.get_metrics().builds_waiting == 0
            await reader.aclose()


async def test_aclose_waits_for_a_build_and_its_slot_is_held_until_the_thread_ends(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    now = time.time()
    async with owner(path) as db:
        assert db.store_id is not None
        await db.commit(state(db.store_id, StateId(1, 1), now), None)
        reader = SharedSnapshotClient(config(path))
        gated = GatedJudge(generation_two)
        reader._builds.judge = gated
        closed = anyio.Event()

        async def close() -> None:
            await reader.aclose()
            closed.set()

        async with reader:
            with anyio.fail_after(TIMEOUT):
                async with anyio.create_task_group() as tg:
                    await tg.start(reader.run)
                    await db.commit(state(db.store_id, StateId(1, 2), now), StateId(1, 1))
                    await eventually(gated.entered.is_set)
                    tg.start_soon(close)
                    await anyio.sleep(0.3)  # polling is cancelled; the build's thread runs on
                    assert not closed.is_set()
                    assert reader.get_status().state is ReaderState.CLOSING
                    assert reader.get_metrics().builds_running == 1  # the slot is still held
                    gated.gate.set()
                    await closed.wait()
            assert reader.get_status().state is ReaderState.CLOSED
            assert reader.get_metrics().builds_running == 0
            assert not reader.get_status().cleanup_overdue
            # The cancelled build published nothing.
            snap = reader.get_snapshot()
            assert snap is not None
            assert snap.generation == 1
            assert gated.calls == [1, 2]


async def test_builds_use_the_readers_limiter_not_anyios_default(tmp_path: Path) -> None:
    """AnyIO's default thread limiter fully borrowed: the reader still builds."""
    path = tmp_path / "state.db"
    now = time.time()
    async with owner(path) as db:
        assert db.store_id is not None
        await db.commit(state(db.store_id, StateId(1, 1), now), None)
        default = anyio.to_thread.current_default_thread_limiter()
        total = default.total_tokens
        default.total_tokens = 1
        try:
            reader = SharedSnapshotClient(config(path))
            async with reader, anyio.create_task_group() as tg:
                await tg.start(reader.run)
                await default.acquire()
                try:
                    await db.commit(state(db.store_id, StateId(1, 2), now), StateId(1, 1))
                    snap = await until_generation(reader, 2)
                    assert snap.usable(PayloadKind.VRP, reader.now())
                finally:
                    default.release()
                await reader.aclose()
        finally:
            default.total_tokens = total


async def test_a_host_cancel_of_run_waits_for_the_build_thread(tmp_path: Path) -> None:
    """Cancelling the host's task group returns from `run` only once the build's thread ended."""
    path = tmp_path / "state.db"
    now = time.time()
    async with owner(path) as db:
        assert db.store_id is not None
        await db.commit(state(db.store_id, StateId(1, 1), now), None)
        reader = SharedSnapshotClient(config(path))
        gated = GatedJudge(generation_two)
        reader._builds.judge = gated
        host_scope = anyio.CancelScope()
        ended = anyio.Event()

        async def host() -> None:
            with host_scope:
                async with anyio.create_task_group() as tg:
                    await tg.start(reader.run)
                    await anyio.sleep_forever()
            ended.set()

        async with reader, anyio.create_task_group() as outer:
            outer.start_soon(host)
            await db.commit(state(db.store_id, StateId(1, 2), now), StateId(1, 1))
            await eventually(gated.entered.is_set)
            host_scope.cancel()
            await anyio.sleep(0.3)
            assert not ended.is_set()  # run still waits for the thread
            assert reader.get_metrics().builds_running == 1
            gated.gate.set()
            with anyio.fail_after(TIMEOUT):
                await ended.wait()
            assert reader.get_metrics().builds_running == 0
            assert reader.get_status().state is ReaderState.OPEN  # run returned; still open
