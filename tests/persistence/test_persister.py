"""The persistence worker on a real SQLite file: coalescing, flush, retries, permanent stop."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from persistence.backend import BackendCapabilities, ThreadedBackend
from persistence.errors import CommitConflictError, CorruptStateError, TransientError
from persistence.exchange import state_digest
from persistence.persister import Persister, PersisterStoppedError
from persistence.sqlite_backend import SQLiteBackend
from persistence.state import PersistedState, PersistReceipt, StateHeader, StateId
from tests.persistence.states import crash_state

pytestmark = pytest.mark.anyio
TIMEOUT = 10.0


def make_state(store_id: str, generation: int) -> PersistedState:
    """A small state (50 VRPs, router keys, ASPAs) whose content depends on ``generation``."""
    return crash_state(store_id, StateId(1, generation), 50)


class Scripted:
    """A backend that delegates to a real one, with scripted failures, a hook and a gate."""

    def __init__(self, real: ThreadedBackend) -> None:
        self.real = real
        self.failures: list[Exception] = []
        self.fail_after_commit: list[Exception] = []
        self.header_failures: list[Exception] = []
        #: Awaited after a commit attempt, before its scripted failure (if any) is raised.
        self.after_commit: Callable[[], Awaitable[None]] | None = None
        self.gate: anyio.Event | None = None
        self.entered = anyio.Event()
        self.committed: list[StateId] = []
        self.header_reads = 0
        self.header_read = anyio.Event()
        #: Awaited by a header read before it reads (None: no wait).
        self.header_gate: anyio.Event | None = None

    @property
    def capabilities(self) -> BackendCapabilities:
        return self.real.capabilities

    @property
    def store_id(self) -> str | None:
        return self.real.store_id

    async def open(self) -> None:
        await self.real.open()

    async def read_header(self) -> StateHeader | None:
        self.header_reads += 1
        self.header_read.set()
        if self.header_failures:
            raise self.header_failures.pop(0)
        if self.header_gate is not None:
            await self.header_gate.wait()
        return await self.real.read_header()

    async def read_state(self) -> None:
        raise NotImplementedError

    async def commit(self, state: PersistedState, expected: StateId | None) -> PersistReceipt:
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.failures:
            failure = self.failures.pop(0)
            if self.after_commit is not None:
                await self.after_commit()
            raise failure
        receipt = await self.real.commit(state, expected)
        self.committed.append(state.state_id)
        if self.after_commit is not None:
            await self.after_commit()
        if self.fail_after_commit:
            raise self.fail_after_commit.pop(0)
        return receipt

    async def close(self) -> bool:
        return await self.real.close()


@asynccontextmanager
async def persister_on(tmp_path: Path) -> AsyncIterator[tuple[Persister, Scripted, str]]:
    """A running persister on a scripted SQLite backend, and the store id."""
    backend = ThreadedBackend(SQLiteBackend(tmp_path / "state.db"))
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
        assert receipt.snapshot_id == StateId(1, 3)
        assert backend.committed == [StateId(1, 1), StateId(1, 3)]  # 2 was never written
        status = persister.status
        assert (status.commits, status.failures, status.pending) == (2, 0, False)
        assert status.last_persisted_id == "1.3"
        stored = await backend.real.read_state()
        assert stored is not None
        assert state_digest(stored[1]) == state_digest(make_state(store, 3))


async def test_transient_errors_are_retried(tmp_path: Path) -> None:
    async with persister_on(tmp_path) as (persister, backend, store):
        backend.failures = [TransientError("database is locked"), TransientError("disk I/O")]
        persister.offer(make_state(store, 1))
        with anyio.fail_after(TIMEOUT):
            receipt = await persister.flush()
        assert receipt.snapshot_id == StateId(1, 1)
        assert persister.status.failures == 2
        assert persister.status.commits == 1
        assert persister.status.last_error is None


async def test_a_lost_acknowledgement_is_confirmed_by_the_stored_header(tmp_path: Path) -> None:
    async with persister_on(tmp_path) as (persister, backend, store):
        backend.fail_after_commit = [TransientError("connection lost after COMMIT")]
        persister.offer(make_state(store, 1))
        with anyio.fail_after(TIMEOUT):
            receipt = await persister.flush()
        assert receipt.retried
        assert backend.committed == [StateId(1, 1)]  # confirmed, not written again
        header = await backend.real.read_header()
        assert header is not None
        assert header.written_at == receipt.committed_at  # the original commit's time
        assert persister.persisted == StateId(1, 1)
        status = persister.status
        assert (status.commits, status.failures, status.pending) == (1, 1, False)
        assert (status.stopped, status.last_error) == (False, None)


async def test_a_lost_acknowledgement_then_a_newer_state(tmp_path: Path) -> None:
    """State 1 is committed but the call fails; state 2 was offered meanwhile: 2 follows 1."""
    async with persister_on(tmp_path) as (persister, backend, store):

        async def offer_newer() -> None:
            backend.after_commit = None
            persister.offer(make_state(store, 2))  # coalesced over the unconfirmed state 1

        backend.after_commit = offer_newer
        backend.fail_after_commit = [TransientError("connection lost after COMMIT")]
        persister.offer(make_state(store, 1))
        with anyio.fail_after(TIMEOUT):
            first = await persister.flush()  # waits for 1 (or later), offered so far
            receipt = await persister.flush()  # now 2 was offered too
        assert first.snapshot_id in {StateId(1, 1), StateId(1, 2)}
        assert receipt.snapshot_id == StateId(1, 2)
        assert not receipt.retried
        assert backend.committed == [StateId(1, 1), StateId(1, 2)]
        status = persister.status
        assert (status.stopped, status.pending, status.last_error) == (False, False, None)
        assert (status.commits, status.failures) == (2, 1)
        assert status.last_persisted_id == "1.2"
        stored = await backend.real.read_state()
        assert stored is not None
        assert state_digest(stored[1]) == state_digest(make_state(store, 2))
        # Persistence goes on.
        persister.offer(make_state(store, 3))
        with anyio.fail_after(TIMEOUT):
            assert (await persister.flush()).snapshot_id == StateId(1, 3)


async def test_a_failed_commit_then_a_newer_state(tmp_path: Path) -> None:
    """State 1 fails before anything is written; the header shows it: state 2 goes in."""
    async with persister_on(tmp_path) as (persister, backend, store):

        async def offer_newer() -> None:
            backend.after_commit = None
            persister.offer(make_state(store, 2))

        backend.after_commit = offer_newer
        backend.failures = [TransientError("database is locked")]
        backend.header_failures = [TransientError("disk I/O error"), TransientError("busy")]
        persister.offer(make_state(store, 1))
        with anyio.fail_after(TIMEOUT):
            while (await persister.flush()).snapshot_id != StateId(1, 2):
                pass
        assert backend.committed == [StateId(1, 2)]
        assert backend.header_reads == 3  # two failed reads, retried with backoff
        status = persister.status
        assert (status.stopped, status.commits, status.failures) == (False, 1, 3)


async def test_an_unknown_stored_state_is_a_conflict_not_overwritten(tmp_path: Path) -> None:
    """After an unknown outcome the store holds neither the attempt nor the last state."""
    async with persister_on(tmp_path) as (persister, backend, store):
        persister.offer(make_state(store, 1))
        with anyio.fail_after(TIMEOUT):
            await persister.flush()
        foreign = make_state(store, 9)

        async def someone_else_writes() -> None:
            backend.after_commit = None
            await backend.real.commit(foreign, StateId(1, 1))
            persister.offer(make_state(store, 3))

        backend.after_commit = someone_else_writes
        backend.failures = [TransientError("connection lost")]
        persister.offer(make_state(store, 2))
        with anyio.fail_after(TIMEOUT), pytest.raises(PersisterStoppedError, match=r"1\.9"):
            await persister.flush()
        status = persister.status
        assert status.stopped
        assert status.last_persisted_id == "1.1"
        assert status.last_error is not None
        assert "another writer" in status.last_error
        assert backend.committed == [StateId(1, 1)]
        header = await backend.real.read_header()
        assert header is not None
        assert header.state_digest == state_digest(foreign)  # the unknown write is left alone


async def test_a_lost_acknowledgement_with_a_failing_header_read(tmp_path: Path) -> None:
    async with persister_on(tmp_path) as (persister, backend, store):
        seen: list[str | None] = []

        async def hold_the_header() -> None:
            await backend.header_read.wait()  # the header is unreadable for now
            seen.append(persister.status.unconfirmed_id)
            backend.header_failures.clear()

        backend.fail_after_commit = [TransientError("connection lost after COMMIT")]
        backend.header_failures = [TransientError("database is locked")] * 1000
        persister.offer(make_state(store, 1))
        async with anyio.create_task_group() as tg:
            tg.start_soon(hold_the_header)
            with anyio.fail_after(TIMEOUT):
                receipt = await persister.flush()
        assert seen == ["1.1"]  # visible while the outcome was unknown
        assert receipt.snapshot_id == StateId(1, 1)
        assert backend.committed == [StateId(1, 1)]
        assert backend.header_reads >= 2  # failed reads were retried (with backoff)
        status = persister.status
        assert (status.stopped, status.unconfirmed_id, status.last_error) == (False, None, None)


async def test_a_permanent_header_read_error_stops(tmp_path: Path) -> None:
    async with persister_on(tmp_path) as (persister, backend, store):
        backend.fail_after_commit = [TransientError("connection lost after COMMIT")]
        backend.header_failures = [CorruptStateError("header digest mismatch")]
        persister.offer(make_state(store, 1))
        with anyio.fail_after(TIMEOUT), pytest.raises(PersisterStoppedError, match="digest"):
            await persister.flush()
        assert persister.status.stopped
        assert persister.status.last_persisted_id is None


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
