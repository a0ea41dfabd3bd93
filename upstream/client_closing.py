"""`ClientClosing`: how a `Client` closes: its sources, its host's final view, its state file.

`aclose` (idempotent) without a host hook or a state file stops the sources: a withdrawal
decided before their tasks ended (also one a source reports while it stops) is built and
becomes the current snapshot (without events); a build of such a withdrawal is waited for past
``cleanup_timeout`` (then ``cleanup_overdue`` is reported); a source task still busy then (a
parse in a worker thread) is not: the client stays CLOSING with ``cleanup_overdue`` set, and
`wait_final_view` tells when the last view is complete. With a host or a state file the same
stop is the first step of `upstream.delivery.Delivery.close` (the bounded final commit), whose
report `close_report` returns.
"""

from __future__ import annotations

import logging
from types import TracebackType

import anyio

from persistence.state import PersistReceipt
from upstream.aggregate import Aggregator
from upstream.client_events import EventHub
from upstream.closing import ShutdownReport
from upstream.config import ClientConfig
from upstream.delivery import Delivery
from upstream.events import ClientSnapshot, ClientState
from upstream.state_keeping import StateKeeping
from upstream.timekeeper import TimeKeeper

__all__ = ["ClientClosing"]

log = logging.getLogger("upstream.client")


