"""The shared reader against a real SQLite owner in this process: recovery, polling, expiry,
readiness, watch events and close (persistence contract, shared reading)."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

import anyio
import pytest

from persistence.errors import PersistenceError
from persistence.shared import (
    ReaderId,
    ReaderState,
    ResyncRequiredError,
    SharedReaderConfig,
    SharedSnapshotClient,
    SnapshotExpiredError,
)
from persistence.state import StateId
from snapshot.kinds import PayloadKind
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


async def test_constructor_does_no_io_and_a_missing_file_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    reader = SharedSnapshotClient(SharedReaderConfig(path=path))
    assert reader.get_status().state is ReaderState.CREATED
    assert reader.get_snapshot() is None
    with pytest.raises(PersistenceError):
        async with reader:
            pass
    assert [entry async for entry in anyio.Path(tmp_path).iterdir()] == []


async def test_recovers_then_follows_the_owners_commits(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    now = time.time()
    async with owner(path) as db:
        assert db.store_id is not None
        await db.commit(state(db.store_id, StateId(1, 1), now, revision=7), None)
        reader = SharedSnapshotClient(config(path))
        async with reader:
            snap = reader.get_snapshot()
            assert snap is not None
            assert (snap.store_id, snap.epoch, snap.generation) == (db.store_id, 1, 1)
            assert snap.config_revision == 7
            assert snap.snapshot.vrp_count == 1
            status = reader.get_status()
            assert status.state is ReaderState.OPEN
            assert (status.store_id, status.epoch, status.generation) == (db.store_id, 1, 1)
            assert status.config_revision == 7
            assert status.persistence_error is None
            assert status.available
            async with anyio.create_task_group() as tg:
                await tg.start(reader.run)
                assert reader.get_status().state is ReaderState.RUNNING
                # The owner still writes: the reader took no lock and holds no write lock.
                await db.commit(
                    state(db.store_id, StateId(1, 2), now, revision=8, asn=64500),
                    StateId(1, 1),
                )
                new = await until_generation(reader, 2)
                assert new.config_revision == 8
                assert {v.asn for v in new.snapshot.vrps()} == {64500}
                assert {v.asn for v in snap.snapshot.vrps()} == {64496}  # old one unchanged
                await reader.aclose()
            assert reader.get_status().state is ReaderState.CLOSED


async def test_a_file_without_the_schema_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"")
    with pytest.raises(PersistenceError):
        async with SharedSnapshotClient(SharedReaderConfig(path=path)):
            pass
    assert path.read_bytes() == b""


async def test_a_kind_past_its_usable_until_is_refused_and_rejudged(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    now = time.time()
    offset = [0.0]
    async with owner(path) as db:
        assert db.store_id is not None
        soon = now + 100
        await db.commit(
            state(db.store_id, StateId(1, 1), now, vrp_ends=(soon,), aspa_end=now + 1000),
            None,
        )
        settings = config(path, lambda: time.time() + offset[0])
        async with SharedSnapshotClient(settings) as reader:
            old = reader.get_snapshot()
            assert old is not None
            assert old.usable_until_by_kind[PayloadKind.VRP] == pytest.approx(soon)
            assert old.usable_until_by_kind[PayloadKind.ROUTER_KEY] is None
            assert old.snapshot.vrp_count == 2
            assert old.check(PayloadKind.VRP).vrp_count == 2
            async with anyio.create_task_group() as tg:
                await tg.start(reader.run)
                offset[0] = 200.0  # the reader's clock passes the VRP's end, not the ASPA's
                with pytest.raises(SnapshotExpiredError) as caught:
                    old.check(PayloadKind.VRP)
                assert caught.value.kind is PayloadKind.VRP
                with pytest.raises(SnapshotExpiredError):
                    old.view().validate_origin("10.1.0.0/16", 64496, now=now + 200)
                assert old.check(PayloadKind.ASPA).aspas  # ASPAs are still usable
                await eventually(lambda: reader.get_snapshot() is not old)
                snap = reader.get_snapshot()
                assert snap is not None
                assert snap.snapshot.vrp_count == 1  # the expired VRP is gone
                assert snap.usable_until_by_kind[PayloadKind.VRP] is None
                assert snap.check(PayloadKind.VRP).vrp_count == 1
                assert snap.generation == 1
                await reader.aclose()


async def test_wait_ready_needs_an_explicit_set(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    now = time.time()
    async with owner(path) as db:
        assert db.store_id is not None
        reader = SharedSnapshotClient(config(path))
        async with reader, anyio.create_task_group() as tg:
            await tg.start(reader.run)
            for bad in (set(), {PayloadKind.ROUTER_KEY}):
                with pytest.raises(ValueError, match="non-empty"):
                    await reader.wait_ready(bad)
            assert reader.get_snapshot() is None
            assert not reader.get_status().available
            await db.commit(state(db.store_id, StateId(1, 1), now), None)
            with anyio.fail_after(TIMEOUT):
                snap = await reader.wait_ready({PayloadKind.VRP, PayloadKind.ASPA})
            assert snap.generation == 1
            assert reader.get_status().ready_kinds >= {PayloadKind.VRP, PayloadKind.ASPA}
            await reader.aclose()


async def test_watch_initial_coalesced_and_a_sticky_resync(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    now = time.time()
    async with owner(path) as db:
        assert db.store_id is not None
        await db.commit(state(db.store_id, StateId(1, 1), now), None)
        reader = SharedSnapshotClient(config(path))
        async with reader:
            first, second = reader.watch(), reader.watch()
            initial = await next_event(first)
            assert initial.kind == "initial"
            assert initial.end == (1, 1)
            # The reader's own identity: its own store id, epoch 1, its publish count.
            own = initial.snapshot.reader_id
            assert own == ReaderId(reader.reader_store_id, 1, 1)
            assert own.store_id not in {"", db.store_id}
            assert SharedSnapshotClient(config(path)).reader_store_id != own.store_id
            assert (await next_event(second)).kind == "initial"
            # Three generations while nobody polls: one coalesced endpoint diff.
            previous = StateId(1, 1)
            for generation, asn in ((2, 64497), (3, 64498), (4, 64499)):
                await db.commit(state(db.store_id, StateId(1, generation), now, asn=asn), previous)
                previous = StateId(1, generation)
            async with anyio.create_task_group() as tg:
                await tg.start(reader.run)
                event = await next_event(first)
                assert event.kind == "coalesced"
                assert (event.start, event.end) == ((1, 1), (1, 4))
                assert (event.added, event.removed) == (2, 2)  # one VRP and one ASPA each way
                assert (await next_event(second)).end == (1, 4)
                await db.commit(state(db.store_id, StateId(1, 5), now), previous)
                event = await next_event(first)
                assert (event.kind, event.start, event.end) == ("changed", (1, 4), (1, 5))
                # The second subscriber is independent: it still has its own event queued.
                # A new writer epoch: existing subscriptions must resynchronise.
                await db.commit(state(db.store_id, StateId(2, 1), now), StateId(1, 5))
                await until_generation(reader, 1)
                for watch in (first, second):
                    with pytest.raises(ResyncRequiredError):
                        await next_event(watch)
                    with pytest.raises(ResyncRequiredError):  # sticky
                        await next_event(watch)
                fresh = reader.watch()
                renewed = await next_event(fresh)
                assert renewed.end == (2, 1)
                # A new writer epoch is a new epoch of the reader's own identity too.
                assert renewed.snapshot.reader_id == ReaderId(reader.reader_store_id, 2, 4)
                assert reader.get_status().reader_id == renewed.snapshot.reader_id
                await reader.aclose()
                with pytest.raises(StopAsyncIteration):
                    await next_event(fresh)


async def test_a_read_failure_is_reported_and_the_view_runs_out(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    now = time.time()
    offset = [0.0]
    async with owner(path) as db:
        assert db.store_id is not None
        await db.commit(state(db.store_id, StateId(1, 1), now, vrp_ends=(now + 100,)), None)
    settings = config(path, lambda: time.time() + offset[0])
    async with SharedSnapshotClient(settings) as reader, anyio.create_task_group() as tg:
        await tg.start(reader.run)
        # Damage the stored header under the reader: its digest check fails on every read.
        with contextlib.closing(sqlite3.connect(path)) as raw, raw:
            raw.execute("UPDATE store_meta SET meta_digest = zeroblob(32)")
        await eventually(lambda: reader.get_status().persistence_error is not None)
        status = reader.get_status()
        assert status.available  # the old view is still good
        assert status.generation == 1
        held = reader.get_snapshot()
        assert held is not None
        offset[0] = 200.0
        status = reader.get_status()
        assert not status.available
        with pytest.raises(SnapshotExpiredError):
            held.check(PayloadKind.VRP)
        # The timer still judges the last state read: the expired VRP is dropped, what is
        # within its own end stays; the reader stays unavailable until a read succeeds.
        await eventually(lambda: reader.get_snapshot() is not held)
        snap = reader.get_snapshot()
        assert snap is not None
        assert snap.snapshot.vrp_count == 1
        assert not reader.get_status().available
        assert reader.get_status().read_errors > 0
        await reader.aclose()


async def test_aclose_ends_everything_and_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    now = time.time()
    async with owner(path) as db:
        assert db.store_id is not None
        await db.commit(state(db.store_id, StateId(1, 1), now), None)
        reader = SharedSnapshotClient(config(path))
        await reader.__aenter__()
        watch = reader.watch()
        assert (await next_event(watch)).kind == "initial"
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                await tg.start(reader.run)
                await reader.aclose()  # run returns: the task group ends
        assert reader.get_status().state is ReaderState.CLOSED
        assert not reader.get_status().cleanup_overdue
        with pytest.raises(StopAsyncIteration):
            await next_event(watch)
        await reader.aclose()
        await reader.__aexit__(None, None, None)
        with pytest.raises(RuntimeError):
            reader.watch()
        assert reader.get_snapshot() is not None  # the last snapshot stays readable
