"""`Aggregator` over real `FileSource`s: start-up readiness, union, missing files, expiry."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream

from snapshot.model import Aspa
from snapshot.snapshot import Snapshot
from tests.clock import FakeClock
from tests.upstream.helpers import (
    SKI_HEX,
    SPKI_B64,
    dumps,
    roa,
    router_key,
    vrp,
    wait_for,
    write_atomically,
)
from upstream import aggregate
from upstream.aggregate import Aggregator, Build, Source, merge_at
from upstream.clock import Clock
from upstream.file_source import FileSource
from upstream.json_format import parse_export
from upstream.source import DeliverySink
from upstream.status import SourceState

pytestmark = pytest.mark.anyio

POLL = 0.05

DOC_A: dict[str, Any] = {
    "roas": [roa("192.0.2.0/24", 24, 64496), roa("2001:db8::/32", 48, 64496)],
    "aspas": [{"customer_asid": 64500, "providers": [64501]}],
}
DOC_B: dict[str, Any] = {
    "roas": [roa("192.0.2.0/24", 24, 64496), roa("198.51.100.0/24", 24, 64497)],
    "aspas": [{"customer_asid": 64500, "providers": [64502]}],
    "bgpsec_keys": [{"asn": 64496, "ski": SKI_HEX, "pubkey": SPKI_B64}],
}
SNAP_A = Snapshot.build(
    [vrp("192.0.2.0/24", 24, 64496), vrp("2001:db8::/32", 48, 64496)], [Aspa(64500, (64501,))]
)
UNION = Snapshot.build(
    [
        vrp("192.0.2.0/24", 24, 64496),
        vrp("2001:db8::/32", 48, 64496),
        vrp("198.51.100.0/24", 24, 64497),
    ],
    [Aspa(64500, (64501, 64502))],
    [router_key()],
)


class GatedSource(FileSource):
    """A FileSource whose polls (the first attempt included) wait until ``gate`` is set."""

    def __init__(self, path: Path, gate: anyio.Event, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.gate = gate

    async def check(self, sink: DeliverySink) -> bool:
        await self.gate.wait()
        return await super().check(sink)


@dataclass
class Running:
    aggregator: Aggregator
    snapshots: MemoryObjectReceiveStream[Snapshot]

    async def next_snapshot(self, within: float = 5) -> Snapshot:
        with anyio.fail_after(within):
            return await self.snapshots.receive()

    def assert_no_snapshot(self) -> None:
        with pytest.raises(anyio.WouldBlock):
            self.snapshots.receive_nowait()


@asynccontextmanager
async def running(sources: list[Source], clock: Clock | None = None) -> AsyncIterator[Running]:
    send, receive = anyio.create_memory_object_stream[Snapshot](100)

    async def on_snapshot(build: Build) -> None:
        await send.send(build.snapshot)

    aggregator = Aggregator(sources, on_snapshot, clock=clock)
    with send, receive:
        async with anyio.create_task_group() as tg:
            await tg.start(aggregator.run)
            yield Running(aggregator, receive)
            tg.cancel_scope.cancel()


async def wait_until_state(source: FileSource, state: SourceState) -> None:
    await wait_for(lambda: source.status.state is state)


async def test_first_snapshot_waits_for_every_source_then_is_the_union(tmp_path: Path) -> None:
    write_atomically(tmp_path / "a.json", dumps(DOC_A))
    write_atomically(tmp_path / "b.json", dumps(DOC_B))
    gate = anyio.Event()
    a = FileSource(tmp_path / "a.json", name="a", poll_interval=POLL)
    b = GatedSource(tmp_path / "b.json", gate, name="b", poll_interval=POLL)
    async with running([a, b]) as run:
        await wait_until_state(a, SourceState.OK)
        await anyio.sleep(0.3)
        # a has data, b has not tried yet: no half-loaded union goes out.
        assert not b.status.attempted
        run.assert_no_snapshot()
        assert run.aggregator.builds == 0

        gate.set()
        assert await run.next_snapshot() == UNION
        assert b.status.state is SourceState.OK
        assert run.aggregator.builds == 1


async def test_missing_file_does_not_block_and_joins_later(tmp_path: Path) -> None:
    write_atomically(tmp_path / "a.json", dumps(DOC_A))
    a = FileSource(tmp_path / "a.json", name="a", poll_interval=POLL)
    b = FileSource(tmp_path / "b.json", name="b", poll_interval=POLL)
    async with running([a, b]) as run:
        assert await run.next_snapshot() == SNAP_A
        assert b.status.state is SourceState.WAITING
        assert b.status.attempted

        write_atomically(tmp_path / "b.json", dumps(DOC_B))
        assert await run.next_snapshot() == UNION


async def test_rejected_update_keeps_the_previous_payload_in_the_union(tmp_path: Path) -> None:
    write_atomically(tmp_path / "a.json", dumps(DOC_A))
    write_atomically(tmp_path / "b.json", dumps(DOC_B))
    a = FileSource(tmp_path / "a.json", name="a", poll_interval=POLL)
    b = FileSource(tmp_path / "b.json", name="b", poll_interval=POLL)
    async with running([a, b]) as run:
        # b marks its first attempt and emits in one step, so the first snapshot is the union.
        assert await run.next_snapshot() == UNION
        write_atomically(tmp_path / "b.json", b"{not json")
        await wait_until_state(b, SourceState.ERROR)
        await anyio.sleep(0.2)
        run.assert_no_snapshot()
        # A change in a still merges with b's last good payload.
        write_atomically(tmp_path / "a.json", dumps({"roas": [roa("203.0.113.0/24", 24, 1)]}))
        assert await run.next_snapshot() == Snapshot.build(
            [
                vrp("203.0.113.0/24", 24, 1),
                vrp("192.0.2.0/24", 24, 64496),
                vrp("198.51.100.0/24", 24, 64497),
            ],
            [Aspa(64500, (64502,))],
            [router_key()],
        )


async def test_expiry_triggers_a_rebuild_without_the_entry(tmp_path: Path) -> None:
    start = 1_800_000_000
    clock = FakeClock(wall=start, monotonic="real")
    doc = {
        "roas": [
            roa("192.0.2.0/24", 24, 64496, expires=start + 1),
            roa("198.51.100.0/24", 24, 64497),
        ],
        "aspas": [{"customer_asid": 64500, "providers": [64501], "expires": start + 1}],
    }
    write_atomically(tmp_path / "a.json", dumps(doc))
    a = FileSource(tmp_path / "a.json", name="a", poll_interval=POLL, clock=clock)
    with anyio.fail_after(10):
        async with running([a], clock=clock) as run:
            assert await run.next_snapshot() == Snapshot.build(
                [vrp("192.0.2.0/24", 24, 64496), vrp("198.51.100.0/24", 24, 64497)],
                [Aspa(64500, (64501,))],
            )
            clock.set_wall(start + 2)
            assert await run.next_snapshot(within=8) == Snapshot.build(
                [vrp("198.51.100.0/24", 24, 64497)]
            )
            assert run.aggregator.builds == 2


async def test_readiness_is_polled_briefly_not_at_the_expiry_wake_floor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a source has not made its first attempt the loop re-checks readiness every 0.2 s,
    not at its clock tick: a source that attempts without delivering (a missing file) must not
    delay the first snapshot. The tick is raised here to make a wrong wait visible."""
    monkeypatch.setattr(aggregate, "CLOCK_TICK", 5.0)
    write_atomically(tmp_path / "a.json", dumps(DOC_A))
    gate = anyio.Event()
    a = FileSource(tmp_path / "a.json", name="a", poll_interval=POLL)
    b = GatedSource(tmp_path / "missing.json", gate, name="b", poll_interval=POLL)
    async with running([a, b]) as run:
        await wait_until_state(a, SourceState.OK)
        await anyio.sleep(0.1)
        gate.set()
        assert await run.next_snapshot(within=2.5) == SNAP_A
        assert b.status.state is SourceState.WAITING


