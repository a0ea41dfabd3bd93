"""The SQLite owner's WAL settings, and WAL growth and checkpoint progress around a long read."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from persistence.sqlite_backend import SQLiteBackend
from persistence.state import StateId
from tests.persistence.helpers import opened, sql_store
from tests.persistence.states import crash_state

pytestmark = pytest.mark.anyio


async def pragma(backend: Any, name: str) -> Any:
    """A pragma's value on the backend's own (owner) connection, queried on its worker thread."""
    store: Any = sql_store(backend)

    def query() -> Any:
        return store._conn().execute(f"PRAGMA {name}").fetchone()[0]

    return await backend._worker.run(query)


async def test_owner_sets_autocheckpoint_and_journal_size_limit(tmp_path: Path) -> None:
    async with opened("sqlite", tmp_path / "state.db") as backend:
        assert await pragma(backend, "journal_mode") == "wal"
        assert await pragma(backend, "synchronous") == 2  # FULL
        assert await pragma(backend, "wal_autocheckpoint") == 1000
        assert await pragma(backend, "journal_size_limit") == 64 * 1024 * 1024


def wal_size(path: Path) -> int:
    """The size of the WAL file beside ``path`` (0 if there is none)."""
    wal = path.with_name(path.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


def passive_checkpoint(path: Path) -> tuple[int, int]:
    """(frames in the WAL, frames checkpointed) from a PASSIVE checkpoint on a new connection.

    PASSIVE waits for nobody: it copies what no reader still needs and says how far it got.
    """
    db = sqlite3.connect(path, isolation_level=None)
    try:
        busy, log, done = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    finally:
        db.close()
    assert busy == 0
    return int(log), int(done)


async def test_wal_grows_during_a_long_read_and_is_checkpointed_after_it(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    vrps = 4_000
    async with opened("sqlite", path) as backend:
        assert isinstance(backend.inner, SQLiteBackend)
        store_id = backend.store_id
        assert store_id is not None
        page_size = await pragma(backend, "page_size")
        await backend.commit(crash_state(store_id, StateId(1, 1), vrps), None)
        reader = sqlite3.connect(path, isolation_level=None)
        try:
            reader.execute("BEGIN")
            (held,) = reader.execute("SELECT generation FROM store_meta").fetchone()
            assert held == 1
            sizes = []
            generation = 1
            # Commit until the WAL is well past the automatic checkpoint threshold.
            while wal_size(path) < 3 * 1000 * page_size and generation < 200:
                expected = StateId(1, generation)
                generation += 1
                await backend.commit(crash_state(store_id, StateId(1, generation), vrps), expected)
                sizes.append(wal_size(path))
                # The reader still sees the state of its transaction, whatever was committed.
                assert reader.execute("SELECT generation FROM store_meta").fetchone() == (1,)
            assert sizes == sorted(sizes)  # the held snapshot keeps the WAL from being reused
            grown = sizes[-1]
            assert grown > 3 * 1000 * page_size
            log, done = passive_checkpoint(path)
            assert done < log  # frames the reader still needs stay in the WAL
            reader.execute("COMMIT")
        finally:
            reader.close()
        # The reader let go: the automatic (PASSIVE) checkpoint after the next commit copies the
        # whole WAL into the database, and the commits after it reuse the WAL from the start.
        step = sizes[-1] - sizes[-2]
        after = []
        for _ in range(len(sizes)):
            expected = StateId(1, generation)
            generation += 1
            await backend.commit(crash_state(store_id, StateId(1, generation), vrps), expected)
            after.append(wal_size(path))
        assert after[0] <= grown + step  # one more commit appended, then the checkpoint ran
        assert set(after) == {after[0]}  # reused, not grown (and under the limit: not truncated)
        log, done = passive_checkpoint(path)
        assert done == log  # nothing holds frames back any more
        assert log < 2 * 1000  # the WAL was restarted: it holds only the latest commits
        header = await backend.read_header()
        assert header is not None
        assert header.state_id == StateId(1, generation)
