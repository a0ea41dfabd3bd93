"""Time rules with an injected clock: effective time never moves back, jumps distrust online
sources until new raw input, expiry runs on its own schedule (issue 12, items 1-3)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream

from snapshot.snapshot import Snapshot
from tests.clock import FakeClock
from tests.upstream.helpers import export, touch, wait_for, write_atomically
from tests.upstream.scripted_source import ScriptedSource, payload
from upstream.aggregate import Aggregator, Build
from upstream.file_source import FileSource
from upstream.source import Source

pytestmark = pytest.mark.anyio

W0 = 1_800_000_000.0
X = ("192.0.2.0/24", 24, 64496)
Y = ("198.51.100.0/24", 24, 64497)


@asynccontextmanager
async def running(
    source: Source, clock: FakeClock
) -> AsyncIterator[tuple[Aggregator, MemoryObjectReceiveStream[Snapshot]]]:
    send, receive = anyio.create_memory_object_stream[Snapshot](100)

    async def on_snapshot(build: Build) -> None:
        await send.send(build.snapshot)

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


def prefixes(snap: Snapshot) -> set[str]:
    return {str(v.prefix) for v in snap.vrps()}


def drained(stream: MemoryObjectReceiveStream[Snapshot]) -> list[Snapshot]:
    """Every snapshot waiting in ``stream``."""
    out = []
    while True:
        try:
            out.append(stream.receive_nowait())
        except anyio.WouldBlock:
            return out


async def test_wall_clock_set_back_does_not_extend_life(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_atomically(path, export([X], expires=int(W0) + 10))
    clock = FakeClock()
    source = FileSource(path, name="a", poll_interval=0.05, clock=clock)
    async with running(source, clock) as (aggregator, snapshots):
        await next_matching(snapshots, 1)
        # 11 s pass, but the wall clock is set back 100 s: the entry has still expired.
        clock.move_monotonic(11)
        clock.move_wall(-89)
        aggregator.poke()
        await next_matching(snapshots, 0)
        assert aggregator.judged_now("a") == int(W0) + 11


async def test_forward_jump_is_acted_upon_by_itself_and_not_undone(tmp_path: Path) -> None:
    """No source changes and nobody pokes: the clock tick sees the jump (item 3); jumping back
    does not bring the withdrawn entry back (the effective time never moves back)."""
    path = tmp_path / "a.json"
    write_atomically(path, export([X], expires=int(W0) + 10))
    clock = FakeClock()
    source = FileSource(path, name="a", poll_interval=0.05, clock=clock)
    async with running(source, clock) as (aggregator, snapshots):
        await next_matching(snapshots, 1)
        clock.move_wall(3600)  # the wall clock jumps an hour ahead; the entry is past expiry
        await next_matching(snapshots, 0, within=3)
        clock.move_wall(-3600)  # and back
        clock.move_monotonic(1)
        await anyio.sleep(1.5)  # more than a clock tick
        aggregator.poke()
        await anyio.sleep(0.2)
        assert all(s.is_empty() for s in drained(snapshots))  # never the entry again
        assert aggregator.judged_now("a") >= int(W0) + 3600


async def test_expiry_runs_on_schedule_without_any_source_change(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_atomically(path, export([X], expires=int(W0) + 2))
    clock = FakeClock()
    source = FileSource(path, name="a", poll_interval=0.05, clock=clock)
    async with running(source, clock) as (_, snapshots):
        await next_matching(snapshots, 1)
        clock.advance(3)  # time passes; nothing else happens
        await next_matching(snapshots, 0, within=3)


async def test_jump_distrusts_online_sources_until_new_raw_input() -> None:
    clock = FakeClock()
    source = ScriptedSource("a", kind="http", online=True)
    async with running(source, clock) as (aggregator, snapshots):
        await wait_for(lambda: source.running)
        source.deliver(payload([X]))
        await next_matching(snapshots, 1)
        clock.move_wall(3600)
        await next_matching(snapshots, 0, within=3)  # distrusted by the tick: data withdrawn
        assert aggregator.availability()["a"].value == "untrusted"
        assert source.resyncs == 1  # asked to resync at once
        source.deliver(payload([Y]))  # new raw input under the new clock
        await next_matching(snapshots, 1)
        assert aggregator.availability()["a"].value == "ready"


async def test_an_unchanged_answer_after_a_jump_restores_nothing() -> None:
    """An unchanged answer (the same raw input read again, like a 304 or an identical body)
    after a set-back clock neither restores trust nor re-anchors: an entry that expired in
    effective time never comes back (item 1)."""
    clock = FakeClock()
    source = ScriptedSource("a", kind="http", online=True)
    async with running(source, clock) as (aggregator, snapshots):
        await wait_for(lambda: source.running)
        data = payload([X, Y], expires=int(W0) + 100)
        source.deliver(data)
        await next_matching(snapshots, 2)
        clock.move_wall(-3600)  # set back: distrusted
        await next_matching(snapshots, 0, within=3)
        clock.move_monotonic(200)  # X and Y are past their expiry in effective time
        source.deliver(data)  # the same input again
        await anyio.sleep(1.5)
        aggregator.poke()
        await anyio.sleep(0.2)
        assert all(s.is_empty() for s in drained(snapshots))
        assert aggregator.availability()["a"].value == "untrusted"


async def test_new_content_under_a_set_back_clock_revives_no_expired_entry() -> None:
    """New raw input restores trust, but an entry re-listed with an expiry that has passed in
    effective time (though not by the set-back wall clock) is not served (item 2)."""
    clock = FakeClock()
    source = ScriptedSource("a", kind="http", online=True)
    async with running(source, clock) as (_, snapshots):
        await wait_for(lambda: source.running)
        source.deliver(payload([X], expires=int(W0) + 100))
        await next_matching(snapshots, 1)
        clock.move_wall(-3600)
        await next_matching(snapshots, 0, within=3)
        clock.move_monotonic(200)
        source.deliver(payload([X, Y], expires=int(W0) + 100))  # X again, and Y
        source.deliver(payload([Y]))  # new content: Y only has no expiry
        snap = await next_matching(snapshots, 1)
        assert prefixes(snap) == {"198.51.100.0/24"}


async def test_file_sources_are_not_distrusted_by_a_jump(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_atomically(path, export([X]))
    clock = FakeClock()
    source = FileSource(path, name="a", poll_interval=0.05, clock=clock)
    async with running(source, clock) as (aggregator, snapshots):
        await next_matching(snapshots, 1)
        clock.move_wall(-3600)
        touch(path)
        aggregator.poke()
        await anyio.sleep(1.5)
        assert aggregator.availability()["a"].value == "ready"
        assert all(s.vrp_count == 1 for s in drained(snapshots))


async def test_an_export_built_in_the_future_is_held_back(tmp_path: Path) -> None:
    """A build time beyond the wall clock plus the tolerance is not admitted (item 4) until
    the wall clock allows it; the data in force keeps serving meanwhile."""
    path = tmp_path / "a.json"
    clock = FakeClock()
    write_atomically(path, export([X]))
    source = FileSource(path, name="a", poll_interval=0.05, clock=clock)
    source.keeper.tolerance = 60
    async with running(source, clock) as (_, snapshots):
        await next_matching(snapshots, 1)
        doc = export([X, Y]).replace(
            b'"metadata": {', f'"metadata": {{"generated": {int(W0) + 61}, '.encode()
        )
        write_atomically(path, doc)
        await wait_for(lambda: source.status.last_error_class == "time")
        assert "beyond the clock tolerance of 60 s" in (source.status.last_error or "")
        await anyio.sleep(0.3)
        assert all(s.vrp_count == 1 for s in drained(snapshots))
        clock.advance(2)  # the wall clock catches up: admitted without re-reading the file
        await next_matching(snapshots, 2)


async def test_the_same_build_time_with_other_bytes_keeps_anchor_and_distrust() -> None:
    """Input with the build time of the data in force is the same raw input read again, even if
    its bytes differ: it keeps the anchor and does not restore trust (contract L-48)."""
    clock = FakeClock()
    source = ScriptedSource("a", kind="http", online=True)
    async with running(source, clock) as (aggregator, snapshots):
        await wait_for(lambda: source.running)
        same = b"json:generated:1800000000"
        source.deliver(payload([X]), identity=same)
        await next_matching(snapshots, 1)
        clock.move_wall(-3600)
        await next_matching(snapshots, 0, within=3)
        source.deliver(payload([X, Y]), identity=same)  # other records, same build time
        await anyio.sleep(1.5)
        assert all(s.is_empty() for s in drained(snapshots))
        assert aggregator.availability()["a"].value == "untrusted"


async def test_an_unrecoverable_source_error_reaches_the_host_unchanged() -> None:
    """An internal failure ends run and propagates (contract L-29), never a quiet log line."""

    class Broken(ScriptedSource):
        async def run(self, sink: object) -> None:
            raise AssertionError("internal invariant broken")

    clock = FakeClock()
    with pytest.raises(BaseExceptionGroup) as info:
        async with running(Broken("a"), clock):
            await anyio.sleep(5)
    assert info.group_contains(AssertionError, match="internal invariant broken")
