"""The shared reader's re-judgings in its own build slots: a SLURM policy re-judging is a
calibration (it waits for a header build when one slot is taken), and one that was overtaken
by a new header is judged again on that header, so the policy is never lost."""

from __future__ import annotations

import ipaddress
import time
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from persistence.shared import SharedSnapshotClient
from persistence.state import PersistedState, StateId
from snapshot.slurm import EMPTY_POLICY, SlurmPolicy, parse_slurm
from tests.persistence.shared_faults import GatedJudge
from tests.persistence.shared_harness import config, eventually, owner
from tests.persistence.shared_states import state

pytestmark = pytest.mark.anyio


def drop(prefix: str) -> SlurmPolicy:
    """A SLURM policy filtering ``prefix`` (IPv4)."""
    ipaddress.IPv4Network(prefix)
    return parse_slurm(
        '{"slurmVersion": 1, "validationOutputFilters": {"prefixFilters": [{"prefix": "'
        + prefix
        + '"}], "bgpsecFilters": []}, "locallyAddedAssertions": {"prefixAssertions": [], '
        '"bgpsecAssertions": []}}'
    )


def generation_two(state: PersistedState) -> bool:
    """Hold the build of the writer's generation 2 (the new header)."""
    return state.state_id.generation == 2


def prefixes(reader: SharedSnapshotClient) -> set[str]:
    snap = reader.get_snapshot()
    assert snap is not None
    return {str(v.prefix) for v in snap.snapshot.vrps()}


async def test_a_policy_rejudging_shares_the_slot_and_survives_a_new_header(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    now = time.time()
    policy = [EMPTY_POLICY]
    async with owner(path) as db:
        assert db.store_id is not None
        await db.commit(state(db.store_id, StateId(1, 1), now, vrp_ends=(now + 900,)), None)
        one_slot = replace(config(path, slots=1), policy=lambda: policy[0])
        reader = SharedSnapshotClient(one_slot)
        gated = GatedJudge(generation_two)
        reader._builds.judge = gated
        async with reader, anyio.create_task_group() as tg:
            await tg.start(reader.run)
            assert prefixes(reader) == {"10.0.0.0/16", "10.1.0.0/16"}
            await db.commit(
                state(db.store_id, StateId(1, 2), now, vrp_ends=(now + 900,)), StateId(1, 1)
            )
            await eventually(gated.entered.is_set)  # the header build holds the one slot
            policy[0] = drop("10.1.0.0/16")
            reader.policy_changed()
            await eventually(lambda: reader.get_metrics().builds_waiting == 1)
            assert gated.most == 1
            gated.gate.set()
            await eventually(
                lambda: (
                    (s := reader.get_snapshot()) is not None
                    and s.generation == 2
                    and prefixes(reader) == {"10.0.0.0/16"}
                )
            )
            assert gated.most == 1  # never two builds in threads at once
            metrics = reader.get_metrics()
            assert metrics.builds_running == 0
            assert metrics.builds_waiting == 0
            tg.cancel_scope.cancel()
