"""The backend worker thread: an idle worker keeps nothing of the calls it finished alive."""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any

import anyio
import pytest

from persistence.worker_thread import WorkerThread

pytestmark = pytest.mark.anyio
TIMEOUT = 5.0


class Payload:
    """An object whose lifetime the tests watch through a weak reference."""


class CallFailedError(Exception):
    """Raised by a call; carries a payload."""

    def __init__(self, payload: Payload) -> None:
        super().__init__("failed")
        self.payload = payload


class Job:
    """A callable that owns a payload (the call's function itself)."""

    def __init__(self) -> None:
        self.payload = Payload()

    def __call__(self, argument: Payload) -> Payload:
        return Payload()


async def collected(*refs: weakref.ref[Any]) -> None:
    """Wait until every referent is gone (bounded; collects cycles on every round)."""
    with anyio.fail_after(TIMEOUT):
        while any(ref() is not None for ref in refs):
            gc.collect()
            await anyio.sleep(0.01)


async def test_finished_calls_are_not_kept_alive_by_the_idle_worker() -> None:
    worker = WorkerThread("test-worker")
    try:
        job, argument = Job(), Payload()
        result = await worker.run(job, argument)
        refs: list[weakref.ref[Any]] = [
            weakref.ref(o) for o in (job, job.payload, argument, result)
        ]
        del job, argument, result
        await collected(*refs)
        assert worker.alive  # idle, waiting for the next call

        argument = Payload()

        def fail(payload: Payload) -> None:
            raise CallFailedError(Payload())

        with pytest.raises(CallFailedError) as caught:
            await worker.run(fail, argument)
        refs = [weakref.ref(o) for o in (argument, caught.value, caught.value.payload)]
        del argument, caught
        await collected(*refs)
        assert worker.alive
    finally:
        assert await worker.stop(TIMEOUT)


async def test_a_call_whose_caller_was_cancelled_is_dropped_once_done() -> None:
    worker = WorkerThread("test-worker")
    release = threading.Event()
    started = threading.Event()
    finished = threading.Event()
    refs: list[weakref.ref[Any]] = []

    def slow(payload: Payload) -> Payload:
        started.set()
        release.wait(TIMEOUT)
        result = Payload()
        refs.append(weakref.ref(result))
        finished.set()
        return result

    try:
        argument = Payload()
        refs.append(weakref.ref(argument))
        with anyio.move_on_after(TIMEOUT) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run, slow, argument)
                assert await anyio.to_thread.run_sync(started.wait, TIMEOUT)
                tg.cancel_scope.cancel()  # the caller goes away while the call runs
        assert not scope.cancelled_caught
        del argument
        release.set()
        assert await anyio.to_thread.run_sync(finished.wait, TIMEOUT)
        await collected(*refs)
        assert await worker.run(int, "7") == 7  # the worker still serves
    finally:
        release.set()
        assert await worker.stop(TIMEOUT)


async def test_a_failing_submitted_call_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    """Nobody awaits a submitted call (the backend's close): its error is logged, not lost."""
    worker = WorkerThread("test-worker")
    await worker.run(int)  # the thread runs

    def close_fails() -> None:
        raise OSError("close failed: disk gone")

    worker.submit(close_fails)
    assert await worker.stop(TIMEOUT)
    assert any(
        "close failed: disk gone" in r.getMessage() and r.levelname == "ERROR"
        for r in caplog.records
    )
