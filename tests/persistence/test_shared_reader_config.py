"""A configuration-only change of the writer (P-66): the new snapshot, status and event carry
the new ``config_revision`` with the new `upstream_id`; earlier snapshots stay as they were."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from persistence.shared import SharedSnapshotClient, UpstreamId
from persistence.state import StateId
from tests.persistence.shared_harness import config, next_event, owner
from tests.persistence.shared_states import state

pytestmark = pytest.mark.anyio


async def test_a_configuration_only_change_is_published_with_its_revision(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    now = time.time()
    async with owner(path) as db:
        assert db.store_id is not None
        await db.commit(state(db.store_id, StateId(1, 1), now, revision=1), None)
        reader = SharedSnapshotClient(config(path))
        async with reader, reader.watch() as watch, anyio.create_task_group() as tg:
            initial = await next_event(watch)
            old = initial.snapshot
            old_vrps = list(old.snapshot.vrps())
            old_until = dict(old.usable_until_by_kind)
            await tg.start(reader.run)
            # The same payload under a new configuration revision.
            await db.commit(state(db.store_id, StateId(1, 2), now, revision=2), StateId(1, 1))
            event = await next_event(watch)
            assert (event.kind, event.start, event.end) == ("changed", (1, 1), (1, 2))
            assert (event.added, event.removed) == (0, 0)
            new = event.snapshot
            assert new.config_revision == 2
            assert new.upstream_id == UpstreamId(db.store_id, 1, 2, 2)
            assert reader.get_snapshot() is new
            status = reader.get_status()
            assert status.config_revision == 2
            assert status.upstream_id == new.upstream_id
            assert status.local_generation == new.local_generation == old.local_generation + 1
            assert list(new.snapshot.vrps()) == old_vrps
            # The earlier snapshot keeps its own configuration identity and deadlines.
            assert old.config_revision == 1
            assert old.upstream_id == UpstreamId(db.store_id, 1, 1, 1)
            assert old.version == (1, 1)
            assert list(old.snapshot.vrps()) == old_vrps
            assert old.usable_until_by_kind == old_until
            await reader.aclose()
