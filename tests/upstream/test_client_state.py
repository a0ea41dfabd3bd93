"""The `Client` owns its state file (`ClientConfig.state`): open and recover on entering, commit
what it commits (no host, no watch needed), the bounded final commit and a close that is kept
and retried when it fails (L-02, L-05, L-06, L-07b, L-38, L-69)."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from persistence.errors import OwnerLockedError
from persistence.limits import LimitExceededError, Limits
from persistence.location import StateLocation
from persistence.sqlite_backend import SQLiteStore
from persistence.state import StateId
from snapshot.publisher import Publisher, SessionIds
from snapshot.snapshot import Snapshot
from tests.upstream.helpers import export, write_atomically
from upstream import (
    Client,
    ClientConfig,
    ClientState,
    EventId,
    ResyncRequiredError,
    SnapshotEvent,
    SourceConfig,
)
from upstream.closing import Publication
from upstream.config import source_identity

pytestmark = pytest.mark.anyio

TIMEOUT = 10.0
A = [("192.0.2.0/24", 24, 64496)]
B = [("192.0.2.0/24", 24, 64496), ("198.51.100.0/24", 24, 64497)]


def config(source: Path, db: Path, **kw: Any) -> ClientConfig:
    return ClientConfig(
        (SourceConfig("file", str(source)),),
        poll_interval=0.05,
        state=StateLocation("sqlite", db),
        flush_timeout=5.0,
        **kw,
    )


async def commit_once(cfg: ClientConfig) -> None:
    """Run a client on ``cfg`` until its first state is committed, then close it."""
    async with Client(cfg) as client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.fail_after(TIMEOUT):
            await client.wait_ready()
            await client.flush()
        await client.aclose()
        tg.cancel_scope.cancel()


async def test_entering_opens_and_recovers_and_a_second_owner_is_refused(tmp_path: Path) -> None:
    source, db = tmp_path / "export.json", tmp_path / "state.db"
    write_atomically(source, export(B))
    async with Client(config(source, db)) as first, anyio.create_task_group() as tg:
        assert first.keeping is not None
        assert first.keeping.backend is not None
        assert first.keeping.backend.is_open  # entering opened it: owner lock, schema
        second = Client(config(source, db))
        with pytest.raises(OwnerLockedError):
            await second.__aenter__()
        assert second.state is ClientState.CREATED  # refused before anything ran
        assert second.keeping is not None
        assert second.keeping.closed
        await tg.start(first.run)
        with anyio.fail_after(TIMEOUT):
            await first.wait_ready()
            receipt = await first.flush()  # committed without any host or watch
        assert receipt.snapshot_id == StateId(1, 1)
        assert receipt.config_revision == 0
        report = await first.close_report()
        assert report.persisted is True, report
        tg.cancel_scope.cancel()
    assert first.state is ClientState.CLOSED
    source.unlink()  # the next client can only serve what the file holds
    recovered = Client(config(source, db))
    async with recovered, anyio.create_task_group() as tg:
        assert recovered.keeping is not None
        plan = recovered.keeping.recovery
        assert plan is not None
        assert plan.snapshot is not None
        assert plan.snapshot.vrp_count == 2  # recovered on entering, before run
        await tg.start(recovered.run)
        with anyio.fail_after(TIMEOUT):
            ready = await recovered.wait_ready()
        assert ready.snapshot.vrp_count == 2
        status = recovered.get_status()
        assert status.persistence is not None
        assert status.persistence.last_persisted_id == "1.1"  # what the file held
        with anyio.fail_after(TIMEOUT):
            again = await recovered.flush()  # the recovered view, committed under a new epoch
        assert again.snapshot_id == StateId(2, 1)
        tg.cancel_scope.cancel()
    with sqlite3.connect(db) as conn:  # P-54: the new state names the one it recovered from
        row = conn.execute(
            "SELECT recovered_from_epoch, recovered_from_generation FROM publication"
        )
        assert row.fetchone() == (1, 1)
    conn.close()


async def test_the_final_view_is_committed_by_the_close(tmp_path: Path) -> None:
    source, db = tmp_path / "export.json", tmp_path / "state.db"
    write_atomically(source, export(A))
    client = Client(config(source, db))
    async with client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with client.watch() as events:
            with anyio.fail_after(TIMEOUT):
                await client.wait_ready()
                await client.flush()
                write_atomically(source, export(B))
                async for event in events:
                    if isinstance(event, SnapshotEvent) and event.snapshot.snapshot.vrp_count == 2:
                        break
        report = await client.close_report()  # no flush before: the close commits B
        assert report.persisted is True
        assert "(serial 2, 2 VRPs)" in report.message, report.message
        tg.cancel_scope.cancel()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM vrps").fetchone() == (2,)
    conn.close()


async def test_status_and_watch_report_the_state_file(tmp_path: Path) -> None:
    source, db = tmp_path / "export.json", tmp_path / "state.db"
    write_atomically(source, export(A))
    client = Client(config(source, db))
    async with client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.fail_after(TIMEOUT):
            await client.wait_ready()
            await client.flush()
        with client.watch() as events:
            status = events.initial_status
            assert status is not None
            assert status.persistence is not None
            assert status.persistence.commits == 1
            assert status.persistence.backend == "sqlite"
        await client.aclose()
        tg.cancel_scope.cancel()


async def test_a_failed_store_close_is_kept_and_the_next_aclose_retries_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, db = tmp_path / "export.json", tmp_path / "state.db"
    write_atomically(source, export(A))
    failures = [1]
    original = SQLiteStore._close_connection

    def failing(self: SQLiteStore, conn: Any) -> None:
        if failures[0]:
            failures[0] -= 1
            raise sqlite3.OperationalError("disk I/O error (scripted close failure)")
        original(self, conn)

    monkeypatch.setattr(SQLiteStore, "_close_connection", failing)
    client = Client(config(source, db))
    async with anyio.create_task_group() as tg:
        await client.__aenter__()
        await tg.start(client.run)
        with anyio.fail_after(TIMEOUT):
            await client.wait_ready()
            await client.flush()
        with client.watch() as events:
            report = await client.close_report()
            assert report.persisted is True
            assert report.close_error is not None
            assert "scripted close failure" in report.close_error
            # Not released: the store is kept, the client stays CLOSING; watches ended.
            assert client.keeping is not None
            assert not client.keeping.closed
            assert client.state is ClientState.CLOSING
            assert client.get_status().persistence_close_error == report.close_error
            assert [e async for e in events] == []
        await client.aclose()  # retries the store's close, which succeeds now
        backend = client.keeping.backend
        assert backend is not None
        assert backend.closed
        status = client.get_status()
        assert status.state is ClientState.CLOSED
        assert status.persistence_close_error is None
        tg.cancel_scope.cancel()
    with sqlite3.connect(db) as conn:  # the lock was released: another owner may write
        conn.execute("BEGIN IMMEDIATE")
        conn.rollback()
    conn.close()


async def test_the_host_hook_gets_every_commit_before_its_state(tmp_path: Path) -> None:
    """L-38: the commit record drives the host and then the state file (no watch involved)."""
    source, db = tmp_path / "export.json", tmp_path / "state.db"
    write_atomically(source, export(A))
    publisher = Publisher(SessionIds(1, 2, 3))
    served: list[int] = []
    second = anyio.Event()

    async def publish(snapshot: Snapshot) -> Publication:
        state = publisher.publish(snapshot)
        assert state is not None
        served.append(state.serial.value)
        if len(served) == 2:
            second.set()
        return Publication(state.serial.value, (1, 2, 3), snapshot.vrp_count)

    client = Client(config(source, db), publish=publish)
    async with client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.fail_after(TIMEOUT):
            await client.wait_ready()
            receipt = await client.flush()
            write_atomically(source, export(B))
            await second.wait()
        report = await client.close_report()
        tg.cancel_scope.cancel()
    assert served == [0, 1]
    assert receipt.snapshot_id == StateId(1, 1)
    assert "(serial 1, 2 VRPs)" in report.message, report.message
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT serial, session_v0, session_v1, session_v2 FROM publication")
        assert row.fetchone() == (1, 1, 2, 3)
    conn.close()


async def test_the_configured_limits_bound_the_recovery_read_and_follow_apply_config(
    tmp_path: Path,
) -> None:
    """P-08: the backend the client builds gets `ClientConfig.limits`; a new value reaches it
    through the worker's queue, so it bounds the next transaction, not a running one."""
    source, db = tmp_path / "export.json", tmp_path / "state.db"
    write_atomically(source, export(B))
    await commit_once(config(source, db))
    strict = Client(config(source, db, limits=Limits(max_supports=1)))
    with pytest.raises(LimitExceededError):
        await strict.__aenter__()  # two VRPs stored: nothing of them is built
    assert strict.state is ClientState.CREATED
    loose = config(source, db, limits=Limits(max_supports=2))
    client = Client(loose)
    async with client:
        assert client.keeping is not None
        assert client.keeping.backend is not None
        assert client.keeping.backend.limits == Limits(max_supports=2)
        await client.apply_config(dataclasses.replace(loose, revision=1, limits=Limits()))
        assert client.keeping.backend.limits == Limits()