class ClientClosing:
    """The closing half of `upstream.client.Client` (a base class: it owns no state)."""

    state: ClientState
    config: ClientConfig
    keeper: TimeKeeper
    keeping: StateKeeping | None
    delivery: Delivery
    events: EventHub
    cleanup_overdue: bool
    _aggregator: Aggregator
    _done: anyio.Event | None
    _scope: anyio.CancelScope | None
    _close_started: float | None
    _persistence_ended: anyio.Event | None
    _entering: anyio.CancelScope | None
    _prepared: anyio.Event | None

    def _check_home(self) -> None:
        raise NotImplementedError

    def _cleanup_pending(self) -> tuple[str, ...]:
        raise NotImplementedError

    def get_snapshot(self) -> ClientSnapshot | None:
        """The current snapshot (None before the first one)."""
        raise NotImplementedError

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close (idempotent); with a host or a state file, see `close_report`."""
        await self.close_report()

    async def close_report(self) -> ShutdownReport:
        """Stop everything and say what was persisted; safe to call more than once.

        Without a host hook or a state file this is `_close_sources`. With them, commits are
        held, the sources stop, the final view is delivered, its commit is waited for within
        ``flush_timeout`` and the state file is closed (`Delivery.close`); a store whose close
        failed is kept and a later call retries it. The client is CLOSED at the end.
        """
        self._check_home()
        if self._entering is not None and self._prepared is not None:
            # Entering: cancel the preparation and wait until it ended (and closed its store).
            self.state = ClientState.CLOSING
            self._entering.cancel()
            await self._prepared.wait()
            self._finish_close()
            return ShutdownReport(persisted=None, message="")
        if not self.delivery.active or self.state in (ClientState.CREATED, ClientState.OPEN):
            if self.keeping is not None:
                await self.keeping.close()  # opened on entering, never run
            await self._close_sources()
            return self.delivery.report or ShutdownReport(persisted=None, message="")
        try:
            report = await self.delivery.close(self)
        finally:
            if self._persistence_ended is not None:
                self._persistence_ended.set()
        if self.keeping is not None and not self.keeping.closed:
            # The store's close failed: it is kept (not released) and the next call retries
            # it; the client stays CLOSING, its watches end now.
            self.events.end()
        elif self._done is None or self._done.is_set():
            self._finish_close()
        return report

    def abort_close(self, reason: str) -> None:
        """Stop waiting for the final commit (e.g. a second SIGTERM); the close goes on."""
        self.delivery.abort(reason)

    async def flush(self) -> PersistReceipt:
        """Wait until the state of the current snapshot (or a later one) is committed.

        Returns the actual receipt; raises `persistence.PersisterStoppedError` when committing
        stopped first. Bound it with a cancel scope.
        """
        persister = None if self.keeping is None else self.keeping.persister
        if persister is None:
            raise RuntimeError("flush() needs an entered client with ClientConfig.state")
        current = self.get_snapshot()
        if current is not None and self.state is ClientState.RUNNING:
            await self.delivery.wait_offered(current.generation)  # the target: what is current
        return await persister.flush()

    async def close_sources(self) -> None:
        """Stop the sources (`Delivery.close` calls this first; see `_close_sources`)."""
        await self._close_sources(finish=False)

    async def wait_run_ended(self) -> None:
        """Wait until every task of `run` but the state file's worker ended."""
        if self._done is not None:
            await self._done.wait()

    @property
    def run_ended(self) -> bool:
        """Every task of `run` but the state file's worker ended."""
        return self._done is not None and self._done.is_set()

    async def _close_sources(self, *, finish: bool = True) -> None:
        """Stop everything; safe to call more than once.

        The sources stop first; a withdrawal decided before their tasks ended (also one a
        source reports while it stops) is built and becomes the current snapshot (without
        events). A build of such a withdrawal is waited for past ``cleanup_timeout`` (then
        ``cleanup_overdue`` is reported); a source task still busy then (a parse in a worker
        thread) is not: the client stays CLOSING with ``cleanup_overdue`` set, and
        `wait_final_view` tells when the last view is complete.
        """
        if self.state in (ClientState.CREATED, ClientState.OPEN):
            self._finish_close()
            return
        if self.state is ClientState.CLOSED or (
            self.state is ClientState.CLOSING and self.cleanup_overdue
        ):
            return
        self.state = ClientState.CLOSING
        assert self._done is not None
        started = anyio.current_time()
        self._close_started = self.keeper.monotonic()
        agg = self._aggregator
        agg.close()
        with anyio.move_on_after(self.config.cleanup_timeout) as first:
            await agg.final_round.wait()
        if first.cancelled_caught:
            self.cleanup_overdue = True
            if agg.cleanup_pending:
                # A decided withdrawal is necessary cleanup: it is never dropped for being
                # slow. Stay CLOSING and keep waiting (a caller bounds the whole stop, e.g.
                # rtr-serve's --flush-timeout, by cancelling this wait).
                log.warning(
                    "client close: the last build (a decided withdrawal) still runs after "
                    "%.1f s; waiting for it",
                    self.config.cleanup_timeout,
                )
                while agg.cleanup_pending:
                    await agg.closing_round()
        if not agg.final_round.is_set():
            # The aggregator goes on (a revocation those tasks report is still built) and the
            # client's tasks end after its last round (see `_start_aggregator`).
            log.warning(
                "client close: still busy after %.1f s: source task(s) %s (e.g. a parse in a "
                "worker thread); the client stays closing until they end",
                anyio.current_time() - started,
                ", ".join(agg.still_running()) or "-",
            )
            return
        left = max(0.0, self.config.cleanup_timeout - (anyio.current_time() - started))
        with anyio.move_on_after(left) as waited:
            self._scope_cancel()
            await self._done.wait()
        if waited.cancelled_caught:
            self._scope_cancel()
            self.cleanup_overdue = True
            log.warning(
                "client close: still busy after %.1f s, waiting for: %s (e.g. a parse in a "
                "worker thread); it stops when that returns",
                anyio.current_time() - started,
                ", ".join(self._cleanup_pending()) or "-",
            )
            return
        if finish:
            self._finish_close()

    async def wait_final_view(self) -> None:
        """Wait until closing has ended every source task and built what they decided."""
        await self._aggregator.final_round.wait()

    def _scope_cancel(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    def _finish_close(self) -> None:
        self.state = ClientState.CLOSED
        self.events.end()  # a normal end (a gap before it still raises ResyncRequiredError)

    @property
    def final_view_committed(self) -> bool:
        """True once closing has ended every source task and built what they decided."""
        return self._aggregator.final_round.is_set()
