"""L-23 on real files: a commit still in its transaction at the close deadline is interrupted
with the database's own cancel (SQLite and DuckDB), rolls back, and only then does the close end
the connection and release the owner lock; a reopen reads the older state."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from persistence.backend import ThreadedBackend
from persistence.errors import CallInterruptedError, OwnerLockedError
from persistence.lock import OwnerLock
from persistence.state import PersistedState, StateId
from tests.persistence.helpers import KINDS, make, raw, sql_store
from tests.persistence.states import assert_same_state, crash_state, make_state

pytestmark = pytest.mark.anyio
TIMEOUT = 20.0
#: A statement that runs for minutes: counting to 10^10 in a recursive CTE.
SLOW_TRIGGER = """CREATE TRIGGER slow AFTER INSERT ON vrps BEGIN
    SELECT count(*) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c
        WHERE x < 10000000000) SELECT x FROM c);
END"""


async def in_commit(backend: ThreadedBackend, settle: float) -> None:
    """Wait until ``backend`` runs a commit on its worker thread, then ``settle`` s more."""
    store: Any = sql_store(backend)
    with anyio.fail_after(TIMEOUT):
        while True:  # the worker thread sets it: no event to wait on
            if store.running == "commit_sync":
                break
            await anyio.sleep(0.01)
    await anyio.sleep(settle)


def slow_state(kind: str, path: Path, store_id: str) -> PersistedState:
    """A state whose commit takes seconds: a SQLite trigger that never ends, or a huge state."""
    if kind == "sqlite":
        with raw(kind, path) as db:  # a second connection; the owner lock is a separate flock
            db.execute(SLOW_TRIGGER)
        return make_state(store_id, StateId(1, 2), serial=43)
    return crash_state(store_id, StateId(1, 2), 400_000)  # about 6 s for DuckDB here


@pytest.mark.parametrize("kind", KINDS)
async def test_a_commit_running_at_the_close_deadline_is_interrupted_and_rolled_back(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / f"state.{kind}"
    backend = make(kind, path)
    await backend.open()
    assert backend.store_id is not None
    older = make_state(backend.store_id, StateId(1, 1))
    await backend.commit(older, None)
    newer = slow_state(kind, path, backend.store_id)
    outcome: list[BaseException | None] = []

    async def commit() -> None:
        try:
            await backend.commit(newer, older.state_id)
        except CallInterruptedError as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    caplog.set_level(logging.WARNING, logger="persistence.backend")
    async with anyio.create_task_group() as tg:
        tg.start_soon(commit)
        await in_commit(backend, 0.3)
        started = time.monotonic()
        with anyio.fail_after(TIMEOUT):
            assert await backend.close(wait=0.0)
        took = time.monotonic() - started
    assert took < 5.0, took
    # The commit is reported as interrupted, never as stored.
    assert len(outcome) == 1
    assert isinstance(outcome[0], CallInterruptedError), outcome
    assert not backend._worker.alive
    text = caplog.text
    assert "commit_sync still runs at the close deadline: interrupting it" in text, text
    assert "commit_sync was interrupted and rolled back" in text, text
    assert "owner lock released" in text, text
    # The lock is released: another owner takes it.
    lock = OwnerLock(path)
    lock.acquire()
    lock.release()
    if kind == "sqlite":
        with raw(kind, path) as db:
            db.execute("DROP TRIGGER slow")
    # The older state is what a reopen reads.
    again = make(kind, path)
    await again.open()
    try:
        stored = await again.read_state()
        assert stored is not None
        header, state = stored
        assert header.state_id == older.state_id
        assert_same_state(state, older)
    finally:
        assert await again.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_the_lock_is_held_until_the_interrupted_commit_ended(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / f"state.{kind}"
    backend = make(kind, path)
    await backend.open()
    assert backend.store_id is not None
    newer = slow_state(kind, path, backend.store_id)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_ignore_interrupt, backend.commit(newer, None))
        await in_commit(backend, 0.2)
        # While the commit runs, the file is owned: a second owner is refused.
        with pytest.raises(OwnerLockedError):
            OwnerLock(path).acquire()
        with anyio.fail_after(TIMEOUT):
            assert await backend.close(wait=0.0)
    lock = OwnerLock(path)
    lock.acquire()
    lock.release()


async def _ignore_interrupt(call: Any) -> None:
    with pytest.raises(CallInterruptedError):
        await call
