"""The embeddable `Client`: lifecycle, readiness, watch, runtime reconfiguration, honest close."""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.clock import FakeClock
from tests.upstream.helpers import A, B, config, export, slow_builds, wait_for, write_atomically
from upstream import file_source
from upstream.client import (
    Client,
    ClientState,
    Event,
    ResyncRequiredError,
    SnapshotEvent,
    SnapshotExpiredError,
    StatusEvent,
    Watch,
    WatchClosed,
)
from upstream.config import ClientConfig, GroupConfig, SourceConfig
from upstream.selection import PayloadKind

pytestmark = pytest.mark.anyio


def vrps(client: Client) -> int:
    snap = client.get_snapshot()
    return -1 if snap is None else snap.snapshot.vrp_count


def changed_or_failed(client: Client, events: Watch, generation: int) -> bool:
    return events.error is not None or client.generation >= generation


async def receive_all(events: Watch, seen: list[Event]) -> None:
    """Receive until the watch raises (its sticky error)."""
    while True:
        seen.append(await events.receive())


async def test_lifecycle_and_readiness(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_atomically(path, export(A))
    client = Client(config(path))
    assert client.get_status().state is ClientState.CREATED
    async with client:
        assert client.get_status().state is ClientState.OPEN
        async with anyio.create_task_group() as tg:
            await tg.start(client.run)
            assert client.get_status().state is ClientState.RUNNING
            with anyio.fail_after(5):
                ready = await client.wait_ready()
            assert ready.snapshot.vrp_count == 1
            assert ready.active[PayloadKind.VRP] == "default"
            assert client.get_snapshot() is ready
            status = client.get_status()
            assert status.state is ClientState.RUNNING
            assert [s.name for s in status.sources] == ["a.json"]
            with pytest.raises(RuntimeError, match="never ran"):
                await client.run()
            await client.aclose()
            assert client.get_status().state is ClientState.CLOSED
            await client.aclose()  # idempotent
    assert client.get_status().state is ClientState.CLOSED
    with pytest.raises(RuntimeError, match="cannot open"):
        await client.__aenter__()


async def test_run_needs_an_open_client(tmp_path: Path) -> None:
    client = Client(config(tmp_path / "a.json"))
    with pytest.raises(RuntimeError, match="open client"):
        await client.run()


async def test_watch_starts_with_the_current_snapshot_then_follows(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_atomically(path, export(A))
    async with Client(config(path)) as client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.fail_after(5):
            await client.wait_ready()
        with client.watch() as events, anyio.fail_after(5):
            first = events.initial
            assert first is not None
            assert first.snapshot.vrp_count == 1
            write_atomically(path, export(A + B))
            while True:
                event = await events.receive()
                assert not isinstance(event, SnapshotEvent) or event.snapshot is not first
                if isinstance(event, SnapshotEvent) and event.snapshot.snapshot.vrp_count == 2:
                    break
            assert event.snapshot.generation > first.generation
        await client.aclose()


async def test_watch_overflow_is_a_sticky_resync_error(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_atomically(path, export(A))
    async with Client(config(path)) as client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.fail_after(5):
            await client.wait_ready()
        with client.watch(max_queue=1) as events:
            # The first change fills the queue; the next one overflows it.
            for i in range(3):
                write_atomically(path, export(A if i % 2 else B))
                await wait_for(functools.partial(changed_or_failed, client, events, 2 + i))
            with pytest.raises(ResyncRequiredError, match="overflow"):
                await events.receive()
            with pytest.raises(ResyncRequiredError):
                await events.receive()  # sticky
        await client.aclose()


async def test_apply_config_keeps_watches_and_removed_source_ignored(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_atomically(a, export(A))
    write_atomically(b, export(B))
    async with Client(config(a, b)) as client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        await wait_for(lambda: vrps(client) == 2)
        epoch = client.epoch
        with client.watch() as watch:
            with pytest.raises(ValueError, match="not above"):
                await client.apply_config(config(a, revision=0))
            assert await client.apply_config(config(a, revision=1)) == 1
            # The watch goes on (a configuration commit is no new epoch); the next snapshot
            # is built under revision 1 without the removed source.
            with anyio.fail_after(5):
                while True:
                    event = await watch.receive()
                    if isinstance(event, SnapshotEvent) and event.snapshot.config_revision == 1:
                        break
            assert event.snapshot.snapshot.vrp_count == 1
        assert client.epoch == epoch
        # The removed source's file changes: nothing of it is accepted any more.
        write_atomically(b, export([*B, ("203.0.113.0/24", 24, 64498)]))
        await anyio.sleep(0.3)
        current = client.get_snapshot()
        assert current is not None
        assert current.snapshot.vrp_count == 1
        assert [s.name for s in client.get_status().sources] == ["a.json"]
        await client.aclose()


async def test_status_events_report_group_changes(tmp_path: Path) -> None:
    a = tmp_path / "a.json"
    write_atomically(a, export(A))
    cfg = ClientConfig(
        (SourceConfig("a", str(a), "g"),),
        (GroupConfig("g", 1, startup_timeout=1, failback_delay=0),),
        poll_interval=0.05,
    )
    async with Client(cfg) as client, anyio.create_task_group() as tg:
        with client.watch() as events:
            await tg.start(client.run)
            with anyio.fail_after(5):
                while True:
                    event = await events.receive()
                    if isinstance(event, StatusEvent) and event.status.active[PayloadKind.VRP]:
                        break
            assert event.status.active[PayloadKind.VRP] == "g"
        await client.aclose()


async def test_aclose_during_a_slow_load_is_bounded_and_honest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "a.json"
    write_atomically(path, export(A))
    started = threading.Event()
    release = threading.Event()
    original = file_source._read_and_parse

    def slow(*args: Any) -> Any:
        started.set()
        release.wait(10)
        return original(*args)

    monkeypatch.setattr(file_source, "_read_and_parse", slow)
    client = Client(config(path, cleanup_timeout=0.3))
    try:
        async with client, anyio.create_task_group() as tg:
            await tg.start(client.run)
            await wait_for(started.is_set)
            with anyio.fail_after(2):
                await client.aclose()
            assert client.cleanup_overdue
            assert client.state is ClientState.CLOSING  # not pretending to be closed
            status = client.get_status()
            assert status.cleanup_overdue
            # What is still held, and for how long the close has waited (contract L-09).
            assert status.cleanup_pending == ("source task a.json", "client tasks")
            assert status.cleanup_elapsed is not None
            assert 0.3 <= status.cleanup_elapsed < 2.0
            await anyio.sleep(0.1)
            later = client.get_status().cleanup_elapsed
            assert later is not None
            assert later >= status.cleanup_elapsed + 0.1
            assert not client.final_view_committed  # a source task has not ended yet
            release.set()
            with anyio.fail_after(5):
                await client.wait_final_view()
    finally:
        release.set()
    assert client.final_view_committed
    assert client.state is ClientState.CLOSED
    assert client.get_status().cleanup_pending == ()
    assert client.get_status().cleanup_elapsed is None


async def test_restart_with_the_same_file_never_extends_life(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_atomically(path, export(A, expires=1_800_000_100))
    clock = FakeClock(wall=1_800_000_000, monotonic=1_800_000_000)
    for expected in (1, 0):
        # First run before the entry's expiry; a "restart" after it serves nothing.
        async with Client(config(path), _clock=clock) as client, anyio.create_task_group() as tg:
            await tg.start(client.run)
            await wait_for(lambda: client.get_snapshot() is not None)
            snap = client.get_snapshot()
            assert snap is not None
            assert snap.snapshot.vrp_count == expected
            await client.aclose()
        clock.advance(200)


async def test_an_old_snapshot_refuses_each_kind_past_its_usable_until(tmp_path: Path) -> None:
    """Each kind has its own usable-until time; a query about a kind past it raises
    SnapshotExpiredError naming the kind, even if the client has not rebuilt yet (item 5)."""
    from tests.upstream.helpers import dumps, roa

    clock = FakeClock(wall=1_800_000_000.0, monotonic="real")
    path = tmp_path / "a.json"
    doc = {
        "roas": [roa("192.0.2.0/24", 24, 64496, expires=1_800_000_100)],
        "aspas": [{"customer_asid": 64500, "providers": [64501], "expires": 1_800_000_050}],
    }
    write_atomically(path, dumps(doc))
    async with Client(config(path), _clock=clock) as client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.fail_after(5):
            snap = await client.wait_ready()
        assert snap.usable_until_by_kind[PayloadKind.VRP] == 1_800_000_100
        assert snap.usable_until_by_kind[PayloadKind.ASPA] == 1_800_000_050
        assert snap.usable_until_by_kind[PayloadKind.ROUTER_KEY] is None
        assert snap.usable_until == 1_800_000_050
        assert snap.check(PayloadKind.ASPA).aspas
        clock.move_wall(60)  # the ASPA is past its time, the VRP is not
        assert snap.check(PayloadKind.VRP).vrp_count == 1
        with pytest.raises(SnapshotExpiredError) as info:
            snap.check(PayloadKind.ASPA)
        assert info.value.kind is PayloadKind.ASPA
        with pytest.raises(SnapshotExpiredError):
            snap.view().hop_check(64500, 64501, now=clock.wall())
        assert snap.view().validate_origin("192.0.2.0/24", 64496, now=clock.wall()).state.value
        await client.aclose()


async def test_close_waits_for_a_build_in_progress_past_cleanup_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change already admitted when the close begins is built into the final view even when
    that takes longer than cleanup_timeout; the close reports itself overdue meanwhile."""
    path = tmp_path / "a.json"
    write_atomically(path, export(A))
    client = Client(config(path, cleanup_timeout=0.3))
    async with client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.fail_after(5):
            await client.wait_ready()
        with slow_builds(monkeypatch, hold=1.0) as (building, _):
            write_atomically(path, export(B))
            await wait_for(building.is_set)
            with anyio.fail_after(5):
                await client.aclose()
        assert client.final_view_committed
        assert client.cleanup_overdue
        current = client.get_snapshot()
        assert current is not None
        assert {str(v.prefix) for v in current.snapshot.vrps()} == {"198.51.100.0/24"}


async def test_a_wait_ready_timeout_stops_only_that_wait(tmp_path: Path) -> None:
    """Contract L-30: the sources keep syncing after a timed-out wait_ready."""
    path = tmp_path / "a.json"
    async with Client(config(path)) as client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.move_on_after(0.3) as waited:
            await client.wait_ready()
        assert waited.cancelled_caught
        write_atomically(path, export(A))
        with anyio.fail_after(5):
            snap = await client.wait_ready()
        assert snap.snapshot.vrp_count == 1
        await client.aclose()


async def test_no_event_once_the_close_began(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contract L-19: the final build made while closing is the current snapshot, but no
    subscriber gets an event for it; the watch ends normally (WatchClosed)."""
    path = tmp_path / "a.json"
    write_atomically(path, export(A))
    client = Client(config(path))
    async with client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.fail_after(5):
            await client.wait_ready()
        with client.watch() as events, slow_builds(monkeypatch, hold=0.5) as (building, _):
            write_atomically(path, export(B))
            await wait_for(building.is_set)
            await client.aclose()
            current = client.get_snapshot()
            assert current is not None
            assert current.snapshot.vrp_count == 1
            assert {str(v.prefix) for v in current.snapshot.vrps()} == {"198.51.100.0/24"}
            seen: list[Event] = []
            with pytest.raises(WatchClosed):
                await receive_all(events, seen)
            assert not any(isinstance(e, SnapshotEvent) for e in seen), seen


async def test_the_time_floor_survives_commits_and_a_re_added_source(tmp_path: Path) -> None:
    """Contract L-50: neither a configuration commit nor removing a source and adding it back
    under its name undoes consumed life: X, expired in effective time, stays withdrawn."""
    w0 = 1_800_000_000
    clock = FakeClock(wall=float(w0))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_atomically(a, export(A, expires=w0 + 100))
    write_atomically(b, export(B))

    def has_a(client: Client) -> bool | None:
        snap = client.get_snapshot()
        return (
            None
            if snap is None
            else any(str(v.prefix) == "192.0.2.0/24" for v in snap.snapshot.vrps())
        )

    async with Client(config(a, b), _clock=clock) as client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        await wait_for(lambda: has_a(client) is True)
        clock.move_wall(-3600)  # set back ...
        clock.move_monotonic(200)  # ... while 200 s pass: A's entry expired in effective time
        await wait_for(lambda: has_a(client) is False)
        await client.apply_config(config(b, revision=1))
        await client.apply_config(config(a, b, revision=2))  # "a" again, a new incarnation
        await wait_for(lambda: (s := client.get_snapshot()) is not None and s.config_revision == 2)
        await anyio.sleep(0.5)
        assert has_a(client) is False
        assert client.keeper.now() >= w0 + 200
        await client.aclose()
