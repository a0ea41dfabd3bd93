"""The persistence worker at the close, on a real SQLite file: `hold`, `stop` and the end of `run`.

`stop` (a failed close, contract P-48) drops the waiting state, refuses new ones and wakes every
unsatisfied `flush` with a stop error at once; the end of `run` does the same to the waiters
left; a `flush` whose target was committed still gets its receipt.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from persistence.backend import ThreadedBackend
from persistence.errors import REVOCATION_FAILED, CloseFailedError
from persistence.persister import Persister, PersisterStoppedError
from persistence.sqlite_backend import SQLiteBackend
from persistence.state import PersistReceipt, StateId
from tests.persistence.test_persister import Scripted, make_state, persister_on

pytestmark = pytest.mark.anyio
TIMEOUT = 10.0


def revocation_failed() -> CloseFailedError:
    """The error the app stops the persister with when the close's final build raised."""
    return CloseFailedError("the final build raised RuntimeError: boom", cause=REVOCATION_FAILED)


async def test_stop_drops_the_waiting_state_refuses_offers_and_wakes_flush_at_once(
    tmp_path: Path,
) -> None:
    async with persister_on(tmp_path) as (persister, backend, store):
        persister.offer(make_state(store, 1))
        with anyio.fail_after(TIMEOUT):
            await persister.flush()
        persister.hold()  # the close: no commit starts until the final state is known
        persister.offer(make_state(store, 2))  # the pre-revocation candidate
        outcome: list[BaseException | PersistReceipt] = []
        woken = anyio.Event()

        async def wait_for_it() -> None:
            try:
                outcome.append(await persister.flush())
            except PersisterStoppedError as exc:
                outcome.append(exc)
            woken.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_for_it)
            await anyio.sleep(0.2)
            assert not outcome, "state 2 was never committed: the flush must still wait"
            assert backend.committed == [StateId(1, 1)]  # held: state 2 did not start
            persister.stop(revocation_failed())
            with anyio.fail_after(1.0):  # at once, not after the waiter's own timeout
                await woken.wait()
        assert isinstance(outcome[0], PersisterStoppedError), outcome
        assert "the final build raised RuntimeError: boom" in str(outcome[0])
        persister.offer(make_state(store, 3))  # refused
        persister.release()
        await anyio.sleep(0.2)
        assert backend.committed == [StateId(1, 1)]  # neither 2 nor 3 was ever written
        status = persister.status
        assert status.stopped
        assert not status.pending
        assert status.error_code == "persistence_failed"
        assert status.error_details == {"phase": "close", "cause": "revocation_failed"}
        assert status.last_error == "the final build raised RuntimeError: boom"
        header = await backend.real.read_header()
        assert header is not None
        assert header.state_id == StateId(1, 1)


async def test_a_flush_still_waiting_when_run_ends_gets_a_stop_error(tmp_path: Path) -> None:
    """`run` cancelled at the close (its commit gated): the waiting flush raises at once."""
    real = ThreadedBackend(SQLiteBackend(tmp_path / "state.db"))
    await real.open()
    backend = Scripted(real)
    backend.gate = anyio.Event()
    persister = Persister(backend)
    assert backend.store_id is not None
    outcome: list[BaseException | PersistReceipt] = []
    woken = anyio.Event()

    async def wait_for_it() -> None:
        try:
            outcome.append(await persister.flush())
        except PersisterStoppedError as exc:
            outcome.append(exc)
        woken.set()

    try:
        async with anyio.create_task_group() as outer:
            async with anyio.create_task_group() as tg:
                await tg.start(persister.run)
                persister.offer(make_state(backend.store_id, 1))
                outer.start_soon(wait_for_it)
                with anyio.fail_after(TIMEOUT):
                    await backend.entered.wait()
                tg.cancel_scope.cancel()  # the close ends the worker while its commit waits
            with anyio.fail_after(1.0):
                await woken.wait()
        assert isinstance(outcome[0], PersisterStoppedError), outcome
        persister.offer(make_state(backend.store_id, 2))  # refused once run has ended
        assert not persister.status.pending
    finally:
        backend.gate.set()
        assert await real.close()


async def test_a_stop_leaves_a_flush_of_a_committed_state_its_receipt(tmp_path: Path) -> None:
    """A normal close lets the commits that happened satisfy their waiters: a stop (or the end
    of `run`) turns only unsatisfied waits into errors."""
    async with persister_on(tmp_path) as (persister, _, store):
        persister.offer(make_state(store, 1))
        with anyio.fail_after(TIMEOUT):
            first = await persister.flush()
        persister.stop(revocation_failed())
        with anyio.fail_after(TIMEOUT):
            again = await persister.flush()
        assert again == first
