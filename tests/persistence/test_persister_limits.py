"""Lowering `Limits` against the running and the unconfirmed commit (P-58), on real files.

A state's `Budget` is exactly what a read of it counts; `Persister.check_limits` refuses bounds
that the commit running now or the unconfirmed attempt is over, keeps the immutable record it
observed when a confirmation clears it meanwhile, and no longer counts it afterwards.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import anyio
import pytest

from persistence.budget import Budget, state_budget
from persistence.errors import TransientError
from persistence.limits import LimitExceededError, Limits
from persistence.state import StateId
from tests.persistence.helpers import KINDS, make, opened
from tests.persistence.states import make_state
from tests.persistence.test_persister import make_state as small_state
from tests.persistence.test_persister import persister_on

pytestmark = pytest.mark.anyio
TIMEOUT = 10.0
FIELDS = ("sources", "supports", "export_bytes", "metadata_bytes")
BOUNDS = ("max_sources", "max_supports", "max_export_bytes", "max_metadata_bytes")


async def wait_until(condition: object, what: str) -> None:
    """Poll ``condition()`` (every 10 ms, at most `TIMEOUT` s)."""
    assert callable(condition)
    with anyio.fail_after(TIMEOUT):
        while not condition():  # noqa: ASYNC110 - polls a status
            await anyio.sleep(0.01)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_budget_is_exactly_what_a_read_counts(kind: str, tmp_path: Path) -> None:
    path = tmp_path / f"state.{kind}"
    async with opened(kind, path) as backend:
        assert backend.store_id is not None
        state = make_state(backend.store_id, StateId(1, 1))
        await backend.commit(state, None)
    budget = state_budget(state)
    assert budget.supports > budget.sources > 0
    exact = Limits(**{b: getattr(budget, f) for f, b in zip(FIELDS, BOUNDS, strict=True)})
    assert budget.exceeded(exact) is None
    backend = make(kind, path, limits=exact)
    await backend.open()
    try:
        assert await backend.read_state() is not None  # exactly at every bound: read
        for field, bound in zip(FIELDS, BOUNDS, strict=True):
            lower = dataclasses.replace(exact, **{bound: getattr(budget, field) - 1})
            assert budget.exceeded(lower) is not None
            await backend.set_limits(lower)
            with pytest.raises(LimitExceededError):
                await backend.read_state()  # one below any bound: refused, as predicted
    finally:
        assert await backend.close()


async def test_the_running_commit_is_checked_and_released_when_it_ends(tmp_path: Path) -> None:
    async with persister_on(tmp_path) as (persister, backend, store):
        state = small_state(store, 1)
        needs = state_budget(state)
        lower = Limits(max_supports=needs.supports - 1)
        backend.gate = anyio.Event()
        persister.offer(state)
        with anyio.fail_after(TIMEOUT):
            await backend.entered.wait()
        reason = persister.check_limits(lower)
        assert reason is not None
        assert "the running commit" in reason
        assert "max_supports" in reason
        assert persister.check_limits(Limits()) is None  # larger bounds are fine
        backend.gate.set()
        with anyio.fail_after(TIMEOUT):
            await persister.flush()
        assert persister.check_limits(lower) is None  # committed: no reservation left


async def test_an_unconfirmed_commit_keeps_its_reservation_until_it_is_confirmed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with persister_on(tmp_path) as (persister, backend, store):
        state = small_state(store, 1)
        lower = Limits(max_supports=state_budget(state).supports - 1)
        backend.fail_after_commit = [TransientError("connection lost after COMMIT")]
        backend.header_gate = anyio.Event()  # the outcome stays unknown until it is set
        persister.offer(state)
        await wait_until(lambda: persister.status.unconfirmed_id == "1.1", "unconfirmed")
        assert backend.committed == [StateId(1, 1)]  # it did happen; nobody knows yet

        # A check that observes the attempt, while the confirmation clears it meanwhile.
        entered, proceed = threading.Event(), threading.Event()
        exceeded = Budget.exceeded

        def slow(self: Budget, limits: Limits) -> str | None:
            entered.set()
            assert proceed.wait(TIMEOUT)
            return exceeded(self, limits)

        monkeypatch.setattr(Budget, "exceeded", slow)
        results: list[str | None] = []

        async def check_in_a_thread() -> None:
            results.append(await anyio.to_thread.run_sync(persister.check_limits, lower))

        async with anyio.create_task_group() as tg:
            tg.start_soon(check_in_a_thread)
            assert await anyio.to_thread.run_sync(entered.wait, TIMEOUT)
            backend.header_gate.set()  # the header is read: the attempt is confirmed, cleared
            await wait_until(lambda: persister.status.unconfirmed_id is None, "confirmed")
            assert persister.last_receipt is not None
            assert persister.last_receipt.snapshot_id == StateId(1, 1)
            proceed.set()
        monkeypatch.setattr(Budget, "exceeded", exceeded)
        supports, bound = state_budget(state).supports, lower.max_supports
        want = f"the unconfirmed commit of 1.1 holds {supports} supports, more than "
        assert results == [f"{want}max_supports={bound}"]  # the record it observed
        assert persister.check_limits(lower) is None  # a re-check: the reservation is gone
