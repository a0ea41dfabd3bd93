"""The shared reader's events carry a conservative impact set, like the upstream client's
(lifecycle contract, subscriptions: affected prefixes and customers, a full revalidation of a
kind beyond the event size limit; SQLite polling coalesces with that impact, L-72)."""

from __future__ import annotations

import ipaddress
import time
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from persistence.shared import SharedReaderConfig, SharedSnapshotClient
from persistence.state import StateId
from snapshot.kinds import PayloadKind
from snapshot.model import Vrp
from tests.persistence.shared_harness import config, next_event, owner
from tests.persistence.shared_states import state

pytestmark = pytest.mark.anyio

NET = ipaddress.ip_network


async def test_a_coalesced_event_carries_the_endpoint_diffs_impact(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    now = time.time()
    async with owner(path) as db:
        assert db.store_id is not None
        await db.commit(state(db.store_id, StateId(1, 1), now), None)
        reader = SharedSnapshotClient(config(path))
        async with reader:
            watch = reader.watch()
            initial = await next_event(watch)
            # All of the initial snapshot is new to the subscriber.
            assert initial.requires_full_revalidation == frozenset(PayloadKind)
            previous = StateId(1, 1)
            for generation, asn in ((2, 64497), (3, 64498), (4, 64499)):
                await db.commit(state(db.store_id, StateId(1, generation), now, asn=asn), previous)
                previous = StateId(1, generation)
            async with anyio.create_task_group() as tg:
                await tg.start(reader.run)
                event = await next_event(watch)
                assert event.kind == "coalesced"
                changes = event.changes
                assert changes.vrps_removed == (Vrp(NET("10.0.0.0/16"), 24, 64496),)
                assert changes.vrps_added == (Vrp(NET("10.0.0.0/16"), 24, 64499),)
                # The endpoints' impact only: the skipped generations' ASNs are not in it.
                assert event.affected_prefixes == (NET("10.0.0.0/16"),)
                assert event.affected_customers == (64496, 64499)
                assert event.requires_full_revalidation == frozenset()
                assert [(c.customer, c.old, c.new) for c in changes.aspa_changes] == [
                    (64496, (64511,), None),
                    (64499, None, (64511,)),
                ]
                await reader.aclose()


async def test_a_kind_beyond_the_event_size_limit_asks_for_its_full_revalidation(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    now = time.time()
    async with owner(path) as db:
        assert db.store_id is not None
        await db.commit(state(db.store_id, StateId(1, 1), now), None)
        reader = SharedSnapshotClient(replace(config(path), event_size_limit=2))
        async with reader:
            watch = reader.watch()
            await next_event(watch)
            async with anyio.create_task_group() as tg:
                await tg.start(reader.run)
                # Two VRPs added and one removed (3 > 2); two ASPA changes (within the limit).
                later = state(db.store_id, StateId(1, 2), now, asn=64497, vrp_ends=(now + 3600,))
                await db.commit(later, StateId(1, 1))
                event = await next_event(watch)
                assert event.kind == "changed"
                assert (event.added, event.removed) == (3, 2)
                assert event.requires_full_revalidation == frozenset({PayloadKind.VRP})
                # Never a truncated list posing as complete.
                assert event.changes.vrps_added == event.changes.vrps_removed == ()
                assert event.affected_prefixes == ()
                assert event.affected_customers == (64496, 64497)
                await reader.aclose()


async def test_an_expiry_event_names_the_expired_prefix(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    now = time.time()
    offset = [0.0]
    async with owner(path) as db:
        assert db.store_id is not None
        # 10.1.0.0/16 expires in an hour; the reader's wall clock jumps past it.
        await db.commit(state(db.store_id, StateId(1, 1), now, vrp_ends=(now + 3600,)), None)
        reader = SharedSnapshotClient(config(path, lambda: time.time() + offset[0]))
        async with reader:
            watch = reader.watch()
            await next_event(watch)
            async with anyio.create_task_group() as tg:
                await tg.start(reader.run)
                offset[0] = 7200.0
                event = await next_event(watch)
                assert event.kind == "expired"
                assert event.changes.vrps_removed == (Vrp(NET("10.1.0.0/16"), 16, 64496),)
                assert event.affected_prefixes == (NET("10.1.0.0/16"),)
                assert event.affected_customers == ()
                assert event.requires_full_revalidation == frozenset()
                await reader.aclose()


def test_the_event_size_limit_must_not_be_negative(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="event_size_limit"):
        SharedReaderConfig(path=tmp_path / "state.db", event_size_limit=-1)