async def test_source_names_must_be_unique(tmp_path: Path) -> None:
    async def ignore(_build: Build) -> None:
        return None

    a = FileSource(tmp_path / "a.json", name="same")
    b = FileSource(tmp_path / "b.json", name="same")
    with pytest.raises(ValueError, match="unique"):
        Aggregator([a, b], ignore)


def test_merge_at_is_the_union_of_entries_valid_at_now() -> None:
    p1 = parse_export(
        dumps({"roas": [roa("192.0.2.0/24", 24, 1, expires=100), roa("10.0.0.0/8", 8, 2)]})
    )
    p2 = parse_export(
        dumps(
            {
                "roas": [roa("10.0.0.0/8", 8, 2, expires=50)],
                "aspas": [{"customer_asid": 5, "providers": [6], "expires": 100}],
            }
        )
    )
    assert merge_at([p1, p2], 0) == Snapshot.build(
        [vrp("192.0.2.0/24", 24, 1), vrp("10.0.0.0/8", 8, 2)], [Aspa(5, (6,))]
    )
    assert merge_at([p1, p2], 100) == Snapshot.build([vrp("10.0.0.0/8", 8, 2)])
    assert merge_at([p1], 100) == p1.snapshot_at(100)
    assert merge_at([], 0) == Snapshot()
