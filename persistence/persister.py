"""The persistence worker: commits the latest complete state, coalescing, retrying, observable.

`offer` hands over a whole `PersistedState` (never a partial one or a delta); a state offered
while another commits replaces any state still waiting, so a burst of publishes costs one
commit after the current one. Transient errors are retried with capped exponential backoff
while memory keeps serving; a permanent error (conflict, corruption) stops committing and
shows in `status`. The backend is injected: the persister never opens or closes it.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import anyio
from anyio.abc import TaskStatus

from persistence.backend import PersistenceBackend
from persistence.errors import PersistenceError
from persistence.state import CommitReceipt, PersistedState, StateId

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PersisterStatus:
    """A consistent picture of the persistence worker."""

    backend: str
    path: str
    last_persisted_id: str | None
    #: Unix seconds of the last successful commit.
    last_commit_wall: float | None
    last_commit_seconds: float | None
    commits: int
    failures: int
    last_error: str | None
    #: True while a state waits for (or is in) a commit.
    pending: bool
    #: A permanent error stopped committing.
    stopped: bool


class PersisterStoppedError(PersistenceError):
    """Raised by `flush` once a permanent error stopped the worker."""


class Persister:
    """Commits offered states one at a time; `run` it in the owner's task group."""

    def __init__(
        self,
        backend: PersistenceBackend,
        *,
        path: str = "",
        persisted: StateId | None = None,
        retry_initial: float = 1.0,
        retry_max: float = 60.0,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``persisted``: the id the store holds now (the CAS ``expected`` of the first commit)."""
        self.backend = backend
        self._status = PersisterStatus(
            backend=backend.capabilities.backend,
            path=path,
            last_persisted_id=None if persisted is None else str(persisted),
            last_commit_wall=None,
            last_commit_seconds=None,
            commits=0,
            failures=0,
            last_error=None,
            pending=False,
            stopped=False,
        )
        self._persisted = persisted
        self._pending: PersistedState | None = None
        self._latest_offered: StateId | None = None
        self._last_receipt: CommitReceipt | None = None
        self._wakeup = anyio.Event()
        self._progress = anyio.Event()
        self._error: PersistenceError | None = None
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self._wall = wall
        self._monotonic = monotonic

    @property
    def status(self) -> PersisterStatus:
        """Where persistence stands."""
        return self._status

    @property
    def persisted(self) -> StateId | None:
        """The id of the state the store holds (as far as this worker knows)."""
        return self._persisted

    def offer(self, state: PersistedState) -> None:
        """Hand over the latest complete state; replaces one still waiting."""
        if self._error is not None:
            return
        self._pending = state
        self._latest_offered = state.state_id
        self._status = replace(self._status, pending=True)
        self._wakeup.set()

    async def flush(self) -> CommitReceipt:
        """Wait until the latest state offered so far (or a later one) is committed.

        With nothing offered yet, waits for the first commit.

        Bound it with a cancel scope. Raises `PersisterStoppedError` after a permanent error.
        """
        target = self._latest_offered
        while True:
            if self._error is not None:
                raise PersisterStoppedError(str(self._error)) from self._error
            receipt = self._last_receipt
            # Nothing offered yet: the first state committed from now on is "a later state".
            if receipt is not None and (target is None or _reached(receipt.state_id, target)):
                return receipt
            progress = self._progress
            await progress.wait()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Commit offered states until cancelled (or until a permanent error)."""
        task_status.started()
        delay = self.retry_initial
        while True:
            if self._pending is None:
                await self._wakeup.wait()
                self._wakeup = anyio.Event()
                continue
            state = self._pending
            started = self._monotonic()
            try:
                receipt = await self.backend.commit(state, self._persisted)
            except PersistenceError as exc:
                self._status = replace(
                    self._status, failures=self._status.failures + 1, last_error=str(exc)
                )
                if not exc.retryable:
                    self._stop(exc, state)
                    return
                wait = min(self.retry_max, delay) * (0.5 + random.random() / 2)
                log.warning(
                    "persisting state %s failed (%s); retrying in %.1f s; routers keep being "
                    "served from memory",
                    state.state_id,
                    exc,
                    wait,
                )
                delay = min(self.retry_max, delay * 2)
                await anyio.sleep(wait)
                continue
            delay = self.retry_initial
            self._committed(state, receipt, self._monotonic() - started)

    def _committed(self, state: PersistedState, receipt: CommitReceipt, seconds: float) -> None:
        if self._pending is state:
            self._pending = None
        self._persisted = receipt.state_id
        self._last_receipt = receipt
        self._status = replace(
            self._status,
            last_persisted_id=str(receipt.state_id),
            last_commit_wall=self._wall(),
            last_commit_seconds=seconds,
            commits=self._status.commits + 1,
            last_error=None,
            pending=self._pending is not None,
        )
        log.info(
            "persisted state %s (serial %d, %d VRPs) in %.2f s%s",
            receipt.state_id,
            state.serial,
            state.vrp_count(),
            seconds,
            " (already stored: retry)" if receipt.retried else "",
        )
        self._signal()

    def _stop(self, exc: PersistenceError, state: PersistedState) -> None:
        self._error = exc
        self._pending = None
        self._status = replace(self._status, pending=False, stopped=True)
        log.error(
            "persisting state %s failed permanently (%s); persistence stopped, the file is left "
            "as it is; routers keep being served from memory",
            state.state_id,
            exc,
        )
        self._signal()

    def _signal(self) -> None:
        self._progress.set()
        self._progress = anyio.Event()


def _reached(stored: StateId, target: StateId) -> bool:
    return (stored.epoch, stored.generation) >= (target.epoch, target.generation)
