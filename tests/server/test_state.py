"""--state and --state-reader end to end: real SQLite/DuckDB files, real RTR clients on loopback.

Covers recovery before the network (new session), what recovery refuses (clock behind the
write time, expired entries, removed sources, corrupt files), the second owner, and a
read-only follower tracking the owner.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from persistence.errors import OwnerLockedError
from persistence.location import StateLocation
from rtr_server.app import App
from rtr_server.app_config import AppConfig
from tests.clock import FakeClock
from tests.server.helpers import (
    FAR,
    RouterState,
    base_export,
    expected_state,
    export,
    roa,
    settings,
    updated_export,
    wait_until,
    write_export,
)
from tests.server.rtr_client import TIMEOUT, RtrClient
from upstream.clock import Clock, SystemClock

pytestmark = pytest.mark.anyio

BACKENDS = ["sqlite", "duckdb"]


def state_config(
    sources: tuple[Path, ...], location: StateLocation, **overrides: object
) -> AppConfig:
    """Sources polled every 50 ms, state at ``location``."""
    values: dict[str, object] = {
        "sources": sources,
        "server": settings(),
        "poll_interval": 0.05,
        "state": location,
    }
    values.update(overrides)
    return AppConfig(**values)  # type: ignore[arg-type]


@asynccontextmanager
async def running(config: AppConfig, clock: Clock | None = None) -> AsyncIterator[App]:
    """Run an `App` until the block ends (no wait for data: recovery publishes before start)."""
    async with anyio.create_task_group() as tg:
        app = App(config, clock or SystemClock())
        with anyio.fail_after(TIMEOUT):
            await tg.start(app.run)
        try:
            yield app
        finally:
            tg.cancel_scope.cancel()


async def persist_and_stop(config: AppConfig, clock: Clock | None = None) -> tuple[int, ...]:
    """Run until the first publish is persisted; returns the session ids served."""
    async with running(config, clock) as app:
        await wait_until(lambda: app.state is not None, what="the first publish")
        assert app.persister is not None
        with anyio.fail_after(TIMEOUT):
            await app.persister.flush()
        state = app.state
        assert state is not None
        ids = state.session_ids
        return (ids.v0, ids.v1, ids.v2)


async def full_table(app: App, version: int = 2) -> RouterState:
    """What a router of ``version`` holds after a Reset Query."""
    host, port = app.server.addresses[0]
    async with await RtrClient.connect(port, host) as client:
        response = await client.reset(version)
    return RouterState().apply(response.payload)


def location(tmp_path: Path, backend: str) -> StateLocation:
    return StateLocation(backend, tmp_path / f"state.{backend}")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_restart_serves_recovered_data_at_once_under_a_new_session(
    tmp_path: Path, backend: str
) -> None:
    source = tmp_path / "export.json"
    write_export(source, base_export())
    config = state_config((source,), location(tmp_path, backend))
    old_sessions = await persist_and_stop(config)
    source.unlink()  # the upstream is gone: only the persisted state can serve
    async with running(config) as app:
        # Published before the listener started: no wait, no "No Data Available".
        assert app.state is not None
        assert app.recovery is not None
        assert app.recovery.trusted
        assert list(app.recovery.recovered) == [str(source)]
        assert set(old_sessions).isdisjoint(
            {app.state.session_ids.v0, app.state.session_ids.v1, app.state.session_ids.v2}
        )
        for version in (0, 1, 2):
            held = await full_table(app, version)
            assert held == expected_state(base_export(), version)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_recovered_state_is_replaced_when_the_source_delivers(
    tmp_path: Path, backend: str
) -> None:
    source = tmp_path / "export.json"
    write_export(source, base_export())
    config = state_config((source,), location(tmp_path, backend))
    await persist_and_stop(config)
    write_export(source, updated_export())
    async with running(config) as app:
        assert app.state is not None
        await wait_until(lambda: app.published >= 2, what="the source's own publish")
        assert await full_table(app) == expected_state(updated_export(), 2)
        assert app.persister is not None
        with anyio.fail_after(TIMEOUT):
            receipt = await app.persister.flush()
        assert receipt.snapshot_id.epoch == 2  # a new epoch after the restart


@pytest.mark.parametrize("backend", BACKENDS)
async def test_clock_behind_the_write_time_trusts_nothing(tmp_path: Path, backend: str) -> None:
    now = time.time()
    source = tmp_path / "export.json"
    write_export(source, base_export())
    config = state_config((source,), location(tmp_path, backend))
    await persist_and_stop(config, FakeClock(wall=now, monotonic="real"))
    source.unlink()
    # 301 s behind the write time: beyond the default 300 s tolerance.
    async with running(config, FakeClock(wall=now - 301, monotonic="real")) as app:
        assert app.recovery is not None
        assert not app.recovery.trusted
        assert app.recovery.recovered == {}
        assert app.state is None  # routers get No Data Available until the network delivers
    # Within the tolerance the state is used, judged at the write time.
    async with running(config, FakeClock(wall=now - 200, monotonic="real")) as app:
        assert app.recovery is not None
        assert app.recovery.trusted
        assert app.state is not None


@pytest.mark.parametrize("backend", BACKENDS)
async def test_only_entries_still_valid_come_back(tmp_path: Path, backend: str) -> None:
    now = int(time.time())
    doc = export(
        roas=[
            roa("192.0.2.0/24", 24, 64496, expires=now + 100),
            roa("198.51.100.0/24", 24, 64497, expires=FAR),
            roa("2001:db8::/32", 48, 64498, expires=now + 100),
        ]
    )
    source = tmp_path / "export.json"
    write_export(source, doc)
    config = state_config((source,), location(tmp_path, backend))
    await persist_and_stop(config, FakeClock(wall=now, monotonic="real"))
    source.unlink()
    async with running(config, FakeClock(wall=now + 200, monotonic="real")) as app:
        held = await full_table(app, 1)
        assert held == expected_state(doc, 1, now=now + 200)
        assert len(held.prefixes) == 1
    # Everything expired: nothing is served, not even an empty set.
    expired = export(roas=[roa("192.0.2.0/24", 24, 64496, expires=now + 100)])
    write_export(source, expired)
    other = state_config((source,), location(tmp_path, backend + "-2"))
    await persist_and_stop(other, FakeClock(wall=now, monotonic="real"))
    source.unlink()
    async with running(other, FakeClock(wall=now + 200, monotonic="real")) as app:
        assert app.state is None
        assert app.recovery is not None
        assert any("nothing left valid" in note for note in app.recovery.notes)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_sources_removed_from_the_config_are_not_revived(
    tmp_path: Path, backend: str
) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    doc_a = export(roas=[roa("192.0.2.0/24", 24, 64496)])
    doc_b = export(roas=[roa("198.51.100.0/24", 24, 64497)])
    write_export(first, doc_a)
    write_export(second, doc_b)
    state = location(tmp_path, backend)
    await persist_and_stop(state_config((first, second), state))
    first.unlink()
    second.unlink()
    async with running(state_config((first,), state)) as app:
        assert app.recovery is not None
        assert list(app.recovery.recovered) == [str(first)]
        assert any("no longer configured" in note for note in app.recovery.notes)
        assert await full_table(app, 1) == expected_state(doc_a, 1)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_second_owner_is_refused_before_any_network(tmp_path: Path, backend: str) -> None:
    source = tmp_path / "export.json"
    write_export(source, base_export())
    config = state_config((source,), location(tmp_path, backend))
    async with running(config) as first:
        await wait_until(lambda: first.state is not None, what="the first publish")
        second = App(config, SystemClock())
        with pytest.raises(OwnerLockedError):
            await second.run()
        assert second.server.addresses == []  # it never listened


async def test_a_digest_mismatch_is_not_served_and_persistence_goes_on(tmp_path: Path) -> None:
    """P-51: damaged rows in a sound file never enter the online view; the owner resyncs from
    the network and keeps persisting (the file can be written safely)."""
    source = tmp_path / "export.json"
    write_export(source, base_export())
    state = location(tmp_path, "sqlite")
    config = state_config((source,), state)
    await persist_and_stop(config)
    import sqlite3

    with sqlite3.connect(state.path) as db:
        db.execute("UPDATE vrps SET asn = asn + 1 WHERE rowid = 1")
    db.close()
    before = state.path.read_bytes()
    async with running(config) as app:
        assert app.recovery is None  # nothing of the damaged state came back
        assert app.persister is not None
        await wait_until(lambda: app.state is not None, what="a publish from the network")
        with anyio.fail_after(TIMEOUT):
            await app.persister.flush()
    assert state.path.read_bytes() != before  # replaced by the first commit


async def test_a_reader_follows_the_owner(tmp_path: Path) -> None:
    source = tmp_path / "export.json"
    write_export(source, base_export())
    state = location(tmp_path, "sqlite")
    owner_config = state_config((source,), state)
    reader_config = AppConfig(
        server=settings(), state_reader=state, reader_poll=0.05, poll_interval=0.05
    )
    async with running(owner_config) as owner, running(reader_config) as reader:
        await wait_until(lambda: reader.state is not None, what="the reader's first publish")
        assert await full_table(reader) == expected_state(base_export(), 2)
        first_serial = reader.state.serial if reader.state else None
        write_export(source, updated_export())
        await wait_until(
            lambda: (
                owner.persister is not None
                and owner.persister.status.commits >= 2
                and reader.state is not None
                and reader.state.serial != first_serial
            ),
            what="the reader to publish the owner's update",
        )
        assert await full_table(reader) == expected_state(updated_export(), 2)
        assert reader.follower is not None
        assert reader.follower.status.reads >= 2


def slurm_filter(path: Path, prefix: str) -> str:
    """A SLURM file filtering every VRP inside ``prefix``."""
    path.write_text(
        json.dumps(
            {
                "slurmVersion": 1,
                "validationOutputFilters": {
                    "prefixFilters": [{"prefix": prefix}],
                    "bgpsecFilters": [],
                },
                "locallyAddedAssertions": {"prefixAssertions": [], "bgpsecAssertions": []},
            }
        )
    )
    return str(path)


async def test_recovered_and_followed_data_get_the_slurm_policy(tmp_path: Path) -> None:
    doc = export(roas=[roa("192.0.2.0/24", 24, 64496), roa("198.51.100.0/24", 24, 64497)])
    kept = export(roas=[roa("198.51.100.0/24", 24, 64497)])
    source = tmp_path / "export.json"
    write_export(source, doc)
    state = location(tmp_path, "sqlite")
    await persist_and_stop(state_config((source,), state))
    source.unlink()
    slurm = (slurm_filter(tmp_path / "local.json", "192.0.2.0/24"),)
    async with running(state_config((source,), state, slurm=slurm)) as owner:
        assert owner.state is not None  # recovered, before any source could load
        assert await full_table(owner, 1) == expected_state(kept, 1)
        reader_config = AppConfig(
            server=settings(), state_reader=state, reader_poll=0.05, slurm=slurm
        )
        async with running(reader_config) as reader:
            await wait_until(lambda: reader.state is not None, what="the reader's publish")
            assert await full_table(reader, 1) == expected_state(kept, 1)
