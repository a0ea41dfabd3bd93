"""Time rules: a wall clock set back never extends life; a jump distrusts online sources."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream

from snapshot.snapshot import Snapshot
from tests.upstream.helpers import export, touch, write_atomically
from upstream.aggregate import Aggregator
from upstream.file_source import FileSource

pytestmark = pytest.mark.anyio

W0 = 1_800_000_000.0


class ManualClock:
    """Both clocks move only when the test says so."""

    def __init__(self) -> None:
        self.wall_now = W0
        self.mono_now = 1000.0

    def wall(self) -> float:
        return self.wall_now

    def monotonic(self) -> float:
        return self.mono_now


@asynccontextmanager
async def running(
    source: FileSource, clock: ManualClock
) -> AsyncIterator[tuple[Aggregator, MemoryObjectReceiveStream[Snapshot]]]:
    send, receive = anyio.create_memory_object_stream[Snapshot](100)

    async def on_snapshot(snapshot: Snapshot) -> None:
        await send.send(snapshot)

    aggregator = Aggregator([source], on_snapshot, clock=clock, clock_tolerance=60)
    with send, receive:
        async with anyio.create_task_group() as tg:
            await tg.start(aggregator.run)
            yield aggregator, receive
            tg.cancel_scope.cancel()


async def next_matching(
    stream: MemoryObjectReceiveStream[Snapshot], count: int, within: float = 5.0
) -> Snapshot:
    with anyio.fail_after(within):
        while True:
            snap = await stream.receive()
            if snap.vrp_count == count:
                return snap


async def test_wall_clock_set_back_does_not_extend_life(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_atomically(path, export([("192.0.2.0/24", 24, 64496)], expires=int(W0) + 10))
    clock = ManualClock()
    source = FileSource(path, name="a", poll_interval=0.05, clock=clock)
    async with running(source, clock) as (aggregator, snapshots):
        await next_matching(snapshots, 1)
        # 11 s pass, but the wall clock is set back 100 s: the entry has still expired.
        clock.mono_now += 11
        clock.wall_now -= 89
        aggregator.poke()
        await next_matching(snapshots, 0)
        assert aggregator.judged_now("a") == int(W0) + 11


async def test_wall_clock_jump_forward_expires_early_but_never_late(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_atomically(path, export([("192.0.2.0/24", 24, 64496)], expires=int(W0) + 10))
    clock = ManualClock()
    source = FileSource(path, name="a", poll_interval=0.05, clock=clock)
    async with running(source, clock) as (aggregator, snapshots):
        await next_matching(snapshots, 1)
        clock.wall_now += 3600  # the wall clock jumps an hour ahead; the entry is past expiry
        aggregator.poke()
        await next_matching(snapshots, 0)


async def test_jump_distrusts_online_sources_until_they_deliver_again(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_atomically(path, export([("192.0.2.0/24", 24, 64496)]))
    clock = ManualClock()
    source = FileSource(path, name="a", poll_interval=0.05, clock=clock)
    source.kind = "http"  # judged like an online source (its data came from a live upstream)
    async with running(source, clock) as (aggregator, snapshots):
        await next_matching(snapshots, 1)
        clock.wall_now += 3600
        aggregator.poke()
        await next_matching(snapshots, 0)  # distrusted: the data is withdrawn
        assert "a" in aggregator._untrusted
        write_atomically(path, export([("192.0.2.0/24", 24, 64497)]))
        await next_matching(snapshots, 1)  # it delivered again: trusted
        assert "a" not in aggregator._untrusted


async def test_an_unchanged_answer_after_a_jump_restores_trust(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_atomically(path, export([("192.0.2.0/24", 24, 64496)]))
    clock = ManualClock()
    source = FileSource(path, name="a", poll_interval=0.05, clock=clock)
    source.kind = "http"
    async with running(source, clock) as (aggregator, snapshots):
        await next_matching(snapshots, 1)
        clock.wall_now += 3600
        aggregator.poke()
        await next_matching(snapshots, 0)
        touch(path)  # same bytes, read again: the upstream confirmed its data (like a 304)
        await next_matching(snapshots, 1)
        assert "a" not in aggregator._untrusted
        aggregator.poke()  # judged against the new clock now: no new distrust
        await next_matching(snapshots, 1)
        assert "a" not in aggregator._untrusted


async def test_file_sources_are_not_distrusted_by_a_jump(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_atomically(path, export([("192.0.2.0/24", 24, 64496)]))
    clock = ManualClock()
    source = FileSource(path, name="a", poll_interval=0.05, clock=clock)
    async with running(source, clock) as (aggregator, snapshots):
        await next_matching(snapshots, 1)
        clock.wall_now -= 3600
        aggregator.poke()
        await next_matching(snapshots, 1)
        assert not aggregator._untrusted
