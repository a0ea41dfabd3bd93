"""One dedicated thread per backend: database calls run there, one at a time, in order.

The event loop only waits on an `anyio.Event`. A caller cancelled while its call runs does not
stop the call (cancelling a waiter never cancels a transaction); the result is dropped, and
later calls queue behind it. `stop` ends the thread after the queued calls and waits a bounded
time; `interrupt_running` is the owner's cooperative cancel at a close deadline, `join` the wait
that confirms the thread ended.
Once a call is signalled done, the thread drops its references to it before it waits for the
next one: an idle worker keeps no finished call's arguments, result or error alive.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
from anyio.lowlevel import EventLoopToken

T = TypeVar("T")
log = logging.getLogger(__name__)


class _Call:
    __slots__ = ("args", "done", "error", "fn", "result", "token")

    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        done: anyio.Event | None,
        token: EventLoopToken | None,
    ) -> None:
        self.fn = fn
        self.args = args
        self.done = done
        self.token = token
        self.result: Any = None
        self.error: BaseException | None = None


class WorkerThread:
    """Runs callables on a thread it starts lazily and owns."""

    def __init__(self, name: str) -> None:
        """Nothing starts until the first call."""
        self.name = name
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._stopping = False
        #: The call the thread executes now (None while it waits for one).
        self._running: _Call | None = None

    @property
    def alive(self) -> bool:
        """Whether the thread runs (it may be finishing a call after `stop` timed out)."""
        return self._thread is not None and self._thread.is_alive()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the worker thread and return its result (or raise its error)."""
        if self._stopping:
            raise RuntimeError(f"{self.name}: the worker thread is stopped")
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()
        done = anyio.Event()
        call = _Call(fn, args, done, anyio.lowlevel.current_token())
        self._queue.put(call)
        await done.wait()
        if call.error is not None:
            raise call.error
        result: T = call.result
        return result

    def submit(self, fn: Callable[[], object]) -> None:
        """Queue ``fn`` behind the pending calls without waiting for it (used by close)."""
        if self._thread is None:
            fn()
            return
        self._queue.put(_Call(fn, (), None, None))

    def running(self, *, besides: Callable[..., Any] | None = None) -> bool:
        """Whether the thread executes a call now (other than ``besides``)."""
        call = self._running
        return call is not None and (besides is None or call.fn != besides)

    async def stop(self, wait: float) -> bool:
        """Finish the queued calls and end the thread; False if still busy after ``wait`` s."""
        self._stopping = True
        if self._thread is None:
            return True
        self._queue.put(None)
        return await self.join(wait)

    async def join(self, wait: float) -> bool:
        """Wait (shielded) up to ``wait`` s for the thread to end; whether it has ended."""
        thread = self._thread
        if thread is None:
            return True
        if wait > 0:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(thread.join, wait)
        return not thread.is_alive()

    async def interrupt_running(
        self,
        interrupt: Callable[[], None],
        *,
        besides: Callable[..., Any] | None = None,
        every: float = 0.05,
    ) -> None:
        """Call ``interrupt`` every ``every`` s while a call other than ``besides`` runs.

        Returns once none runs (the thread waits for a call, runs ``besides``, or ended). A
        cancel that lands between two statements is repeated until the call has ended.
        """
        while self.alive and self.running(besides=besides):
            interrupt()
            await self.join(every)

    def _loop(self) -> None:
        while True:
            call = self._queue.get()
            if call is None:
                return
            self._running = call
            self._execute(call)
            # Idle without the finished call: its function, arguments, result and error belong
            # to the caller (who may have dropped them already), not to this thread.
            del call

    def _execute(self, call: _Call) -> None:
        try:
            call.result = call.fn(*call.args)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            call.error = exc
        self._running = None  # before the caller learns it ended: no longer running
        if call.done is None:
            if call.error is not None:  # nobody awaits a submitted call (close): say it here
                log.error(
                    "%s: %s failed: %s",
                    threading.current_thread().name,
                    getattr(call.fn, "__qualname__", "a call"),
                    call.error,
                )
            return
        with contextlib.suppress(RuntimeError):  # the event loop is gone: nobody waits
            anyio.from_thread.run_sync(call.done.set, token=call.token)
