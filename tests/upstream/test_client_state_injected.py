"""A host-injected backend (`ClientConfig.backend`, P-08): any synchronous `PersistenceBackend`.

The client opens, recovers, commits and closes it on its own worker thread, like one it built
from `ClientConfig.state`, but never gives it the configured `Limits`: an injected backend
keeps its own, possibly stricter ones. Giving both a state location and a backend, or an
object that is no backend, fails when the configuration is made.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from persistence import Limits, SQLiteBackend, receipt_of
from persistence.location import StateLocation
from persistence.state import StateId
from tests.persistence.memory_backend import MemoryBackend
from tests.upstream.helpers import export, write_atomically
from upstream import Client, ClientConfig, SourceConfig

pytestmark = pytest.mark.anyio

TIMEOUT = 10.0
B = [("192.0.2.0/24", 24, 64496), ("198.51.100.0/24", 24, 64497)]


def config(source: Path, **kw: Any) -> ClientConfig:
    return ClientConfig(
        (SourceConfig("file", str(source)),), poll_interval=0.05, flush_timeout=5.0, **kw
    )


async def run_until_committed(client: Client) -> StateId:
    """Enter ``client``, run it until its first commit, close it; the committed id."""
    async with client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.fail_after(TIMEOUT):
            await client.wait_ready()
            receipt = await client.flush()
        report = await client.close_report()
        assert report.persisted is True, report
        tg.cancel_scope.cancel()
    return receipt.snapshot_id


def test_both_a_state_and_a_backend_fail_at_construction(tmp_path: Path) -> None:
    source = tmp_path / "export.json"
    with pytest.raises(ValueError, match="not both"):
        config(
            source,
            state=StateLocation("sqlite", tmp_path / "a.db"),
            backend=SQLiteBackend(tmp_path / "b.db"),
        )
    with pytest.raises(ValueError, match="no PersistenceBackend"):
        config(source, backend=object())
    assert not (tmp_path / "a.db").exists()
    assert not (tmp_path / "b.db").exists()


async def test_an_injected_sqlite_backend_is_run_and_keeps_its_own_limits(
    tmp_path: Path,
) -> None:
    source, db = tmp_path / "export.json", tmp_path / "state.db"
    write_atomically(source, export(B))
    own = Limits(max_sources=5)
    backend = SQLiteBackend(db, limits=own)
    cfg = config(source, backend=backend, limits=Limits(max_sources=1))
    client = Client(cfg)
    async with client, anyio.create_task_group() as tg:
        assert backend.is_open  # entering opened the host's instance
        assert backend.limits == own  # not the client's (stricter) ones
        await tg.start(client.run)
        with anyio.fail_after(TIMEOUT):
            await client.wait_ready()
            receipt = await client.flush()
        assert receipt.snapshot_id == StateId(1, 1)
        await client.apply_config(dataclasses.replace(cfg, revision=1, limits=Limits()))
        assert backend.limits == own  # a changed configuration does not override them either
        with pytest.raises(ValueError, match="cannot change"):
            await client.apply_config(
                dataclasses.replace(cfg, revision=2, backend=SQLiteBackend(tmp_path / "x.db"))
            )
        await client.aclose()
        tg.cancel_scope.cancel()
    assert backend.closed  # the client closed what it opened
    # The file is an ordinary state file: a client that builds its own backend recovers it.
    again = Client(config(source, state=StateLocation("sqlite", db)))
    async with again:
        assert again.keeping is not None
        plan = again.keeping.recovery
        assert plan is not None
        assert plan.snapshot is not None
        assert plan.snapshot.vrp_count == 2


async def test_an_injected_third_party_backend_is_run_on_one_worker_thread(
    tmp_path: Path,
) -> None:
    source, token = tmp_path / "export.json", tmp_path / "state.mem"
    write_atomically(source, export(B))
    first = MemoryBackend(token)
    committed = await run_until_committed(Client(config(source, backend=first)))
    assert committed == StateId(1, 1)
    threads = {thread for _, thread in first.calls}
    assert len(threads) == 1
    assert threading.get_ident() not in threads
    names = [name for name, _ in first.calls]
    assert names[0] == "open"
    assert "commit" in names
    assert names[-1] == "close"
    # A new instance on the same token: the next client recovers from it, under a new epoch.
    second = MemoryBackend(token)
    client = Client(config(source, backend=second))
    async with client, anyio.create_task_group() as tg:
        assert client.keeping is not None
        plan = client.keeping.recovery
        assert plan is not None
        assert plan.snapshot is not None
        assert plan.snapshot.vrp_count == 2
        await tg.start(client.run)
        with anyio.fail_after(TIMEOUT):
            await client.wait_ready()
            receipt = await client.flush()
        assert receipt.snapshot_id == StateId(2, 1)
        await client.aclose()
        tg.cancel_scope.cancel()
    check = MemoryBackend(token)
    check.open()
    try:
        state = check.read_state()
        assert state is not None
        stored = receipt_of(state)
        assert stored is not None
        assert stored.snapshot_id.epoch == 2  # the flushed one, or the final view after it
        assert stored.snapshot_id.generation >= receipt.snapshot_id.generation
        assert state.recovered_from == StateId(1, 1)
    finally:
        check.close()
