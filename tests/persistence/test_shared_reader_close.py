"""The shared reader's `aclose` beyond its deadline and when the connection's close fails
(P-72): ``cleanup_overdue`` and ``closing``, the resource kept for a retry, and the body's own
exception winning over a close error."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from persistence.errors import PersistenceError
from persistence.shared import CLOSE_DEADLINE, ReaderState, SharedSnapshotClient
from persistence.state import PersistedState, StateId
from tests.persistence.shared_faults import FailingCloseStore, GatedJudge, GatedStore
from tests.persistence.shared_harness import TIMEOUT, config, eventually, owner
from tests.persistence.shared_states import state

pytestmark = pytest.mark.anyio
#: The close deadline these tests give the reader (the real one is `CLOSE_DEADLINE`, 5 s).
SHORT = 0.2


def held(reader: SharedSnapshotClient) -> tuple[bool, bool]:
    """Whether the owner thread still runs and the store still holds its connection."""
    store = reader._store
    connected = store.connected if isinstance(store, FailingCloseStore) else False
    return reader._worker.alive, connected


def test_the_close_deadline_is_five_seconds() -> None:
    assert CLOSE_DEADLINE == 5.0
    assert SharedSnapshotClient(config(Path("x.db")))._close_deadline == CLOSE_DEADLINE


async def test_a_close_past_the_deadline_while_a_read_blocks_stays_closing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    async with owner(path) as db:
        assert db.store_id is not None
        await db.commit(state(db.store_id, StateId(1, 1), time.time()), None)
        reader = SharedSnapshotClient(config(path))
        reader._close_deadline = SHORT
        store = GatedStore(path)
        reader._store = store
        await reader.__aenter__()
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                store.armed.set()
                await tg.start(reader.run)
                await eventually(store.entered.is_set)  # the owner thread is in a read
                started = anyio.current_time()
                await reader.aclose()  # returns after the deadline, not closed
                assert anyio.current_time() - started >= SHORT
                status = reader.get_status()
                assert status.cleanup_overdue
                assert status.state is ReaderState.CLOSING
                with pytest.raises(RuntimeError):
                    reader.watch()
                store.gate.set()
            await reader.aclose()  # the read ended: this one closes
        status = reader.get_status()
        assert status.state is ReaderState.CLOSED
        assert not status.cleanup_overdue
        assert not held(reader)[0]


async def test_a_close_past_the_deadline_while_a_build_runs_stays_closing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    now = time.time()
    async with owner(path) as db:
        assert db.store_id is not None
        await db.commit(state(db.store_id, StateId(1, 1), now), None)
        reader = SharedSnapshotClient(config(path))
        reader._close_deadline = SHORT
        gated = GatedJudge(lambda s: s.state_id.generation == 2)
        reader._builds.judge = gated
        await reader.__aenter__()
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                await tg.start(reader.run)
                await db.commit(state(db.store_id, StateId(1, 2), now), StateId(1, 1))
                await eventually(gated.entered.is_set)
                await reader.aclose()
                assert reader.get_status().cleanup_overdue
                assert reader.get_status().state is ReaderState.CLOSING
                assert reader.get_metrics().builds_running == 1  # never freed early
                gated.gate.set()
            assert reader.get_metrics().builds_running == 0
            await reader.aclose()
        assert reader.get_status().state is ReaderState.CLOSED
        assert not reader.get_status().cleanup_overdue


async def _committed(path: Path) -> PersistedState:
    async with owner(path) as db:
        assert db.store_id is not None
        first = state(db.store_id, StateId(1, 1), time.time())
        await db.commit(first, None)
        return first


async def test_a_failed_close_keeps_the_connection_and_a_second_aclose_closes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    await _committed(path)
    reader = SharedSnapshotClient(config(path))
    store = FailingCloseStore(path, failures=1)
    reader._store = store
    await reader.__aenter__()
    with pytest.raises(PersistenceError, match="scripted close failure"):
        await reader.aclose()
    assert reader.get_status().state is ReaderState.CLOSING  # not falsely closed
    assert held(reader) == (True, True)
    assert isinstance(reader.close_error, PersistenceError)
    with anyio.fail_after(TIMEOUT):
        await reader.aclose()
    assert reader.get_status().state is ReaderState.CLOSED
    assert held(reader) == (False, False)


async def test_the_bodys_exception_wins_over_a_close_error(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    await _committed(path)
    reader = SharedSnapshotClient(config(path))
    store = FailingCloseStore(path, failures=1)
    reader._store = store
    with pytest.raises(LookupError, match="the body's own"):
        async with reader:
            raise LookupError("the body's own error")
    assert isinstance(reader.close_error, PersistenceError)
    assert reader.get_status().state is ReaderState.CLOSING
    assert held(reader) == (True, True)
    await reader.aclose()
    assert reader.get_status().state is ReaderState.CLOSED
    # Without a body exception the close error is the one raised.
    again = SharedSnapshotClient(config(path))
    again._store = FailingCloseStore(path, failures=1)
    with pytest.raises(PersistenceError, match="scripted close failure"):
        async with again:
            pass
    await again.aclose()
    assert again.get_status().state is ReaderState.CLOSED
