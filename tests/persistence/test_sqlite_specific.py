"""SQLite only: disk full via max_page_count, WAL and synchronous=FULL, read-only followers."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from persistence.backend import ThreadedBackend
from persistence.errors import PersistenceError, TransientError
from persistence.exchange import state_digest
from persistence.sqlite_backend import SQLiteBackend
from persistence.state import StateHeader, StateId
from tests.persistence.helpers import ROOT, listing, opened, raw, sql_store
from tests.persistence.states import assert_same_state, crash_state, make_state

pytestmark = pytest.mark.anyio


async def pragma(backend: ThreadedBackend, name: str) -> Any:
    """A pragma's value on the backend's own connection (queried on its worker thread)."""
    store: Any = sql_store(backend)

    def query() -> Any:
        return store._conn().execute(f"PRAGMA {name}").fetchone()[0]

    return await backend._worker.run(query)


async def test_disk_full_fails_the_commit_and_keeps_the_previous_state(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    backend = ThreadedBackend(SQLiteBackend(path, max_page_count=48))
    await backend.open()
    try:
        assert await pragma(backend, "max_page_count") == 48
        assert backend.store_id is not None
        small = make_state(backend.store_id, StateId(1, 1))
        await backend.commit(small, None)
        big = crash_state(backend.store_id, StateId(1, 2), 20_000)
        with pytest.raises(TransientError, match="full") as caught:
            await backend.commit(big, small.state_id)
        assert caught.value.retryable
        result = await backend.read_state()
        assert result is not None
        assert result[0].state_digest == state_digest(small)
        assert_same_state(result[1], small)
        # The connection is usable: a state that fits still commits.
        fits = make_state(backend.store_id, StateId(1, 3), serial=44)
        await backend.commit(fits, small.state_id)
    finally:
        assert await backend.close()
    assert path.stat().st_size <= 48 * 4096
    # Without the limit (disk space freed), the big state goes in on top of the stored one.
    async with opened("sqlite", path) as again:
        stored = await again.read_state()
        assert stored is not None
        assert_same_state(stored[1], fits)
        await again.commit(big, fits.state_id)


async def test_wal_and_synchronous_full(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    backend = ThreadedBackend(SQLiteBackend(path))
    await backend.open()
    try:
        assert await pragma(backend, "journal_mode") == "wal"
        assert await pragma(backend, "synchronous") == 2  # FULL
        assert await pragma(backend, "busy_timeout") > 0
        assert await pragma(backend, "query_only") == 0
    finally:
        assert await backend.close()
    # WAL is a property of the file: a plain connection sees it too.
    with raw("sqlite", path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_follower_sees_the_owners_commits_and_cannot_write(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    async with opened("sqlite", path) as owner:
        assert owner.store_id is not None
        follower = ThreadedBackend(SQLiteBackend(path, read_only=True))
        await follower.open()  # no owner lock: the owner holds it
        try:
            assert follower.capabilities.shared_read
            assert follower.store_id == owner.store_id
            assert await pragma(follower, "query_only") == 1
            assert await follower.read_header() is None
            seen: list[StateHeader] = []
            expected = None
            for generation in (1, 2, 3):
                state = make_state(owner.store_id, StateId(1, generation), serial=generation)
                await owner.commit(state, expected)
                expected = state.state_id
                header = await follower.read_header()
                assert header is not None
                assert header.state_id == state.state_id
                seen.append(header)
                result = await follower.read_state()
                assert result is not None
                assert_same_state(result[1], state)
            assert len({h.meta_digest for h in seen}) == 3
            with pytest.raises(PersistenceError):
                await follower.commit(make_state(owner.store_id, StateId(1, 4)), expected)
        finally:
            assert await follower.close()
        result = await owner.read_state()
        assert result is not None
        assert result[0].state_id == StateId(1, 3)


async def test_follower_of_a_missing_file_creates_nothing(tmp_path: Path) -> None:
    follower = ThreadedBackend(SQLiteBackend(tmp_path / "state.db", read_only=True))
    with pytest.raises(TransientError):
        await follower.open()
    assert await follower.close()
    assert await listing(tmp_path) == []


async def test_follower_follows_an_owner_in_another_process(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    vrps = 5_000
    command = [sys.executable, "-m", "tests.persistence.crash_writer", "sqlite", str(path)]
    seen: set[StateId] = set()
    with anyio.fail_after(60):
        async with await anyio.open_process([*command, str(vrps), "--max", "3"], cwd=ROOT) as owner:
            assert owner.stdin is not None
            assert owner.stdout is not None
            await owner.stdin.send(b"1 none\n")
            await owner.stdin.aclose()
            out = b""
            while b"begin" not in out:  # the owner has created the schema
                out += await owner.stdout.receive()
            follower = ThreadedBackend(SQLiteBackend(path, read_only=True))
            await follower.open()
            try:
                while StateId(1, 3) not in seen:
                    header = await follower.read_header()
                    if header is not None and header.state_id not in seen:
                        seen.add(header.state_id)
                        result = await follower.read_state()
                        assert result is not None
                        # The owner may have moved on between the two reads; each is whole.
                        want = crash_state(result[1].store_id, result[0].state_id, vrps)
                        assert_same_state(result[1], want)
                    await anyio.sleep(0.005)
            finally:
                assert await follower.close()
            out += b"".join([chunk async for chunk in owner.stdout])
            assert await owner.wait() == 0
    assert out.decode().count("done ") == 3
