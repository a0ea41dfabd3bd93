"""Our backends as the contract's synchronous `PersistenceBackend` (P-03), with no event loop.

`SQLiteBackend(path, *, limits=None, busy_timeout=5.0)` and `DuckDBBackend(path, *,
limits=None)` block; `open` binds them to the calling thread, whose calls alone are served
afterwards; `read_state` returns the state with its actual receipt; `expected` is
keyword-only; `close` is idempotent and a closed instance is never opened again.
"""

from __future__ import annotations

import inspect
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from persistence import (
    BackendClosedError,
    CommitConflictError,
    DuckDBBackend,
    Limits,
    PersistenceBackend,
    SQLiteBackend,
    StoredState,
    WrongThreadError,
    receipt_of,
)
from persistence.limits import LimitExceededError
from persistence.sql_backend import SqlBackend
from persistence.state import StateId
from tests.clock import FakeClock
from tests.persistence.helpers import START, wall_us
from tests.persistence.states import assert_same_state, make_state

Make = Callable[..., SqlBackend]
BACKENDS: dict[str, Make] = {"sqlite": SQLiteBackend, "duckdb": DuckDBBackend}


@pytest.fixture(params=sorted(BACKENDS))
def make(request: pytest.FixtureRequest) -> Make:
    """Each test once per backend class."""
    return BACKENDS[str(request.param)]


def in_thread(fn: Callable[[], Any]) -> BaseException | None:
    """Run ``fn`` on a new thread; what it raised (None: nothing)."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10.0)
    assert not thread.is_alive()
    return raised[0] if raised else None


def test_the_constructors_have_the_contracts_signatures() -> None:
    sqlite = inspect.signature(SQLiteBackend)
    assert list(sqlite.parameters)[:3] == ["path", "limits", "busy_timeout"]
    assert sqlite.parameters["limits"].kind is inspect.Parameter.KEYWORD_ONLY
    assert sqlite.parameters["limits"].default is None
    assert sqlite.parameters["busy_timeout"].default == 5.0
    duck = inspect.signature(DuckDBBackend)
    assert list(duck.parameters)[:2] == ["path", "limits"]
    assert duck.parameters["limits"].kind is inspect.Parameter.KEYWORD_ONLY
    commit = inspect.signature(SQLiteBackend.commit)
    assert commit.parameters["expected"].kind is inspect.Parameter.KEYWORD_ONLY


def test_commit_read_and_close_block_and_read_returns_the_receipt(
    make: Make, tmp_path: Path
) -> None:
    clock = FakeClock(wall=START)
    path = tmp_path / "not" / "yet" / "state.db"
    backend = make(path, wall=clock.wall)
    assert isinstance(backend, PersistenceBackend)
    assert not path.parent.exists()  # the constructor touches no file
    backend.open()
    try:
        assert backend.read_state() is None
        assert backend.store_id is not None
        state = make_state(backend.store_id, StateId(1, 1))
        assert receipt_of(state) is None  # waiting to be committed: no receipt
        with pytest.raises(TypeError):
            backend.commit(state, None)  # type: ignore[call-arg] # expected is keyword-only
        receipt = backend.commit(state, expected=None)
        assert receipt.committed_at == wall_us(clock)
        got = backend.read_state()
        assert isinstance(got, StoredState)
        assert receipt_of(got) == receipt == got.receipt
        assert_same_state(got, state)
        clock.move_wall(60)
        again = backend.commit(got, expected=None)  # the read state itself, retried
        assert again.retried
        assert again.committed_at == receipt.committed_at
        with pytest.raises(CommitConflictError):
            backend.commit(make_state(backend.store_id, StateId(1, 2), serial=43), expected=None)
    finally:
        backend.close()
    backend.close()  # idempotent
    with pytest.raises(BackendClosedError):
        backend.open()  # a closed instance is never opened again
    with pytest.raises(BackendClosedError):
        backend.read_state()
    again_backend = make(path)  # the file was released
    again_backend.open()
    try:
        found = again_backend.read_state()
        assert found is not None
        assert receipt_of(found) == receipt
    finally:
        again_backend.close()


def test_open_binds_the_thread_and_other_threads_are_refused(make: Make, tmp_path: Path) -> None:
    backend = make(tmp_path / "state.db")
    backend.open()
    try:
        assert backend.store_id is not None
        state = make_state(backend.store_id, StateId(1, 1))
        for call in (
            backend.read_state,
            backend.read_header,
            lambda: backend.commit(state, expected=None),
            backend.close,
            lambda: backend.set_limits(Limits(max_sources=1)),
        ):
            assert isinstance(in_thread(call), WrongThreadError)
        assert backend.read_state() is None  # nothing reached the store; still ours
        assert backend.is_open
    finally:
        backend.close()
    assert backend.closed


def test_a_failed_open_binds_nothing(make: Make, tmp_path: Path) -> None:
    owner = make(tmp_path / "state.db")
    owner.open()
    try:
        second = make(tmp_path / "state.db")
        assert in_thread(second.open) is not None  # refused: another owner
        second.close()  # from another thread than the failed open: nothing was bound
        assert second.closed
    finally:
        owner.close()


def test_limits_bound_the_read_and_set_limits_changes_them(make: Make, tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    backend = make(path)
    backend.open()
    assert backend.store_id is not None
    backend.commit(make_state(backend.store_id, StateId(1, 1)), expected=None)
    backend.close()
    strict = make(path, limits=Limits(max_sources=1))
    strict.open()
    try:
        assert strict.limits == Limits(max_sources=1)
        with pytest.raises(LimitExceededError):
            strict.read_state()
        strict.set_limits(Limits())
        assert strict.read_state() is not None
    finally:
        strict.close()


def test_sqlite_busy_timeout_is_the_connections(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "state.db", busy_timeout=0.25)
    backend.open()
    try:
        db: sqlite3.Connection = backend.store._conn()
        assert db.execute("PRAGMA busy_timeout").fetchone() == (250,)
    finally:
        backend.close()
    with pytest.raises(ValueError, match="busy_timeout"):
        SQLiteBackend(tmp_path / "x.db", busy_timeout=-1)
