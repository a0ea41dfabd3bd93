"""The shared reader's own rules at the library level: the clock tolerance (refusal and trust
again), its time carried on the monotonic clock, the reader's SLURM policy, waiting for the file,
and overlapping re-judgings (only a newer view replaces the current one).

A real SQLite owner in this process whose wall clock (hence ``written_at``) the test sets, and a
reader on an injected fake clock (the private ``_clock`` hook).
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from persistence.backend import ThreadedBackend
from persistence.errors import PersistenceError
from persistence.shared import (
    DEFAULT_CLOCK_TOLERANCE,
    SharedEvent,
    SharedReaderConfig,
    SharedSnapshotClient,
    SharedWatch,
    SnapshotExpiredError,
)
from persistence.shared import convert as shared_convert
from persistence.shared.convert import judge_state
from persistence.sqlite_backend import SQLiteBackend
from persistence.state import PersistedState, StateId
from snapshot.kinds import PayloadKind
from snapshot.slurm import SlurmPolicy, parse_slurm
from tests.clock import FakeClock
from tests.persistence.shared_states import state
from upstream.config import ClientConfig

pytestmark = pytest.mark.anyio
TIMEOUT = 10.0
#: The owner's wall clock at its first commit.
W = 1_800_000_000.0


class Owner:
    """A real SQLite owner whose wall clock the test sets."""

    def __init__(self, path: Path) -> None:
        self.wall = W
        self.db = ThreadedBackend(SQLiteBackend(path, wall=lambda: self.wall))
        self.last: StateId | None = None

    async def commit(self, make: Callable[[str, StateId], PersistedState]) -> StateId:
        if not self.db.is_open:
            await self.db.open()
        assert self.db.store_id is not None
        state_id = StateId(1, 1 if self.last is None else self.last.generation + 1)
        await self.db.commit(make(self.db.store_id, state_id), self.last)
        self.last = state_id
        return state_id


@asynccontextmanager
async def reading(
    config: SharedReaderConfig, clock: FakeClock
) -> AsyncIterator[SharedSnapshotClient]:
    """An entered, running reader on ``clock`` (the private hook; closed at the end)."""
    reader = SharedSnapshotClient(config, _clock=clock)
    async with reader, anyio.create_task_group() as tg:
        await tg.start(reader.run)
        yield reader
        tg.cancel_scope.cancel()


def fast(path: Path, policy: Callable[[], SlurmPolicy | None] | None = None) -> SharedReaderConfig:
    """A fast-polling reader of ``path`` (with ``policy``, if given)."""
    return SharedReaderConfig(path, poll_interval=0.02, recheck=0.05, policy=policy)


async def next_event(watch: SharedWatch) -> SharedEvent:
    with anyio.fail_after(TIMEOUT):
        return await watch.__anext__()


def prefixes(reader: SharedSnapshotClient) -> set[str]:
    snap = reader.get_snapshot()
    assert snap is not None
    return {str(v.prefix) for v in snap.snapshot.vrps()}


def test_the_default_tolerance_is_the_owners() -> None:
    assert ClientConfig.__dataclass_fields__["clock_tolerance"].default == DEFAULT_CLOCK_TOLERANCE


async def test_a_state_written_too_far_ahead_is_refused_until_the_clock_catches_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "state.db"
    owner = Owner(path)
    await owner.commit(lambda s, i: state(s, i, W))
    clock = FakeClock(wall=W + 1)
    async with reading(fast(path), clock) as reader:
        assert reader.get_status().trusted
        async with reader.watch() as watch:
            assert (await next_event(watch)).kind == "initial"
            owner.wall = W + 400  # 399 s ahead of the reader's wall clock (tolerance 300)
            with caplog.at_level(logging.WARNING, logger="persistence.shared.client"):
                second = await owner.commit(lambda s, i: state(s, i, W + 400))
                refused = await next_event(watch)
                assert refused.kind == "refused"
                assert refused.end == (second.epoch, second.generation)
                assert refused.snapshot.refused
                assert refused.snapshot.snapshot.is_empty()
                with pytest.raises(SnapshotExpiredError):
                    refused.snapshot.check(PayloadKind.VRP)
                status = reader.get_status()
                assert not status.trusted
                assert not status.available
                assert status.ready_kinds == frozenset()
                await anyio.sleep(0.3)  # timer ticks: still refused, said once
            warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
            assert len(warnings) == 1, warnings
            assert "399 s behind" in warnings[0]
            clock.advance(150)  # within the tolerance now
            trusted = await next_event(watch)
            assert trusted.kind == "trusted"
            assert not trusted.snapshot.refused
            assert trusted.snapshot.snapshot.vrp_count == 1
            assert reader.get_status().trusted
    await owner.db.close()


async def test_a_refused_state_does_not_raise_the_readers_time(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    owner = Owner(path)
    owner.wall = W + 1000
    await owner.commit(lambda s, i: state(s, i, W + 1000))
    clock = FakeClock(wall=W)
    async with reading(fast(path), clock) as reader:
        snap = reader.get_snapshot()
        assert snap is not None
        assert snap.refused
        assert reader.now() == W  # the refused write time is no lower bound
        owner.wall = W + 1
        await owner.commit(lambda s, i: state(s, i, W + 1))  # a newer state passes
        with anyio.fail_after(TIMEOUT):
            while (snap := reader.get_snapshot()) is None or snap.refused:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        assert snap.snapshot.vrp_count == 1
    await owner.db.close()


async def test_the_readers_time_is_carried_on_its_monotonic_clock(tmp_path: Path) -> None:
    # The state was written (and its source evaluated) at W + 50; its VRP ends at W + 80. The
    # reader's wall clock is set back 100 s: its time goes on with the monotonic clock, so the
    # entry still ends 30 s later, and a later state of the same representation revives nothing.
    path = tmp_path / "state.db"
    owner = Owner(path)
    owner.wall = W + 50

    def stored(s: str, i: StateId) -> PersistedState:
        return state(s, i, W + 50, vrp_ends=(W + 80,))

    await owner.commit(stored)
    clock = FakeClock(wall=W + 40)
    async with reading(fast(path), clock) as reader:
        assert reader.now() == W + 50  # raised to the state's write time
        assert prefixes(reader) == {"10.0.0.0/16", "10.1.0.0/16"}
        snap = reader.get_snapshot()
        assert snap is not None
        assert snap.usable_until_by_kind[PayloadKind.VRP] == pytest.approx(W + 80)
        clock.move_monotonic(20)
        clock.move_wall(-100)
        await owner.commit(stored)  # same representation, a new state
        await anyio.sleep(0.2)
        assert prefixes(reader) == {"10.0.0.0/16", "10.1.0.0/16"}
        clock.move_monotonic(11)  # W + 81 on the reader's time, W - 49 on its wall clock
        with anyio.fail_after(TIMEOUT):
            while prefixes(reader) != {"10.0.0.0/16"}:  # noqa: ASYNC110
                await anyio.sleep(0.01)
    await owner.db.close()


def drop(prefix: str) -> SlurmPolicy:
    ipaddress.IPv4Network(prefix)
    return parse_slurm(
        '{"slurmVersion": 1, "validationOutputFilters": {"prefixFilters": [{"prefix": "'
        + prefix
        + '"}], "bgpsecFilters": []}, "locallyAddedAssertions": {"prefixAssertions": [], '
        '"bgpsecAssertions": []}}'
    )


async def test_the_readers_slurm_policy_is_applied_and_a_change_rejudges(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    owner = Owner(path)
    await owner.commit(lambda s, i: state(s, i, W, vrp_ends=(W + 1000,)))
    policy: list[SlurmPolicy | None] = [None]
    clock = FakeClock(wall=W + 1)
    config = fast(path, policy=lambda: policy[0])
    async with reading(config, clock) as reader:
        assert reader.get_snapshot() is None  # the policy is not valid yet: nothing is built
        async with reader.watch() as watch:
            policy[0] = drop("10.1.0.0/16")
            reader.policy_changed()
            first = await next_event(watch)
            assert first.kind == "initial"
            assert prefixes(reader) == {"10.0.0.0/16"}
            policy[0] = drop("10.0.0.0/16")
            reader.policy_changed()
            changed = await next_event(watch)
            assert changed.kind == "policy"
            assert (changed.added, changed.removed) == (1, 1)
            assert prefixes(reader) == {"10.1.0.0/16"}
    await owner.db.close()


async def test_without_any_policy_the_stored_payload_is_served(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    owner = Owner(path)
    await owner.commit(lambda s, i: state(s, i, W, vrp_ends=(W + 1000,)))
    async with reading(fast(path), FakeClock(wall=W + 1)) as reader:
        assert prefixes(reader) == {"10.0.0.0/16", "10.1.0.0/16"}
    await owner.db.close()


async def test_entering_waits_for_the_file_when_told(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with pytest.raises(PersistenceError):
        async with SharedSnapshotClient(SharedReaderConfig(path)):
            pass
    assert not path.exists()
    config = SharedReaderConfig(path, poll_interval=0.02, wait_for_file=True)
    reader = SharedSnapshotClient(config)
    entered = anyio.Event()

    async def enter() -> None:
        await reader.__aenter__()
        entered.set()

    owner = Owner(path)
    owner.wall = time.time()
    async with anyio.create_task_group() as tg:
        tg.start_soon(enter)
        await anyio.sleep(0.2)
        assert not entered.is_set()  # still waiting: the file is not there
        assert reader.get_status().persistence_error is not None
        assert reader.get_status().read_errors > 0
        await owner.commit(lambda s, i: state(s, i, owner.wall))
        with anyio.fail_after(TIMEOUT):
            await entered.wait()
    try:
        assert reader.get_status().persistence_error is None
        async with anyio.create_task_group() as tg:
            await tg.start(reader.run)  # the state, if committed after the entry, comes by poll
            with anyio.fail_after(TIMEOUT):
                while (snap := reader.get_snapshot()) is None:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            assert snap.generation == 1
            tg.cancel_scope.cancel()
    finally:
        await reader.aclose()
        await owner.db.close()


async def test_a_wait_for_the_file_is_cancelled_and_closes(tmp_path: Path) -> None:
    reader = SharedSnapshotClient(
        SharedReaderConfig(tmp_path / "never.db", poll_interval=0.02, wait_for_file=True)
    )
    with anyio.move_on_after(0.2):
        await reader.__aenter__()
    assert reader.get_status().state.value == "closed"


async def test_an_older_judging_finishing_last_never_replaces_a_newer_view(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A policy re-judging of generation 1 is held in its thread while generation 2 is read and
    # judged; when the old one finishes it is dropped: views only move forward.
    path = tmp_path / "state.db"
    owner = Owner(path)
    await owner.commit(lambda s, i: state(s, i, W))
    gate, held = threading.Event(), threading.Event()
    armed = [False]

    def gated(*args: Any, **kwargs: Any) -> Any:
        if armed[0]:
            armed[0] = False
            held.set()
            gate.wait(TIMEOUT)
        return judge_state(*args, **kwargs)

    monkeypatch.setattr(shared_convert, "judge_state", gated)  # what BuildSlots runs
    config = fast(path, policy=lambda: drop("192.0.2.0/24"))
    async with reading(config, FakeClock(wall=W + 1)) as reader, reader.watch() as watch:
        assert (await next_event(watch)).end == (1, 1)
        armed[0] = True
        reader.policy_changed()
        with anyio.fail_after(TIMEOUT):
            await anyio.to_thread.run_sync(held.wait)
        await owner.commit(lambda s, i: state(s, i, W, asn=64497))
        changed = await next_event(watch)
        assert (changed.kind, changed.end) == ("changed", (1, 2))
        gate.set()
        await anyio.sleep(0.3)
        snap = reader.get_snapshot()
        assert snap is not None
        assert snap.generation == 2
        assert {v.asn for v in snap.snapshot.vrps()} == {64497}
        with anyio.move_on_after(0.2):
            later = await watch.__anext__()
            assert later.end == (1, 2), later  # a re-judging of the newer state only
    await owner.db.close()