async def test_the_revision_in_force_and_the_persisted_one_are_reported_apart(
    tmp_path: Path,
) -> None:
    """P-57: a configuration change is persisted with the next commit, in one transaction with
    its payload; until then the status tells the revision in force from the one stored."""
    source, db = tmp_path / "export.json", tmp_path / "state.db"
    write_atomically(source, export(A))
    base = config(source, db)
    client = Client(base)
    async with client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.fail_after(TIMEOUT):
            await client.wait_ready()
            await client.flush()
        assert (client.get_status().revision, client.get_status().persisted_revision) == (0, 0)
        with client.watch() as events:
            await client.apply_config(dataclasses.replace(base, revision=1))
            assert client.get_status().revision == 1
            with anyio.fail_after(TIMEOUT):
                async for event in events:
                    if isinstance(event, SnapshotEvent) and event.after_config_revision == 1:
                        break
                receipt = await client.flush()
        assert receipt.config_revision == 1
        assert client.get_status().persisted_revision == 1
        await client.aclose()
        tg.cancel_scope.cancel()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT config_revision FROM store_meta").fetchone() == (1,)
    conn.close()


async def test_a_configured_source_without_data_is_stored_as_a_placeholder(
    tmp_path: Path,
) -> None:
    """P-53: the state keeps a placeholder for a configured but unloaded source; recovery
    passes over it (no error) and brings back only the complete source."""
    loaded, missing, db = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "state.db"
    write_atomically(loaded, export(A))
    both = ClientConfig(
        (SourceConfig("a", str(loaded)), SourceConfig("b", str(missing))),
        poll_interval=0.05,
        state=StateLocation("sqlite", db),
    )
    await commit_once(both)
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT name, complete, selected FROM sources ORDER BY name")
        stored = rows.fetchall()
        vrps = conn.execute("SELECT count(*) FROM vrps").fetchone()
    conn.close()
    assert [(name, complete) for name, complete, _ in stored] == [("a", 1), ("b", 0)]
    assert vrps == (1,)
    async with Client(both) as again:
        assert again.keeping is not None
        plan = again.keeping.recovery
        assert plan is not None
        assert plan.snapshot is not None
        assert plan.snapshot.vrp_count == 1
        assert set(plan.recovered) == {"a"}
        assert "source b: not loaded when the state was written" in plan.notes


