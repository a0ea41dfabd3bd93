"""The client's events (contract L-68, L-71): publish identity, snapshot ids, what changed."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapshot.delta import AspaChange
from snapshot.kinds import PayloadKind
from snapshot.model import Aspa, Vrp
from snapshot.snapshot import Snapshot
from tests.upstream.helpers import (
    A,
    B,
    config,
    dumps,
    export,
    roa,
    snapshot_event,
    write_atomically,
)
from upstream.client import Client, SnapshotEvent, StatusEvent
from upstream.event_diff import diff_snapshots
from upstream.events import EventId, SnapshotId


@pytest.mark.anyio
async def test_a_snapshot_event_names_both_snapshots_and_what_changed(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_atomically(path, export(A))
    async with Client(config(path)) as client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.fail_after(5):
            await client.wait_ready()
        with client.watch() as events:
            initial = events.initial
            assert initial is not None
            write_atomically(path, export(A + B))
            event = await snapshot_event(events)
            assert event.before_id == initial.id == SnapshotId(client.epoch, initial.generation)
            assert (
                event.after_id
                == SnapshotId(client.epoch, initial.generation + 1)
                == event.snapshot.id
            )
            assert event.before_config_revision == event.after_config_revision == 0
            assert event.reason == "data"
            assert event.event_id.epoch == client.epoch
            assert event.vrps_added == (Vrp.parse(*B[0]),)
            assert event.vrps_removed == ()
            assert event.affected_prefixes == (ipaddress.ip_network("198.51.100.0/24"),)
            assert event.requires_full_revalidation == frozenset()
            assert [(c.name, c.what) for c in event.source_changes] == [("a.json", "payload")]
            # The origin and max length change: the prefix is affected, whatever they were.
            write_atomically(path, export([("192.0.2.0/24", 26, 64511), *B]))
            second = await snapshot_event(events)
            assert second.before_id == event.after_id
            assert second.event_id.sequence > event.event_id.sequence
            assert second.vrps_removed == (Vrp.parse(*A[0]),)
            assert second.vrps_added == (Vrp.parse("192.0.2.0/24", 26, 64511),)
            assert second.affected_prefixes == (ipaddress.ip_network("192.0.2.0/24"),)
        await client.aclose()


@pytest.mark.anyio
async def test_aspa_changes_name_every_changed_customer(tmp_path: Path) -> None:
    path = tmp_path / "a.json"

    def doc(aspas: list[dict[str, Any]]) -> bytes:
        return dumps({"roas": [roa(*A[0])], "aspas": aspas})

    write_atomically(path, doc([{"customer_asid": 64500, "providers": [64501]}]))
    async with Client(config(path)) as client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.fail_after(5):
            await client.wait_ready()
        with client.watch() as events:
            write_atomically(
                path,
                doc(
                    [
                        {"customer_asid": 64500, "providers": [64502]},
                        {"customer_asid": 64510, "providers": [64501]},
                    ]
                ),
            )
            event = await snapshot_event(events)
            assert event.affected_customers == (64500, 64510)
            assert event.aspa_changes == (
                AspaChange(64500, (64501,), (64502,)),
                AspaChange(64510, None, (64501,)),
            )
            assert event.vrps_added == event.vrps_removed == event.affected_prefixes == ()
        await client.aclose()


@pytest.mark.anyio
async def test_beyond_the_size_limit_the_kind_needs_a_full_revalidation(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_atomically(path, export(A))
    async with Client(config(path)) as client, anyio.create_task_group() as tg:
        client.events.size_limit = 2
        await tg.start(client.run)
        with anyio.fail_after(5):
            await client.wait_ready()
        with client.watch() as events:
            many = [(f"203.0.113.{i * 16}/28", 28, 64500 + i) for i in range(3)]
            write_atomically(path, export(A + many))
            event = await snapshot_event(events)
            assert event.requires_full_revalidation == frozenset({PayloadKind.VRP})
            assert event.vrps_added == event.vrps_removed == event.affected_prefixes == ()
            assert event.snapshot.snapshot.vrp_count == 4
            write_atomically(path, export(A + many[:1]))  # two changes: within the limit
            event = await snapshot_event(events)
            assert event.requires_full_revalidation == frozenset()
            assert len(event.vrps_removed) == 2
        await client.aclose()


@pytest.mark.anyio
async def test_status_events_have_their_own_ids_and_the_observed_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    async with Client(config(path)) as client, anyio.create_task_group() as tg:
        with client.watch() as events:
            assert events.initial is None
            await tg.start(client.run)
            write_atomically(path, export(A))
            seen: list[SnapshotEvent | StatusEvent] = []
            with anyio.fail_after(5):
                while not any(isinstance(e, SnapshotEvent) for e in seen):
                    seen.append(await events.receive())
            ids = [e.event_id for e in seen]
            assert ids == sorted(ids)
            assert len(set(ids)) == len(ids)
            assert all(i.epoch == client.epoch for i in ids)
            statuses = [e for e in seen if isinstance(e, StatusEvent)]
            assert statuses
            assert [s.status_sequence for s in statuses] == list(range(1, len(statuses) + 1))
            assert all(s.observed_snapshot_id is None for s in statuses)
            changes = {(c.name, c.what, c.after) for s in statuses for c in s.source_changes}
            assert ("a.json", "state", "starting") in changes  # the first status: every source
            assert ("a.json", "availability", "ready") in changes
            first = seen[-1]
            assert isinstance(first, SnapshotEvent)
            assert first.reason == "initial"
            assert first.before_id is None
            assert first.before_config_revision is None
            assert first.vrps_added == (Vrp.parse(*A[0]),)
            assert client.events.sequence == first.event_id.sequence
            assert first.event_id == EventId(client.epoch, client.events.sequence)
        await client.aclose()


vrp_strategy = st.builds(
    lambda n, length, extra, asn: Vrp(
        ipaddress.ip_network((n << (32 - length) & 0xFFFFFFFF, length)),
        min(32, length + extra),
        asn,
    ),
    st.integers(0, 7),
    st.integers(8, 24),
    st.integers(0, 2),
    st.integers(64496, 64499),
)
aspa_strategy = st.builds(
    Aspa, st.integers(64500, 64505), st.lists(st.integers(1, 5), min_size=1, max_size=3)
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(vrp_strategy, max_size=12),
    st.lists(vrp_strategy, max_size=12),
    st.lists(aspa_strategy, max_size=4),
    st.lists(aspa_strategy, max_size=4),
    st.integers(0, 12),
)
def test_a_diff_is_complete_or_asks_for_a_full_revalidation(
    old_vrps: list[Vrp],
    new_vrps: list[Vrp],
    old_aspas: list[Aspa],
    new_aspas: list[Aspa],
    limit: int,
) -> None:
    old = Snapshot.build(old_vrps, old_aspas)
    new = Snapshot.build(new_vrps, new_aspas)
    changes = diff_snapshots(old, new, limit)
    removed, added = set(old.vrps()) - set(new.vrps()), set(new.vrps()) - set(old.vrps())
    if len(removed) + len(added) > limit:
        assert PayloadKind.VRP in changes.requires_full_revalidation
        assert changes.vrps_added == changes.vrps_removed == changes.affected_prefixes == ()
    else:
        assert PayloadKind.VRP not in changes.requires_full_revalidation
        assert set(changes.vrps_added) == added
        assert set(changes.vrps_removed) == removed
        assert set(changes.affected_prefixes) == {v.prefix for v in added | removed}
    before = {a.customer: a.providers for a in old.aspas}
    after = {a.customer: a.providers for a in new.aspas}
    customers = {c for c in before.keys() | after.keys() if before.get(c) != after.get(c)}
    if len(customers) > limit:
        assert PayloadKind.ASPA in changes.requires_full_revalidation
        assert changes.aspa_changes == ()
        assert changes.affected_customers == ()
    else:
        assert set(changes.affected_customers) == customers
        assert all(before.get(c.customer) == c.old for c in changes.aspa_changes)
        assert all(after.get(c.customer) == c.new for c in changes.aspa_changes)


def test_a_first_diff_is_against_nothing() -> None:
    new = Snapshot.build([Vrp.parse(*A[0])])
    changes = diff_snapshots(None, new, 10)
    assert changes.vrps_added == (Vrp.parse(*A[0]),)
    assert diff_snapshots(new, new, 10).empty
