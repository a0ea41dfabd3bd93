"""The persistence worker on a real SQLite file: coalescing, flush, retries, permanent stop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from persistence.backend import Capabilities, ThreadedBackend
from persistence.errors import CommitConflictError, TransientError
from persistence.persister import Persister, PersisterStoppedError
from persistence.sqlite_backend import SQLiteBackend
from persistence.state import CommitReceipt, PersistedState, StateId
from tests.persistence.states import crash_state

pytestmark = pytest.mark.anyio
TIMEOUT = 10.0


def make_state(store_id: str, generation: int) -> PersistedState:
    """A small state (50 VRPs, router keys, ASPAs) whose content depends on ``generation``."""
    return crash_state(store_id, StateId(1, generation), 50)


class Scripted:
    """A backend that delegates to a real one, with scripted failures and a gate."""

    def __init__(self, real: ThreadedBackend) -> None:
        self.real = real
        self.failures: list[Exception] = []
        self.fail_after_commit: list[Exception] = []
        self.gate: anyio.Event | None = None
        self.entered = anyio.Event()
        self.committed: list[StateId] = []

    @property
    def capabilities(self) -> Capabilities:
        return self.real.capabilities

    @property
    def store_id(self) -> str | None:
        return self.real.store_id

    async def open(self) -> None:
        await self.real.open()

    async def read_header(self) -> None:
        raise NotImplementedError

    async def read_state(self) -> None:
        raise NotImplementedError

    async def commit(self, state: PersistedState, expected: StateId | None) -> CommitReceipt:
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.failures:
            raise self.failures.pop(0)
        receipt = await self.real.commit(state, expected)
        self.committed.append(state.state_id)
        if self.fail_after_commit:
            raise self.fail_after_commit.pop(0)
        return receipt

    async def close(self) -> bool:
        return await self.real.close()


@asynccontextmanager
async def persister_on(tmp_path: Path) -> AsyncIterator[tuple[Persister, Scripted, str]]:
    """A running persister on a scripted SQLite backend, and the store id."""
    backend = SQLiteBackend(tmp_path / "state.db")
    await backend.open()
    scripted = Scripted(backend)
    persister = Persister(scripted, retry_initial=0.01, retry_max=0.05)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(persister.run)
            assert scripted.store_id is not None
            yield persister, scripted, scripted.store_id
            tg.cancel_scope.cancel()
    finally:
        assert await backend.close()


async def test_states_offered_during_a_commit_are_coalesced(tmp_path: Path) -> None:
    async with persister_on(tmp_path) as (persister, backend, store):
        backend.gate = anyio.Event()
        persister.offer(make_state(store, 1))
        with anyio.fail_after(TIMEOUT):
            await backend.entered.wait()
        persister.offer(make_state(store, 2))
        persister.offer(make_state(store, 3))
        assert persister.status.pending
        backend.gate.set()
        with anyio.fail_after(TIMEOUT):
            receipt = await persister.flush()
        assert receipt.state_id == StateId(1, 3)
        assert backend.committed == [StateId(1, 1), StateId(1, 3)]  # 2 was never written
        status = persister.status
        assert (status.commits, status.failures, status.pending) == (2, 0, False)
        assert status.last_persisted_id == "1.3"
        stored = await backend.real.read_state()
        assert stored is not None
        assert stored[1].digest() == make_state(store, 3).digest()


async def test_transient_errors_are_retried(tmp_path: Path) -> None:
    async with persister_on(tmp_path) as (persister, backend, store):
        backend.failures = [TransientError("database is locked"), TransientError("disk I/O")]
        persister.offer(make_state(store, 1))
        with anyio.fail_after(TIMEOUT):
            receipt = await persister.flush()
        assert receipt.state_id == StateId(1, 1)
        assert persister.status.failures == 2
        assert persister.status.commits == 1
        assert persister.status.last_error is None


async def test_a_lost_acknowledgement_is_an_idempotent_retry(tmp_path: Path) -> None:
    async with persister_on(tmp_path) as (persister, backend, store):
        backend.fail_after_commit = [TransientError("connection lost after COMMIT")]
        persister.offer(make_state(store, 1))
        with anyio.fail_after(TIMEOUT):
            receipt = await persister.flush()
        assert receipt.retried
        assert backend.committed == [StateId(1, 1), StateId(1, 1)]
        header = await backend.real.read_header()
        assert header is not None
        assert header.written_at == receipt.written_at  # the original commit's time


async def test_a_permanent_error_stops_and_flush_says_so(tmp_path: Path) -> None:
    async with persister_on(tmp_path) as (persister, backend, store):
        backend.failures = [CommitConflictError("stored state is 9.9, expected None")]
        persister.offer(make_state(store, 1))
        with anyio.fail_after(TIMEOUT), pytest.raises(PersisterStoppedError):
            await persister.flush()
        assert persister.status.stopped
        assert persister.status.failures == 1
        persister.offer(make_state(store, 2))  # ignored once stopped
        assert not persister.status.pending
        assert await backend.real.read_header() is None
