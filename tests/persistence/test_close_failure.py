"""L-05 on a real SQLite file: a failing close is returned, keeps the resource, is retried."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from persistence.backend import ThreadedBackend
from persistence.errors import BackendClosedError, OwnerLockedError, PersistenceError
from persistence.sql_backend import SqlBackend
from persistence.sqlite_backend import SQLITE_CAPABILITIES, SQLiteBackend, SQLiteStore
from persistence.state import StateId
from tests.persistence.helpers import opened
from tests.persistence.states import assert_same_state, make_state

pytestmark = pytest.mark.anyio


class FailingCloseStore(SQLiteStore):
    """A real SQLite store whose connection close fails the first ``failures`` times."""

    def __init__(self, path: Path, failures: int) -> None:
        super().__init__(path)
        self.failures = failures

    def _close_connection(self, db: Any) -> None:
        if self.failures:
            self.failures -= 1
            raise sqlite3.OperationalError("disk I/O error (scripted close failure)")
        super()._close_connection(db)


def backend_on(store: SQLiteStore) -> ThreadedBackend:
    return ThreadedBackend(SqlBackend(store, SQLITE_CAPABILITIES))


async def test_a_failing_close_is_returned_keeps_the_store_and_is_retried(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = FailingCloseStore(path, failures=2)
    backend = backend_on(store)
    await backend.open()
    assert backend.store_id is not None
    state = make_state(backend.store_id, StateId(1, 1))
    await backend.commit(state, None)

    for _ in range(2):
        assert await backend.close(wait=5.0)
        assert isinstance(backend.close_error, PersistenceError)
        assert "scripted close failure" in str(backend.close_error)
        # Not counted as released: the connection and the owner lock are still held ...
        assert store._db is not None
        assert backend._worker.alive
        with pytest.raises(OwnerLockedError):
            await ThreadedBackend(SQLiteBackend(path)).open()
        # ... and the backend is closing: no calls, no reopening.
        with pytest.raises(BackendClosedError):
            await backend.read_header()
        with pytest.raises(BackendClosedError):
            await backend.open()

    assert await backend.close(wait=5.0)  # the retry succeeds
    assert backend.close_error is None
    assert store._db is None
    assert not backend._worker.alive
    assert await backend.close()  # idempotent once closed
    async with opened("sqlite", path) as again:  # the lock was released
        result = await again.read_state()
        assert result is not None
        assert_same_state(result[1], state)
