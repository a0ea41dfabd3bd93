"""Helpers for the persistence tests: backend factories, wall time as stored, raw connections."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio

from persistence.backend import ThreadedBackend
from persistence.duckdb_backend import DuckDBBackend
from persistence.sql_backend import SqlBackend
from persistence.sqlite_backend import SQLiteBackend
from persistence.state import PersistedState, StateId
from tests.clock import FakeClock
from tests.persistence.states import T0, US, make_state

KINDS = ("sqlite", "duckdb")
ROOT = Path(__file__).resolve().parents[2]


#: The tests' wall clock starts an hour after the times inside their states.
START = T0 / US + 3600


def wall_us(clock: FakeClock) -> int:
    """The clock's wall time in microseconds, as the backend stores it."""
    return round(clock.wall() * US)


def make(kind: str, path: Path, clock: FakeClock | None = None, **options: Any) -> ThreadedBackend:
    """An unopened owner backend of ``kind`` on ``path``."""
    wall = (clock or FakeClock(wall=START)).wall
    if kind == "sqlite":
        return ThreadedBackend(SQLiteBackend(path, wall=wall, **options))
    return ThreadedBackend(DuckDBBackend(path, wall=wall, **options))


def sql_store(backend: ThreadedBackend) -> Any:
    """The `SqlStore` inside one of our SQL backends' adapter (for tests that reach in)."""
    inner = backend.inner
    assert isinstance(inner, SqlBackend)
    return inner.store


@asynccontextmanager
async def opened(
    kind: str, path: Path, clock: FakeClock | None = None
) -> AsyncIterator[ThreadedBackend]:
    """An open backend, closed (and checked closed in time) on exit."""
    backend = make(kind, path, clock)
    await backend.open()
    try:
        yield backend
    finally:
        assert await backend.close()


async def listing(directory: Path) -> list[str]:
    """The names in ``directory``, sorted."""
    return sorted([entry.name async for entry in anyio.Path(directory).iterdir()])


@contextmanager
def raw(kind: str, path: Path) -> Iterator[Any]:
    """A plain autocommit connection (sqlite3 or duckdb) to tamper with a closed store."""
    if kind == "sqlite":
        db: Any = sqlite3.connect(path, isolation_level=None)
    else:
        import duckdb

        db = duckdb.connect(str(path))
    try:
        yield db
    finally:
        db.close()


async def first_commit(kind: str, path: Path) -> PersistedState:
    """Create the store at ``path`` and commit ``make_state`` at generation 1, serial 1 into it."""
    async with opened(kind, path) as backend:
        assert backend.store_id is not None
        state = make_state(backend.store_id, StateId(1, 1))
        await backend.commit(state, None)
    return state
