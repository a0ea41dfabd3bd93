"""P-57: a configuration change is stored also while no source has data.

The data-less state of the new configuration (its revision, the removed sources gone, every
configured one a placeholder) is committed to the state file alone: the host's publish hook is
not handed an empty table, so routers keep getting No Data Available. The snapshot with data
that follows is committed under a later id with the same revision; a recovered state is never
replaced by a data-less one.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import anyio
import pytest

from persistence.location import StateLocation
from snapshot.snapshot import Snapshot
from tests.upstream.helpers import export, write_atomically
from upstream import Client, ClientConfig, SourceConfig
from upstream.closing import Publication

pytestmark = pytest.mark.anyio

TIMEOUT = 10.0
A = [("192.0.2.0/24", 24, 64496)]


def stored(db: Path) -> tuple[int, list[tuple[str, int]], int]:
    """(header revision, (name, complete) of every stored source, stored VRPs)."""
    with sqlite3.connect(db) as conn:
        (revision,) = conn.execute("SELECT config_revision FROM store_meta").fetchone()
        rows = conn.execute("SELECT name, complete FROM sources ORDER BY name").fetchall()
        (vrps,) = conn.execute("SELECT count(*) FROM vrps").fetchone()
    conn.close()
    return int(revision), [(str(n), int(c)) for n, c in rows], int(vrps)


async def test_a_change_without_any_data_is_committed_to_the_file_alone(tmp_path: Path) -> None:
    db, old, new = tmp_path / "state.db", tmp_path / "old.json", tmp_path / "new.json"
    published: list[Snapshot] = []

    async def publish(snapshot: Snapshot) -> Publication:
        published.append(snapshot)
        return Publication(len(published), (1, 2, 3), snapshot.vrp_count)

    base = ClientConfig(
        (SourceConfig("old", str(old)),),
        poll_interval=0.05,
        state=StateLocation("sqlite", db),
        flush_timeout=5.0,
    )
    client = Client(base, publish=publish)
    async with client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        await anyio.sleep(0.2)  # polled: no source has data, nothing was committed
        assert client.get_snapshot() is None
        changed = dataclasses.replace(base, sources=(SourceConfig("new", str(new)),), revision=1)
        await client.apply_config(changed)
        with anyio.fail_after(TIMEOUT):
            receipt = await client.flush()
        assert receipt.config_revision == 1
        assert stored(db) == (1, [("new", 0)], 0)  # "old" deleted, "new" a placeholder
        status = client.get_status()
        assert (status.revision, status.persisted_revision) == (1, 1)
        assert published == []  # the host never got an empty table
        assert client.get_snapshot() is None

        write_atomically(new, export(A))  # data arrives: committed with the same revision
        with anyio.fail_after(TIMEOUT):
            await client.wait_ready()
            later = await client.flush()
        assert later.snapshot_id.generation > receipt.snapshot_id.generation
        assert later.config_revision == 1
        assert stored(db) == (1, [("new", 1)], 1)
        assert len(published) == 1
        assert published[0].vrp_count == 1
        await client.aclose()
        tg.cancel_scope.cancel()


async def test_the_close_waits_for_a_data_less_state(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    base = ClientConfig(
        (SourceConfig("a", str(tmp_path / "a.json")),),
        poll_interval=0.05,
        state=StateLocation("sqlite", db),
        flush_timeout=5.0,
    )
    client = Client(base)
    async with client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        both = (*base.sources, SourceConfig("b", str(tmp_path / "b.json")))
        await client.apply_config(dataclasses.replace(base, sources=both, revision=1))
        report = await client.close_report()  # at once: the commit may not have run yet
        assert report.persisted is True, report
        assert "(serial 0, 0 VRPs) persisted" in report.message
        tg.cancel_scope.cancel()
    assert stored(db) == (1, [("a", 0), ("b", 0)], 0)


async def test_a_recovered_state_is_not_replaced_by_a_data_less_one(tmp_path: Path) -> None:
    db, source = tmp_path / "state.db", tmp_path / "a.json"
    write_atomically(source, export(A))
    base = ClientConfig(
        (SourceConfig("a", str(source)),),
        poll_interval=0.05,
        state=StateLocation("sqlite", db),
        flush_timeout=5.0,
    )
    async with Client(base) as first, anyio.create_task_group() as tg:
        await tg.start(first.run)
        with anyio.fail_after(TIMEOUT):
            await first.wait_ready()
            await first.flush()
        await first.aclose()
        tg.cancel_scope.cancel()
    source.unlink()
    again = Client(base)
    async with again:  # entered, not running: the recovered view is not yet built
        assert again.get_snapshot() is None
        await again.apply_config(dataclasses.replace(base, revision=1))
        assert again.keeping is not None
        assert again.keeping.persister is not None
        assert not again.keeping.persister.status.pending  # nothing offered: data comes
    assert stored(db) == (0, [("a", 1)], 1)
