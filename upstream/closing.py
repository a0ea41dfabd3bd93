"""Orderly stop: the stop request and its abort, the bounded final commit and its one log line.

`StopRequest` is what a signal handler touches: `request` asks for an orderly stop, `abort` cuts
the wait for the final commit short (a second signal). `Handover` notes which snapshot the app
took last and which it handed to the persister. `persist_last` makes sure the last published
state is offered (building it if its hand-over was cut short), waits until a deadline for its
commit, and says in one line what was and what was not persisted: a state is called persisted
only on the persister's receipt.

`close_failed` is the close result ``persistence_failed`` (phase ``close``, cause
``revocation_failed``) of a final build that raised (`upstream.delivery.Delivery.failed`).
`close_store` closes the store and logs, once, why that failed; such a secondary error never
replaces the primary outcome.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import anyio

from persistence.backend import ThreadedBackend
from persistence.errors import CloseFailedError
from persistence.persister import Persister, PersisterStoppedError
from persistence.state import StateId

__all__ = [
    "Handover",
    "Offered",
    "Publication",
    "ShutdownReport",
    "StopRequest",
    "close_failed",
    "close_store",
    "final_not_built",
    "not_persisted",
    "persist_last",
]

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Publication:
    """What a host served a snapshot as (stored with its state): serial, RTR session ids."""

    serial: int
    session_ids: tuple[int, int, int]
    vrps: int


@dataclass(frozen=True, slots=True)
class Offered:
    """A state handed to the persister: its id, its serial and the VRPs routers were served."""

    state_id: StateId
    serial: int
    vrps: int


@dataclass(frozen=True, slots=True)
class ShutdownReport:
    """How an orderly stop ended for the persisted state."""

    #: True: the last published state is committed (or nothing new needed committing);
    #: False: it is not; None: nothing is persisted by design (no ``--state``, a follower).
    persisted: bool | None
    #: The one log line that says so ("" when nothing is persisted by design).
    message: str
    #: The error code when the close itself failed (``persistence_failed``), else None.
    code: str | None = None
    #: Where the close failed, e.g. ``{"phase": "close", "cause": "revocation_failed"}``.
    details: dict[str, str] | None = None
    #: Why closing the store failed after that (logged on its own line); None: it closed.
    close_error: str | None = None

    def log(self, logger: logging.Logger) -> None:
        """Write the line (event ``shutdown``): info when persisted, error when not."""
        if self.message:
            level = logging.INFO if self.persisted else logging.ERROR
            extra: dict[str, Any] = {"event": "shutdown", "persisted": self.persisted}
            if self.code is not None:
                extra.update(code=self.code, details=self.details)
            if self.close_error is not None:
                extra["close_error"] = self.close_error
            logger.log(level, "%s", self.message, extra=extra)


def not_persisted(what: str, reason: str, held: str) -> ShutdownReport:
    """The report of a stop that left ``what`` unpersisted."""
    message = f"shutdown: {what} NOT persisted ({reason}); {held}"
    return ShutdownReport(persisted=False, message=message)


def close_failed(error: CloseFailedError, held: str) -> ShutdownReport:
    """The report of a close that failed (``error``: its code, phase and cause)."""
    where = ", ".join(f"{key}={value}" for key, value in error.details.items())
    message = f"shutdown: the final state NOT persisted ({error.code}, {where}: {error}); {held}"
    return ShutdownReport(persisted=False, message=message, code=error.code, details=error.details)


class StopRequest:
    """An orderly stop asked for (`request`), and the wait for the final commit cut short."""

    def __init__(self) -> None:
        """Nothing asked yet; no event loop is needed until `wait`."""
        self._requested = False
        #: Why the final wait was cut short (None: it was not).
        self.abort_reason: str | None = None
        self._event: anyio.Event | None = None
        self._scopes: set[anyio.CancelScope] = set()

    def requested(self) -> bool:
        """Whether the orderly stop was asked for."""
        return self._requested

    def request(self) -> None:
        """Ask for the orderly stop (idempotent)."""
        self._requested = True
        if self._event is not None:
            self._event.set()

    async def wait(self) -> None:
        """Return once `request` was called."""
        if self._requested:
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()

    def abort(self, reason: str) -> None:
        """Stop waiting for the final commit; the close goes on (a running one is interrupted)."""
        if self.abort_reason is None:
            self.abort_reason = reason
        for scope in list(self._scopes):
            scope.cancel()

    @contextmanager
    def bounded(self, deadline: float, *, shield: bool = False) -> Iterator[anyio.CancelScope]:
        """A cancel scope that ends at ``deadline`` or at `abort` (at once after one)."""
        scope = anyio.CancelScope(deadline=deadline, shield=shield)
        if self.abort_reason is not None:
            scope.cancel()
        self._scopes.add(scope)
        try:
            with scope:
                yield scope
        finally:
            self._scopes.discard(scope)

    def cut_short(self, flush_timeout: float) -> str:
        """Why a bounded wait ended without its result."""
        return self.abort_reason or f"the flush timeout of {flush_timeout:g} s ran out"


@dataclass(eq=False)
class Handover(Generic[T]):
    """Which snapshot the app took last, and which it handed to the persister."""

    #: The snapshot being (or last) published.
    taken: T | None = None
    #: The last one whose state was offered to the persister.
    offered: T | None = None
    #: The app is publishing or handing over ``taken`` right now.
    busy: bool = False
    #: The states offered that may still be the stored one, by id.
    offers: dict[StateId, Offered] = field(default_factory=dict)
    last: Offered | None = None

    @contextmanager
    def taking(self, snapshot: T) -> Iterator[None]:
        """The app publishes and hands over ``snapshot`` inside this block."""
        self.taken = snapshot
        self.busy = True
        try:
            yield
        finally:
            self.busy = False

    @property
    def pending(self) -> bool:
        """A snapshot was taken (and maybe published) but its state was not offered."""
        return self.taken is not self.offered

    def note(
        self, snapshot: T, state_id: StateId, published: Publication, stored: StateId | None
    ) -> None:
        """``snapshot`` was offered as ``state_id`` while it is served as ``published``.

        ``stored`` is the state the store holds now (older offers are forgotten).
        """
        offer = Offered(state_id, published.serial, published.vrps)
        self.offered = snapshot
        self.last = offer
        if stored is not None:
            floor = (stored.epoch, stored.generation)
            self.offers = {k: v for k, v in self.offers.items() if (k.epoch, k.generation) >= floor}
        self.offers[offer.state_id] = offer

    def held(self, stored: StateId | None) -> str:
        """What the store holds, as far as its confirmed commits tell."""
        if stored is None:
            return "the store holds no state"
        known = self.offers.get(stored)
        serial = "" if known is None else f" (serial {known.serial})"
        return f"the store still holds {stored}{serial}"


def final_not_built(handover: Handover[T], persister: Persister) -> ShutdownReport:
    """The report of a stop whose final view never came: nothing is called persisted."""
    return not_persisted(
        "the final state",
        "the sources did not all stop, or a withdrawal decided at the stop was not built, "
        "within the flush timeout",
        handover.held(persister.persisted),
    )


async def persist_last(
    handover: Handover[T],
    persister: Persister,
    stop: StopRequest,
    *,
    published_serial: int | None,
    offer: Callable[[T], Awaitable[None]],
    deadline: float,
    flush_timeout: float,
    started: float,
) -> ShutdownReport:
    """Offer the last published state if it was not, then wait for its commit until ``deadline``.

    ``offer`` builds and offers the state of a snapshot (and notes it in ``handover``);
    ``published_serial`` is the serial routers are served (None: nothing was published);
    ``started`` is the `anyio.current_time` at which the stop began.
    """
    taken = handover.taken
    if published_serial is not None and handover.pending and taken is not None:
        # Its hand-over was cut short: necessary cleanup, shielded, within the same deadline.
        with stop.bounded(deadline, shield=True):
            await offer(taken)
    held = handover.held(persister.persisted)
    if published_serial is not None and handover.pending:
        what = f"the state of serial {published_serial}"
        return not_persisted(what, stop.cut_short(flush_timeout), held)
    last = handover.last
    if last is None:
        return ShutdownReport(
            persisted=True, message=f"shutdown: nothing new to persist since the start; {held}"
        )
    reason: str | None = None
    with stop.bounded(deadline):
        try:
            receipt = await persister.flush()
        except PersisterStoppedError as exc:
            reason = f"persistence stopped: {exc}"
        else:
            done = handover.offers.get(receipt.snapshot_id, last)
            return ShutdownReport(
                persisted=True,
                message=f"shutdown: state {receipt.snapshot_id} (serial {done.serial}, "
                f"{done.vrps:,} VRPs) persisted in {anyio.current_time() - started:.1f} s",
            )
    what = f"state {last.state_id} (serial {last.serial})"
    return not_persisted(what, reason or stop.cut_short(flush_timeout), held)


async def close_store(
    backend: ThreadedBackend, known: str | None, wait: float | None = None
) -> str | None:
    """Close ``backend`` (shielded; ``wait`` as `ThreadedBackend.close`); why it failed, or None.

    ``known`` is what an earlier call returned: the failure is logged (one error line) only
    once, and nothing is raised, so that it never replaces a primary error or cancellation.
    """
    with anyio.CancelScope(shield=True):
        finished = await backend.close(wait=wait)
    if not finished:
        log.warning("persistence worker thread still busy at close")
        return known
    error = backend.close_error
    if error is None:
        return None  # closed (a retry of a failed close that succeeded too)
    if known is not None:
        return known
    text = f"{type(error).__name__}: {error}"
    log.error(
        "closing the state store failed (%s); the commits confirmed before it stay",
        text,
        extra={"event": "persistence_close_failed", "error": text},
    )
    return text
