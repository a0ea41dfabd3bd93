"""The shared reader's status and metrics faces (P-65): the writer's `upstream_id`, ``ready``
for VRPs, each ASPA family on its own, the writer's active groups, and I/O-free metrics."""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import time
from pathlib import Path

import anyio
import pytest

from persistence.shared import (
    Afi,
    ReaderState,
    SharedSnapshotClient,
    UpstreamId,
)
from persistence.state import StateId
from snapshot.kinds import PayloadKind
from tests.persistence.shared_faults import GatedStore
from tests.persistence.shared_harness import TIMEOUT, config, eventually, owner
from tests.persistence.shared_states import state

pytestmark = pytest.mark.anyio


async def test_status_reports_upstream_id_ready_and_each_aspa_family(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    now = time.time()
    offset = [0.0]
    async with owner(path) as db:
        assert db.store_id is not None
        first = state(db.store_id, StateId(1, 3), now, revision=5, aspa_end=now + 100)
        vrp_only = dataclasses.replace(first.sources[0], selected=frozenset({"vrp"}))
        aspa_only = dataclasses.replace(
            first.sources[0], name="backup", group="backup", selected=frozenset({"aspa"})
        )
        await db.commit(dataclasses.replace(first, sources=(vrp_only, aspa_only)), None)
        reader = SharedSnapshotClient(config(path, lambda: time.time() + offset[0]))
        before = reader.get_status()
        assert before.upstream_id is None
        assert not before.ready
        assert before.aspa_ready == frozenset()
        async with reader, anyio.create_task_group() as tg:
            await tg.start(reader.run)
            status = reader.get_status()
            assert status.upstream_id == UpstreamId(db.store_id, 1, 3, 5)
            assert status.ready
            assert status.aspa_ready == {Afi.IPV4, Afi.IPV6}
            assert status.aspa_covered == {Afi.IPV4, Afi.IPV6}
            # A state that records no active groups: no family's group is guessed.
            assert status.aspa_active_groups == {Afi.IPV4: (), Afi.IPV6: ()}
            assert status.aspa_usable_until_by_afi == {
                Afi.IPV4: pytest.approx(now + 100),
                Afi.IPV6: pytest.approx(now + 100),
            }
            assert status.usable_until_by_kind[PayloadKind.VRP] is None
            # The writer's choice per kind, as its stored selection records it.
            assert status.active_groups == {
                PayloadKind.VRP: ("primary",),
                PayloadKind.ASPA: ("backup",),
                PayloadKind.ROUTER_KEY: (),
            }
            with anyio.fail_after(TIMEOUT):
                for afi in (None, Afi.IPV4, Afi.IPV6):
                    snap = await reader.wait_ready({PayloadKind.ASPA}, aspa_afi=afi)
                    assert snap.generation == 3
            offset[0] = 200.0  # ASPA ends, VRPs do not
            await eventually(lambda: reader.get_status().local_generation == 2)
            status = reader.get_status()
            judged = reader.get_snapshot()
            assert judged is not None
            assert judged.snapshot.aspas == ()  # re-judged: the ended ASPA is gone, exactly
            assert status.ready
            assert status.aspa_ready == {Afi.IPV4, Afi.IPV6}
            assert status.upstream_id == UpstreamId(db.store_id, 1, 3, 5)  # same writer state
            assert status.active_groups[PayloadKind.ASPA] == ("backup",)  # kept on re-judging
            with anyio.fail_after(TIMEOUT):
                assert (await reader.wait_ready({PayloadKind.VRP})).local_generation == 2
            await reader.aclose()


async def test_aspa_readiness_waits_per_family_and_refuses_a_bad_family(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    now = time.time()
    offset = [0.0]
    async with owner(path) as db:
        assert db.store_id is not None
        await db.commit(state(db.store_id, StateId(1, 1), now, aspa_end=now + 100), None)
        reader = SharedSnapshotClient(config(path, lambda: time.time() + offset[0]))
        async with reader:
            with pytest.raises(ValueError, match="aspa_afi"):
                await reader.wait_ready({PayloadKind.ASPA}, aspa_afi="ipv4")  # type: ignore[arg-type]
            snap = reader.get_snapshot()
            assert snap is not None
            offset[0] = 200.0  # no run(): nothing re-judges, the held snapshot just runs out
            assert not snap.aspa_usable(Afi.IPV4, reader.now())
            status = reader.get_status()
            assert status.ready  # VRPs never end
            assert status.aspa_ready == frozenset()
            assert status.ready_kinds == {PayloadKind.VRP, PayloadKind.ROUTER_KEY}
            for afi in (None, Afi.IPV4, Afi.IPV6):
                with anyio.move_on_after(0.2) as scope:
                    await reader.wait_ready({PayloadKind.ASPA}, aspa_afi=afi)
                assert scope.cancelled_caught
            with anyio.fail_after(TIMEOUT):
                await reader.wait_ready({PayloadKind.VRP})


async def test_metrics_count_polls_failures_and_builds(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    now = time.time()
    async with owner(path) as db:
        assert db.store_id is not None
        await db.commit(state(db.store_id, StateId(1, 1), now), None)
        reader = SharedSnapshotClient(config(path))
        empty = reader.get_metrics()
        assert (empty.state, empty.polls, empty.local_generation) == (ReaderState.CREATED, 0, 0)
        assert empty.upstream_generation is None
        assert empty.last_poll_at is None
        async with reader, reader.watch(), anyio.create_task_group() as tg:
            await tg.start(reader.run)
            await eventually(lambda: reader.get_metrics().polls >= 3)
            metrics = reader.get_metrics()
            assert metrics.last_poll_at is not None
            assert metrics.last_poll_at <= reader.now()
            assert (metrics.states_read, metrics.header_builds, metrics.calibrations) == (1, 1, 0)
            assert (metrics.vrps, metrics.aspas, metrics.router_keys, metrics.watchers) == (
                1,
                1,
                0,
                1,
            )
            await db.commit(state(db.store_id, StateId(1, 2), now), StateId(1, 1))
            await eventually(lambda: reader.get_metrics().upstream_generation == 2)
            assert reader.get_metrics().local_generation == 2
            assert reader.get_metrics().states_read == 2
            with contextlib.closing(sqlite3.connect(path)) as raw, raw:
                raw.execute("UPDATE store_meta SET meta_digest = zeroblob(32)")
            await eventually(lambda: reader.get_metrics().poll_failures >= 2)
            await reader.aclose()


async def test_status_and_metrics_answer_while_the_owner_thread_is_blocked(tmp_path: Path) -> None:
    """Samples, not reads: they answer at once while a header read blocks the owner thread."""
    path = tmp_path / "state.db"
    now = time.time()
    async with owner(path) as db:
        assert db.store_id is not None
        await db.commit(state(db.store_id, StateId(1, 1), now), None)
        reader = SharedSnapshotClient(config(path))
        store = GatedStore(path)
        reader._store = store
        async with reader, anyio.create_task_group() as tg:
            store.armed.set()
            await tg.start(reader.run)
            await eventually(store.entered.is_set)
            polls = reader.get_metrics().polls
            status = reader.get_status()
            assert status.generation == 1
            assert status.ready
            assert reader.get_snapshot() is not None
            await anyio.sleep(0.1)
            assert reader.get_metrics().polls == polls  # still in that one look
            store.gate.set()
            await eventually(lambda: reader.get_metrics().polls > polls)
            await reader.aclose()
