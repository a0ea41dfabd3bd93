"""The owner's stored policy and per-family selection through a real SQLite file (P-65, P-66):
a reader without a policy of its own applies the owner's, one with its own applies its own, an
unreadable stored policy is not adopted; each ASPA family's coverage and active group are the
writer's and survive a local re-judging."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import anyio
import pytest

from persistence.shared import Afi, SharedSnapshotClient
from persistence.state import GroupRecord, PersistedState, StateId
from snapshot.model import Aspa
from snapshot.slurm import EMPTY_POLICY, AspaAssertion, PrefixFilter, SlurmPolicy
from snapshot.slurm_document import policy_document
from tests.persistence.shared_harness import config, eventually, owner, until_generation
from tests.persistence.shared_states import state

pytestmark = pytest.mark.anyio

#: Drops every VRP of AS64496 (the test state's) and asserts an ASPA.
OWNERS = SlurmPolicy(
    prefix_filters=(PrefixFilter(None, 64496),),
    aspa_assertions=(AspaAssertion(Aspa(64999, (64998,))),),
)


def with_policy(held: PersistedState, text: str | None) -> PersistedState:
    return dataclasses.replace(held, policy_id=None if text is None else "p", policy_json=text)


async def test_a_reader_without_its_own_policy_applies_the_owners(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    now = time.time()
    async with owner(path) as db:
        assert db.store_id is not None
        first = state(db.store_id, StateId(1, 1), now)
        await db.commit(with_policy(first, policy_document(OWNERS)), None)
        async with SharedSnapshotClient(config(path)) as reader:
            snap = reader.get_snapshot()
            assert snap is not None
            assert snap.snapshot.vrp_count == 0  # the owner's filter
            assert {a.customer for a in snap.snapshot.aspas} == {64496, 64999}
        own = dataclasses.replace(config(path), policy=lambda: EMPTY_POLICY)
        async with SharedSnapshotClient(own) as reader:
            snap = reader.get_snapshot()
            assert snap is not None
            assert snap.snapshot.vrp_count == 1  # its own (empty) policy, not the owner's
            assert {a.customer for a in snap.snapshot.aspas} == {64496}


async def test_an_unreadable_stored_policy_is_not_adopted(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    now = time.time()
    async with owner(path) as db:
        assert db.store_id is not None
        bad = with_policy(state(db.store_id, StateId(1, 1), now), '{"slurmVersion": 9}')
        await db.commit(bad, None)
        reader = SharedSnapshotClient(config(path))
        async with reader, anyio.create_task_group() as tg:
            assert reader.get_snapshot() is None
            error = reader.get_status().persistence_error
            assert error is not None
            assert "owner's stored SLURM policy" in error
            await tg.start(reader.run)
            good = state(db.store_id, StateId(1, 2), now)
            await db.commit(with_policy(good, policy_document(OWNERS)), StateId(1, 1))
            snap = await until_generation(reader, 2)
            assert snap.snapshot.vrp_count == 0
            await eventually(lambda: reader.get_status().persistence_error is None)
            await reader.aclose()


async def test_each_aspa_familys_group_and_coverage_are_the_writers(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    now = time.time()
    offset = [0.0]
    async with owner(path) as db:
        assert db.store_id is not None
        base = state(db.store_id, StateId(1, 1), now, aspa_end=now + 100)
        main = dataclasses.replace(base.sources[0], group_id=0, aspa_families=1)
        spare = dataclasses.replace(
            base.sources[0],
            name="spare",
            group="backup",
            group_id=1,
            selected=frozenset({"aspa"}),
            aspa_families=2,
        )
        kinds = frozenset({"vrp", "aspa", "router_key"})
        held = dataclasses.replace(
            base,
            sources=(main, spare),
            groups=(
                GroupRecord(0, "primary", kinds, ("main",)),
                GroupRecord(1, "backup", kinds, ("spare",)),
            ),
            active_groups=(("vrp", "primary"), ("aspa_v4", "primary"), ("aspa_v6", "backup")),
        )
        await db.commit(held, None)
        reader = SharedSnapshotClient(config(path, lambda: time.time() + offset[0]))
        async with reader, anyio.create_task_group() as tg:
            await tg.start(reader.run)
            status = reader.get_status()
            assert status.aspa_covered == {Afi.IPV4, Afi.IPV6}
            assert status.aspa_active_groups == {Afi.IPV4: ("primary",), Afi.IPV6: ("backup",)}
            assert status.aspa_ready == {Afi.IPV4, Afi.IPV6}
            offset[0] = 200.0  # the ASPAs end: a local re-judging
            await eventually(lambda: reader.get_status().local_generation == 2)
            status = reader.get_status()
            assert status.aspa_active_groups == {Afi.IPV4: ("primary",), Afi.IPV6: ("backup",)}
            await reader.aclose()
