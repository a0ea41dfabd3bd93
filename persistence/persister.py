"""The persistence worker: commits the latest complete state, coalescing, retrying, observable.

`offer` hands over a whole `PersistedState` (never a partial one or a delta); a state offered
while another commits replaces any state still waiting, so a burst of publishes costs one
commit after the current one. Transient errors are retried with capped exponential backoff
while memory keeps serving; a permanent error (conflict, corruption) stops committing and
shows in `status`. The backend is injected: the persister never opens or closes it.

A commit that failed with a transient error may still have happened (a lost acknowledgement).
The persister then keeps a bounded record of that attempt (id, config revision, state digest;
never the state itself) and, before it commits anything else, reads the stored header: the
attempt confirms it, the last confirmed state shows it did not happen, and any other state is
a conflict that is reported, never overwritten.

Lowering `Limits` (`check_limits`, P-58) checks the budget (`persistence.budget.Budget`) of the
commit running now and of the unconfirmed attempt: a state the store may hold must stay
readable under the new bounds. The check takes the immutable records as it finds them (a
confirmation that clears the attempt meanwhile changes nothing in it) and refuses when either
is over; once an attempt is confirmed or found not to have happened, its reservation is gone
and a new check no longer counts it.

Closing: `hold` starts no commit until `release` (an owner holds commits while its final state
is still being built); `stop` ends committing for good (a failed close): the waiting state is
dropped, later offers are refused and every unsatisfied `flush` raises `PersisterStoppedError`
at once. A commit already running on the backend's thread still ends all or nothing. When `run`
ends (cancelled at the close) the same happens to whatever `flush` is still waiting, after the
commits that did happen satisfied theirs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import anyio
from anyio.abc import TaskStatus

from persistence.backend import AsyncPersistenceBackend
from persistence.budget import Budget, state_budget
from persistence.errors import CommitConflictError, PersistenceError
from persistence.exchange import state_digest
from persistence.limits import Limits
from persistence.state import PersistedState, PersistReceipt, StateHeader, StateId
from snapshot.backoff import jittered_backoff

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
    #: The id of a commit whose outcome is unknown until the stored header is read again.
    unconfirmed_id: str | None = None
    #: The code of the error that stopped committing (``persistence_failed``, ...).
    error_code: str | None = None
    #: Where that error happened, e.g. ``{"phase": "close", "cause": "revocation_failed"}``.
    error_details: dict[str, str] | None = None


class PersisterStoppedError(PersistenceError):
    """Raised by `flush` once a permanent error, `stop` or the end of `run` stopped the worker."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """A commit whose outcome is unknown: what identifies it in the stored header."""

    state_id: StateId
    config_revision: int
    state_digest: bytes
    #: What the attempted state needs of the `Limits` (the store may hold it).
    budget: Budget | None = None

    def matches(self, header: StateHeader) -> bool:
        """Whether ``header`` is this attempt's commit."""
        return (
            header.state_id == self.state_id
            and header.config_revision == self.config_revision
            and header.state_digest == self.state_digest
        )


