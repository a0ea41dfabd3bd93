"""A build thread never publishes; the aggregator re-checks each result (L-32, L-34, L-35).

A build runs in a worker thread, held there by the test; meanwhile the test withdraws, replaces
or reconfigures the source the build was made from, then lets the build finish and looks at
what the aggregator published: a result made stale is dropped, a published snapshot is already
prepared for queries, and a source ID deleted and re-added never admits the old task's results.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from snapshot.queries import OriginState, validate_origin
from snapshot.snapshot import Snapshot
from tests.clock import FakeClock
from tests.upstream.helpers import (
    A,
    B,
    config,
    export,
    snapshot_event,
    wait_for,
    write_atomically,
)
from tests.upstream.scripted_source import ScriptedSource, payload
from upstream import aggregate, merge
from upstream.aggregate import Aggregator, Build, Group
from upstream.client import Client, SnapshotEvent
from upstream.file_source import FileSource
from upstream.merge import Built
from upstream.selection import GroupSpec
from upstream.source import Delivery, DeliverySink, payload_identity

pytestmark = pytest.mark.anyio

C = [("203.0.113.0/24", 24, 64498)]
SPEC = GroupSpec("only", 1, startup_timeout=0, failback_delay=0)


def has(snap: Snapshot, vrps: list[tuple[str, int, int]]) -> bool:
    return {(str(v.prefix), v.max_length, v.asn) for v in snap.vrps()} == set(vrps)


@dataclass
class Held:
    """Builds wait in their thread while ``hold`` is set; each result is tagged with the
    configuration revision the test had when that build started."""

    revision: int = 0
    hold: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    building: threading.Event = field(default_factory=threading.Event)
    started_under: dict[int, int] = field(default_factory=dict)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        original = merge.build_snapshot

        def held(*args: Any) -> Built:
            revision = self.revision
            if self.hold.is_set():
                self.building.set()
                self.release.wait(10)
            built = original(*args)
            self.started_under[id(built.snapshot)] = revision
            return built

        monkeypatch.setattr(aggregate, "build_snapshot", held)

    def arm(self) -> None:
        self.building.clear()
        self.release.clear()
        self.hold.set()

    def let_go(self) -> None:
        self.hold.clear()
        self.release.set()


@dataclass
class Run:
    aggregator: Aggregator
    held: Held
    #: (the test's revision when published, the build) for every publication.
    published: list[tuple[int, Build]]
    clock: FakeClock

    async def until(self, predicate: Callable[[Snapshot], bool]) -> Snapshot:
        await wait_for(lambda: bool(self.published) and predicate(self.published[-1][1].snapshot))
        return self.published[-1][1].snapshot

    def reconfigure(self, groups: list[Group]) -> None:
        """What `Client.apply_config` does: a new revision, then the aggregator in place."""
        self.held.revision += 1
        self.aggregator.reconfigure(groups)


@asynccontextmanager
async def running(groups: list[Group], monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Run]:
    held = Held()
    held.install(monkeypatch)
    published: list[tuple[int, Build]] = []

    async def on_snapshot(build: Build) -> None:
        published.append((held.revision, build))

    clock = FakeClock(wall=1_700_000_000.0, monotonic="real")
    aggregator = Aggregator([], on_snapshot, clock=clock, groups=groups)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await tg.start(aggregator.run)
            try:
                yield Run(aggregator, held, published, clock)
            finally:
                held.let_go()
                tg.cancel_scope.cancel()


async def test_a_published_snapshot_is_prepared_before_anyone_sees_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """L-32: the build thread made the query structures; a query on the published snapshot
    reads them and changes nothing."""
    only = ScriptedSource("a")
    async with running([Group(SPEC, (only,))], monkeypatch) as run:
        await wait_for(lambda: only.running)
        only.deliver(payload(A))
        snap = await run.until(lambda s: has(s, A))
        assert all(build.snapshot.prepared for _, build in run.published)
        index = snap.origin_index
        assert index is not None
        assert validate_origin(snap, "192.0.2.0/24", 64496).state is OriginState.VALID
        assert snap.origin_index is index
        only.deliver(payload(A + C))  # VRPs change: a new index; the old snapshot keeps its own
        newer = await run.until(lambda s: has(s, A + C))
        assert newer.origin_index is not None
        assert newer.origin_index is not index
        assert validate_origin(snap, "203.0.113.0/24", 64498).state is OriginState.NOT_FOUND
        assert validate_origin(newer, "203.0.113.0/24", 64498).state is OriginState.VALID


async def test_an_owner_that_never_queries_can_leave_snapshots_unprepared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the index (an RTR server): a query still answers, by searching, writing nothing."""
    monkeypatch.setattr(Aggregator, "prepare_snapshots", False)
    only = ScriptedSource("a")
    async with running([Group(SPEC, (only,))], monkeypatch) as run:
        await wait_for(lambda: only.running)
        only.deliver(payload(A))
        snap = await run.until(lambda s: has(s, A))
        assert not snap.prepared
        assert validate_origin(snap, "192.0.2.0/24", 64496).state is OriginState.VALID
        assert not snap.prepared