async def test_every_client_life_has_its_own_epoch(tmp_path: Path) -> None:
    """P-54, L-70: a restart is a new publish epoch (the state file's next one); an event id
    of the previous life resumes nothing: the watch is resync-required at once."""
    source, db = tmp_path / "export.json", tmp_path / "state.db"
    write_atomically(source, export(A))
    async with Client(config(source, db)) as first, anyio.create_task_group() as tg:
        assert first.epoch == 1  # the file's first epoch
        await tg.start(first.run)
        with anyio.fail_after(TIMEOUT):
            await first.wait_ready()
            await first.flush()
        seen = EventId(first.epoch, first.events.sequence)
        await first.aclose()
        tg.cancel_scope.cancel()
    async with Client(config(source, db)) as second, anyio.create_task_group() as tg:
        assert second.epoch == 2
        await tg.start(second.run)
        with second.watch(after=seen) as events, pytest.raises(ResyncRequiredError, match="epoch"):
            await events.receive()
        tg.cancel_scope.cancel()
    memory = dataclasses.replace(config(source, db), state=None)
    one, two = Client(memory), Client(memory)
    assert one.epoch != two.epoch  # without a state file: a fresh random epoch each


def test_the_source_identity_covers_its_configuration_but_no_secret() -> None:
    """P-52: kind, endpoint, protocol range, trust and validity policy; header names only."""
    base = ClientConfig((SourceConfig("h", "https://rpki.example/export.json"),))
    entry = base.sources[0]
    identity = source_identity(entry, base)
    assert identity.startswith("sha256:")
    assert len(identity) == len("sha256:") + 64
    secret = dataclasses.replace(entry, headers=(("Authorization", "Bearer s3cret"),))
    other_secret = dataclasses.replace(entry, headers=(("Authorization", "Bearer other"),))
    assert source_identity(secret, base) == source_identity(other_secret, base)
    assert source_identity(secret, base) != identity  # a header name takes part
    changed = [
        dataclasses.replace(entry, url="https://rpki.example/other.json"),
        dataclasses.replace(entry, ca_file="/etc/rpki/ca.pem"),
        dataclasses.replace(entry, max_version=1),
    ]
    assert len({identity, *(source_identity(c, base) for c in changed)}) == 4
    stricter = dataclasses.replace(base, max_aspa_providers=10)
    assert source_identity(entry, stricter) != identity


async def test_a_source_whose_identity_changed_is_not_revived(tmp_path: Path) -> None:
    """P-52: same name, kind and path, another validity policy: the stored payload stays out."""
    source, db = tmp_path / "export.json", tmp_path / "state.db"
    write_atomically(source, export(B))
    await commit_once(config(source, db))
    with sqlite3.connect(db) as conn:
        (stored,) = conn.execute("SELECT identity FROM sources").fetchone()
    conn.close()
    assert stored == source_identity(config(source, db).sources[0], config(source, db))
    async with Client(config(source, db)) as same:
        assert same.keeping is not None
        plan = same.keeping.recovery
        assert plan is not None
        assert set(plan.recovered) == {"file"}
    stricter = config(source, db, max_aspa_providers=10)
    async with Client(stricter) as other:
        assert other.keeping is not None
        plan = other.keeping.recovery
        assert plan is not None
        assert plan.recovered == {}
        assert any("not revived" in note for note in plan.notes)