class Persister:
    """Commits offered states one at a time; `run` it in the owner's task group."""

    def __init__(
        self,
        backend: AsyncPersistenceBackend,
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
            backend=backend.capabilities.backend_name,
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
        #: The commit whose outcome is unknown, resolved before anything else is committed.
        self._attempt: Attempt | None = None
        #: The budget of the commit running now (None between commits).
        self._running: Budget | None = None
        self._pending: PersistedState | None = None
        self._latest_offered: StateId | None = None
        self._last_receipt: PersistReceipt | None = None
        self._wakeup = anyio.Event()
        self._progress = anyio.Event()
        self._error: PersistenceError | None = None
        self._held = False
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        #: Failed attempts in a row (the retry delay doubles with each; `jittered_backoff`).
        self._failures = 0
        self._wall = wall
        self._monotonic = monotonic

    @property
    def status(self) -> PersisterStatus:
        """Where persistence stands."""
        return self._status

    @property
    def last_receipt(self) -> PersistReceipt | None:
        """The receipt of the last commit this worker confirmed (None: none yet)."""
        return self._last_receipt

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

    async def flush(self) -> PersistReceipt:
        """Wait until the latest state offered so far (or a later one) is committed.

        With nothing offered yet, waits for the first commit.

        Bound it with a cancel scope. Raises `PersisterStoppedError` once committing stopped
        (a permanent error, `stop`, the end of `run`) without reaching the target.
        """
        target = self._latest_offered
        while True:
            receipt = self._last_receipt
            # Nothing offered yet: the first state committed from now on is "a later state".
            if receipt is not None and (target is None or _reached(receipt.snapshot_id, target)):
                return receipt
            if self._error is not None:
                raise PersisterStoppedError(str(self._error)) from self._error
            progress = self._progress
            await progress.wait()

    def hold(self) -> None:
        """Start no commit (nor retry) until `release`; a running commit goes on."""
        self._held = True

    def release(self) -> None:
        """Commit again (the latest state offered, if one waits)."""
        self._held = False
        self._wakeup.set()

    def stop(self, error: PersistenceError) -> None:
        """Stop committing for good because of ``error`` (see the module docstring).

        The caller logs what happened; ``error`` shows in `status` (its ``code`` and
        ``details`` too). Idempotent: the first error stays.
        """
        if self._error is not None:
            return
        self._error = error
        self._pending = None
        self._status = replace(
            self._status,
            pending=False,
            stopped=True,
            last_error=str(error),
            error_code=error.code,
            error_details=error.details or None,
        )
        self._signal()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Commit offered states until cancelled (or until a permanent error)."""
        try:
            await self._run(task_status)
        finally:
            if self._error is None:  # ended by cancellation (the close): nothing more commits
                self._error = PersisterStoppedError("the persistence worker has ended")
                self._pending = None
                self._status = replace(self._status, pending=False)
                self._signal()

    async def _run(self, task_status: TaskStatus[None]) -> None:
        task_status.started()
        self._failures = 0
        while True:
            if self._pending is None or self._held:
                await self._wakeup.wait()
                self._wakeup = anyio.Event()
                continue
            if self._attempt is not None:
                if not await self._resolve(self._attempt):
                    return
                continue  # the attempt may have been the pending state: look again
            state = self._pending
            started = self._monotonic()
            budget = self._running = state_budget(state)
            try:
                receipt = await self.backend.commit(state, self._persisted)
            except PersistenceError as exc:
                wait = self._failed(exc, f"persisting state {state.state_id}")
                if wait is None:
                    return
                # The commit may have happened all the same: remember what it would have
                # written (the digest costs a pass over the state, off the event loop); its
                # budget stays reserved until the stored header settles it.
                digest = await anyio.to_thread.run_sync(state_digest, state)
                self._attempt = Attempt(state.state_id, state.config_revision, digest, budget)
                self._status = replace(self._status, unconfirmed_id=str(state.state_id))
                del state
                self._running = None
                await self._backoff(wait)
                continue
            finally:
                self._running = None
            self._failures = 0
            self._committed(state, receipt, self._monotonic() - started)

    def check_limits(self, limits: Limits) -> str | None:
        """Why ``limits`` may not be used now (None: they may): P-58.

        The commit running now and the unconfirmed attempt must both fit, since the store may
        hold either. The immutable records are taken as found, so a confirmation that clears
        the attempt meanwhile cannot take a reservation out of this check; a later check no
        longer counts a confirmed (or refuted) attempt. Conservative: a running commit that
        is about to fail still counts.
        """
        running, attempt = self._running, self._attempt
        for what, budget in (
            ("the running commit", running),
            (
                None if attempt is None else f"the unconfirmed commit of {attempt.state_id}",
                None if attempt is None else attempt.budget,
            ),
        ):
            if what is None or budget is None:
                continue
            over = budget.exceeded(limits)
            if over is not None:
                return f"{what} holds {over}"
        return None

    async def _resolve(self, attempt: Attempt) -> bool:
        """Read the stored header to learn what became of ``attempt``; False once stopped."""
        try:
            header = await self.backend.read_header()
        except PersistenceError as exc:
            wait = self._failed(exc, f"checking the outcome of state {attempt.state_id}")
            if wait is None:
                return False
            await self._backoff(wait)
            return True
        self._attempt = None
        self._status = replace(self._status, unconfirmed_id=None)
        if header is not None and attempt.matches(header):
            receipt = header.receipt(retried=True)
            self._confirmed(attempt, receipt)
            return True
        stored = None if header is None else header.state_id
        if stored == self._persisted:
            log.info(
                "state %s was not persisted (the store still holds %s); committing the latest "
                "state",
                attempt.state_id,
                stored,
            )
            return True
        conflict = CommitConflictError(
            f"the store holds state {stored}: neither the last persisted state "
            f"{self._persisted} nor the unconfirmed commit of {attempt.state_id}; "
            "another writer changed it"
        )
        self._failed(conflict, f"checking the outcome of state {attempt.state_id}")  # stops
        return False

    def _failed(self, exc: PersistenceError, what: str) -> float | None:
        """Count and log a failure; the seconds to wait before retrying, None once stopped."""
        self._status = replace(
            self._status, failures=self._status.failures + 1, last_error=self._last_error(exc)
        )
        if not exc.retryable:
            self._stop(exc, what)
            return None
        wait = jittered_backoff(self._failures, self.retry_initial, self.retry_max)
        log.warning(
            "%s failed (%s); retrying in %.1f s; routers keep being served from memory",
            what,
            exc,
            wait,
        )
        return wait

    async def _backoff(self, wait: float) -> None:
        self._failures += 1
        await anyio.sleep(wait)

    def _confirmed(self, attempt: Attempt, receipt: PersistReceipt) -> None:
        pending = self._pending
        if pending is not None and pending.state_id == attempt.state_id:
            self._pending = None  # the very state that was attempted (ids are unique)
        self._failures = 0
        self._record(receipt, seconds=None)
        log.info(
            "persisted state %s (confirmed by the stored header after an unknown outcome)",
            receipt.snapshot_id,
        )
        self._signal()

    def _committed(self, state: PersistedState, receipt: PersistReceipt, seconds: float) -> None:
        if self._pending is state:
            self._pending = None
        self._record(receipt, seconds)
        log.info(
            "persisted state %s (serial %d, %d VRPs) in %.2f s%s",
            receipt.snapshot_id,
            state.serial,
            state.vrp_count(),
            seconds,
            " (already stored: retry)" if receipt.retried else "",
        )
        self._signal()

    def _record(self, receipt: PersistReceipt, seconds: float | None) -> None:
        self._persisted = receipt.snapshot_id
        self._last_receipt = receipt
        self._status = replace(
            self._status,
            last_persisted_id=str(receipt.snapshot_id),
            last_commit_wall=self._wall(),
            last_commit_seconds=seconds,
            commits=self._status.commits + 1,
            last_error=self._last_error(None),
            pending=self._pending is not None,
        )

    def _last_error(self, exc: PersistenceError | None) -> str | None:
        """What ``last_error`` becomes; the error that stopped committing stays shown."""
        if self._error is not None:
            return self._status.last_error
        return None if exc is None else str(exc)

    def _stop(self, exc: PersistenceError, what: str) -> None:
        if self._error is not None:  # already stopped (`stop`): the first reason stays
            return
        self._error = exc
        self._pending = None
        self._status = replace(
            self._status,
            pending=False,
            stopped=True,
            error_code=exc.code,
            error_details=exc.details or None,
        )
        log.error(
            "%s failed permanently (%s); persistence stopped, the file is left as it is; "
            "routers keep being served from memory",
            what,
            exc,
        )
        self._signal()

    def _signal(self) -> None:
        self._progress.set()
        self._progress = anyio.Event()


def _reached(stored: StateId, target: StateId) -> bool:
    return (stored.epoch, stored.generation) >= (target.epoch, target.generation)
