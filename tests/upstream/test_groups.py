"""Groups end to end: real file sources, the aggregator and a monotonic clock the test moves."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream

from snapshot.snapshot import Snapshot
from tests.upstream.helpers import dumps, export, roa, wait_for, write_atomically
from upstream.aggregate import Aggregator, Group
from upstream.file_source import FileSource
from upstream.selection import GroupSpec, PayloadKind

pytestmark = pytest.mark.anyio

A = [("192.0.2.0/24", 24, 64496)]
B = [("198.51.100.0/24", 24, 64497)]


class SteppedClock:
    """Wall time fixed; monotonic time is real time plus whatever the test adds."""

    def __init__(self) -> None:
        self.offset = 0.0

    def wall(self) -> float:
        return 1_700_000_000.0

    def monotonic(self) -> float:
        return time.monotonic() + self.offset


@dataclass
class Run:
    aggregator: Aggregator
    snapshots: MemoryObjectReceiveStream[Snapshot]
    clock: SteppedClock

    async def until(self, predicate: object, within: float = 5.0) -> Snapshot:
        """The first snapshot for which ``predicate(snapshot)`` holds."""
        assert callable(predicate)
        with anyio.fail_after(within):
            while True:
                snap = await self.snapshots.receive()
                if predicate(snap):
                    return snap

    async def settled(self) -> None:
        """Wait until the first group is started (the selector's clocks start then)."""
        await wait_for(lambda: bool(self.aggregator.started_groups()))

    def jump(self, seconds: float) -> None:
        self.clock.offset += seconds
        self.aggregator.poke()


@asynccontextmanager
async def running(groups: list[Group]) -> AsyncIterator[Run]:
    send, receive = anyio.create_memory_object_stream[Snapshot](100)
    clock = SteppedClock()

    async def on_snapshot(snapshot: Snapshot) -> None:
        await send.send(snapshot)

    aggregator = Aggregator([], on_snapshot, clock=clock, groups=groups)
    with send, receive:
        async with anyio.create_task_group() as tg:
            await tg.start(aggregator.run)
            run = Run(aggregator, receive, clock)
            await run.settled()
            yield run
            tg.cancel_scope.cancel()


def source(path: Path, name: str) -> FileSource:
    return FileSource(path, name=name, poll_interval=0.05)


def has(snap: Snapshot, vrps: list[tuple[str, int, int]]) -> bool:
    return {(str(v.prefix), v.max_length, v.asn) for v in snap.vrps()} == set(vrps)


def two_groups(primary: Path, backup: Path, failback: float = 300.0) -> list[Group]:
    return [
        Group(
            GroupSpec("primary", 10, startup_timeout=30, failback_delay=failback),
            (source(primary, "a"),),
        ),
        Group(
            GroupSpec("backup", 20, startup_timeout=30, failback_delay=failback),
            (source(backup, "b"),),
        ),
    ]


async def test_primary_down_at_start_backup_serves_after_startup_timeout(tmp_path: Path) -> None:
    primary, backup = tmp_path / "a.json", tmp_path / "b.json"
    write_atomically(backup, export(B))
    async with running(two_groups(primary, backup)) as run:
        await anyio.sleep(0.3)
        assert "backup" not in run.aggregator.started_groups()
        run.jump(30)
        snap = await run.until(lambda s: has(s, B))
        assert run.aggregator.active[PayloadKind.VRP] == "backup"
        assert snap.vrp_count == 1


async def test_failback_waits_for_the_delay_then_switches(tmp_path: Path) -> None:
    primary, backup = tmp_path / "a.json", tmp_path / "b.json"
    write_atomically(backup, export(B))
    async with running(two_groups(primary, backup)) as run:
        run.jump(30)
        await run.until(lambda s: has(s, B))
        write_atomically(primary, export(A))
        # The primary loads and is ready (a rebuild follows), but the backup stays active.
        await wait_for(lambda: "a" in run.aggregator.payloads)
        await run.until(lambda s: has(s, B))
        assert run.aggregator.active[PayloadKind.VRP] == "backup"
        run.jump(290)
        await run.until(lambda s: has(s, B))
        assert run.aggregator.active[PayloadKind.VRP] == "backup"
        run.jump(11)
        await run.until(lambda s: has(s, A))
        assert run.aggregator.active[PayloadKind.VRP] == "primary"


async def test_failover_is_immediate_when_the_primary_data_goes(tmp_path: Path) -> None:
    primary, backup = tmp_path / "a.json", tmp_path / "b.json"
    write_atomically(primary, export(A))
    write_atomically(backup, export(B))
    groups = two_groups(primary, backup)
    async with running(groups) as run:
        await run.until(lambda s: has(s, A))
        # The primary's data is withdrawn (as an RTR source does at Expire).
        groups[0].sources[0].has_data = False  # type: ignore[attr-defined]
        run.aggregator.poke()
        await run.until(lambda s: has(s, B))
        assert run.aggregator.active[PayloadKind.VRP] == "backup"


async def test_vrps_from_one_group_aspas_from_another(tmp_path: Path) -> None:
    primary, backup = tmp_path / "a.json", tmp_path / "b.json"
    write_atomically(primary, export(A))
    doc = {
        "roas": [roa(p, m, a) for p, m, a in B],
        "aspas": [{"customer_asid": 64496, "providers": [64497]}],
    }
    write_atomically(backup, dumps(doc))
    groups = two_groups(primary, backup)
    # The primary is like an RTR cache at v1: VRPs and router keys, no ASPA.
    groups[0].sources[0].capabilities = frozenset(  # type: ignore[attr-defined]
        {PayloadKind.VRP, PayloadKind.ROUTER_KEY}
    )
    async with running(groups) as run:
        await run.until(lambda s: has(s, A))
        run.jump(30)
        snap = await run.until(lambda s: bool(s.aspas))
        assert has(snap, A)
        assert [(a.customer, a.providers) for a in snap.aspas] == [(64496, (64497,))]
        assert run.aggregator.active == {
            PayloadKind.VRP: "primary",
            PayloadKind.ROUTER_KEY: "primary",
            PayloadKind.ASPA: "backup",
        }


async def test_losing_every_group_publishes_the_empty_set(tmp_path: Path) -> None:
    primary = tmp_path / "a.json"
    write_atomically(primary, export(A))
    src = source(primary, "a")
    group = Group(GroupSpec("only", 1, startup_timeout=1, failback_delay=0), (src,))
    async with running([group]) as run:
        await run.until(lambda s: has(s, A))
        src.has_data = False  # type: ignore[attr-defined]
        run.aggregator.poke()
        snap = await run.until(lambda s: s.is_empty())
        assert snap.vrp_count == 0


def test_sources_or_groups_not_both(tmp_path: Path) -> None:
    async def ignore(_: Snapshot) -> None:
        return None

    src = source(tmp_path / "a.json", "a")
    with pytest.raises(ValueError, match="not both"):
        Aggregator([src], ignore, groups=[Group(GroupSpec("g", 1), (src,))])