async def test_a_build_of_data_withdrawn_while_it_ran_is_dropped_even_after_new_data(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """L-34: the source revokes its data while a build of it runs and then delivers again: the
    source is usable again, but the withdrawn data never goes out after the withdrawal."""
    only = ScriptedSource("a", online=True)
    async with running([Group(SPEC, (only,))], monkeypatch) as run:
        await wait_for(lambda: only.running)
        only.deliver(payload(B))
        await run.until(lambda s: has(s, B))
        run.held.arm()
        only.deliver(payload(A))
        await wait_for(run.held.building.is_set)
        only.withdraw()  # decided while the build of A runs
        only.deliver(payload(C))  # and usable again before that build is back
        run.held.let_go()
        await run.until(lambda s: has(s, C))
        await anyio.sleep(0.2)
        assert not any(has(build.snapshot, A) for _, build in run.published)
        assert has(run.published[-1][1].snapshot, C)


async def test_a_build_of_data_distrusted_while_it_ran_is_dropped_even_after_new_data(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """L-34: a wall-clock jump distrusts the source while a build of its data runs (selection
    goes on beside a build); new raw input makes it trusted again before the build is back."""
    only = ScriptedSource("a", online=True)
    async with running([Group(SPEC, (only,))], monkeypatch) as run:
        await wait_for(lambda: only.running)
        only.deliver(payload(B))
        await run.until(lambda s: has(s, B))
        run.held.arm()
        only.deliver(payload(A))
        await wait_for(run.held.building.is_set)
        run.clock.move_wall(3600)  # beyond the 300 s tolerance
        run.aggregator.poke()
        await wait_for(lambda: only.resyncs > 0)  # distrusted, asked to resync
        only.deliver(payload(C))  # new raw input: trusted again
        assert run.aggregator.entries["a"].availability(run.aggregator.keeper.now()).usable
        run.held.let_go()
        await run.until(lambda s: has(s, C))
        await anyio.sleep(0.2)
        assert not any(has(build.snapshot, A) for _, build in run.published)


async def test_a_build_of_a_replaced_version_never_comes_after_the_newer_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """L-34: newer data admitted while a build of older data runs. The older result may still
    go out (it is what was admitted before; publications are serial), but only before the
    newer one: the newer state is never overwritten by it."""
    only = ScriptedSource("a")
    async with running([Group(SPEC, (only,))], monkeypatch) as run:
        await wait_for(lambda: only.running)
        only.deliver(payload(B))
        await run.until(lambda s: has(s, B))
        run.held.arm()
        only.deliver(payload(A))
        await wait_for(run.held.building.is_set)
        only.deliver(payload(C))
        run.held.let_go()
        await run.until(lambda s: has(s, C))
        await anyio.sleep(0.2)
        snapshots = [build.snapshot for _, build in run.published]
        first_c = next(i for i, s in enumerate(snapshots) if has(s, C))
        assert all(has(s, C) for s in snapshots[first_c:])
        assert run.aggregator.entries["a"].availability(0).usable


async def test_a_build_started_before_a_configuration_change_is_not_published(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """L-35: a build admitted under one revision is not published under the next, even when
    the change left every source it was built from as it was (it is built again)."""
    only = ScriptedSource("a")
    async with running([Group(SPEC, (only,))], monkeypatch) as run:
        await wait_for(lambda: only.running)
        only.deliver(payload(B))
        await run.until(lambda s: has(s, B))
        run.held.arm()
        only.deliver(payload(A))
        await wait_for(run.held.building.is_set)
        same_source = GroupSpec("only", 1, startup_timeout=0, failback_delay=5)
        run.reconfigure([Group(same_source, (only,))])
        assert run.aggregator.entries["a"].source is only  # kept, with its data
        run.held.let_go()
        await wait_for(lambda: run.published[-1][0] == 1)
        await run.until(lambda s: has(s, A))
        for revision, build in run.published:
            assert run.held.started_under[id(build.snapshot)] == revision, revision


async def test_a_source_id_deleted_and_re_added_never_admits_the_old_tasks_results(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """L-35: source "a" is removed while a build of its data runs, and re-added (a new
    incarnation): neither that build nor a late delivery of the old task is admitted."""
    old = ScriptedSource("a")
    async with running([Group(SPEC, (old,))], monkeypatch) as run:
        await wait_for(lambda: old.running)
        old.deliver(payload(B))
        await run.until(lambda s: has(s, B))
        run.held.arm()
        old.deliver(payload(A))
        await wait_for(run.held.building.is_set)
        run.reconfigure([Group(SPEC, ())])  # "a" deleted
        new = ScriptedSource("a")
        run.reconfigure([Group(SPEC, (new,))])  # and re-added
        run.held.let_go()
        await wait_for(lambda: new.running)
        old.deliver(payload(A))  # the old task's sink, late: dropped
        await anyio.sleep(0.2)
        assert not any(has(build.snapshot, A) for _, build in run.published)
        assert run.aggregator.entries["a"].payload is None
        new.deliver(payload(C))
        await run.until(lambda s: has(s, C))
        old.deliver(payload(A))
        await anyio.sleep(0.2)
        assert not any(has(build.snapshot, A) for _, build in run.published)
        assert has(run.published[-1][1].snapshot, C)


async def test_apply_config_twice_never_admits_the_removed_tasks_late_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """L-35 through the client: revision 1 deletes source "a.json", revision 2 adds it again;
    what the first incarnation's task hands its sink afterwards is never admitted."""
    sinks: dict[int, DeliverySink] = {}
    original_run = FileSource.run

    async def recording_run(self: FileSource, sink: DeliverySink) -> None:
        sinks[id(self)] = sink
        await original_run(self, sink)

    monkeypatch.setattr(FileSource, "run", recording_run)
    first, other = tmp_path / "a.json", tmp_path / "b.json"
    write_atomically(first, export(A))
    write_atomically(other, export(B))
    client = Client(config(first))
    async with client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.fail_after(10):
            await client.wait_ready()
            old = client._aggregator.entries["a.json"].source
            await wait_for(lambda: id(old) in sinks)
            await client.apply_config(config(other, revision=1))
            await client.apply_config(config(first, other, revision=2))
            new = client._aggregator.entries["a.json"].source
            assert new is not old
            await wait_for(
                lambda: (
                    (s := client.get_snapshot()) is not None
                    and has(s.snapshot, A + B)
                    and s.config_revision == 2
                )
            )
            late = payload(C)
            sinks[id(old)](Delivery(late, payload_identity(late)))
            await anyio.sleep(0.3)
            current = client.get_snapshot()
            assert current is not None
            assert has(current.snapshot, A + B)
            assert client._aggregator.entries["a.json"].payload is not late
        await client.aclose()


async def test_a_build_whose_diff_straddles_apply_config_keeps_its_revision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """L-35, the client's half: a build the aggregator admitted under revision 0 is still
    being diffed (a worker thread, for large tables) when revision 1 is applied; it must be
    committed as revision 0, and revision 1 is published by the rebuild that follows."""
    from upstream import client as client_module
    from upstream.event_diff import diff_snapshots

    diffing, release = threading.Event(), threading.Event()
    held_snapshots: list[Snapshot] = []
    holding = threading.Event()

    def held_diff(before: Snapshot | None, after: Snapshot, limit: int) -> Any:
        if holding.is_set():
            holding.clear()
            held_snapshots.append(after)
            diffing.set()
            release.wait(10)
        return diff_snapshots(before, after, limit)

    monkeypatch.setattr(client_module, "OFF_LOOP_RECORDS", -1)  # every diff in a thread
    monkeypatch.setattr(client_module, "diff_snapshots", held_diff)
    path = tmp_path / "a.json"
    write_atomically(path, export(A))
    client = Client(config(path))
    seen: list[SnapshotEvent] = []
    async with client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.fail_after(10):
            await client.wait_ready()
            with client.watch() as events:
                holding.set()
                write_atomically(path, export(A + B))
                await wait_for(diffing.is_set)
                await client.apply_config(config(path, revision=1))
                release.set()
                while not seen or seen[-1].snapshot.snapshot is held_snapshots[0]:
                    seen.append(await snapshot_event(events))
        await client.aclose()
    held = [e.snapshot for e in seen if e.snapshot.snapshot is held_snapshots[0]]
    assert held  # the build that straddled the change was committed first
    assert all(s.config_revision == 0 for s in held)
    assert seen[-1].snapshot.config_revision == 1
