"""`Following`: the client's snapshots published and handed to the state file, and its orderly end.

`run` watches the upstream client (`Client.watch`) and takes every snapshot it makes: published
(`Publishing`), then offered to the persister (`StateKeeping.offer`), with `Handover` noting
what was taken and what was offered: the watch's ``initial`` snapshot first, then each
`SnapshotEvent`'s; a `ResyncRequiredError` starts a new watch (from its new ``initial``), and
the watch's normal end (the client closed) ends the loop. After the stop
request no new snapshot is taken; the one in hand is finished.

`close_in_order` is the stop of that flow: commits are held, the client closes (its sources
stop; a withdrawal they decide is built into its final view), the snapshot in hand is finished
or, out of time, dropped; a final snapshot the client committed while closing is published and
handed over; then `persist_last` waits for the last state's commit within the flush timeout and
the report says what was persisted.
"""

from __future__ import annotations

import logging

import anyio

from rtr_server.publishing import Publishing
from rtr_server.shutdown import (
    ClientRun,
    ShutdownReport,
    StopRequest,
    final_not_built,
    persist_last,
)
from rtr_server.state_keeping import StateKeeping
from upstream.client import (
    Client,
    ClientSnapshot,
    ClientState,
    ResyncRequiredError,
    SnapshotEvent,
)

__all__ = ["Following"]

log = logging.getLogger(__name__)


class Following:
    """One process's flow from the upstream client to routers and the state file."""

    def __init__(
        self,
        client: Client,
        publishing: Publishing,
        keeping: StateKeeping,
        *,
        stop: StopRequest,
        client_run: ClientRun,
        flush_timeout: float,
    ) -> None:
        """Follow nothing yet (`run` starts)."""
        self.client = client
        self.publishing = publishing
        self.keeping = keeping
        self.stop = stop
        self.client_run = client_run
        self.flush_timeout = flush_timeout
        #: Cancelled only while idle at the stop, or when the close runs out of time.
        self.scope = anyio.CancelScope()
        #: Set once `run` returned.
        self.done = anyio.Event()

    async def run(self) -> None:
        """Publish every snapshot the client makes; resynchronise when a watch says so."""
        client, stop = self.client, self.stop
        try:
            with self.scope:
                while client.state is ClientState.RUNNING and not stop.requested():
                    with client.watch() as events:
                        try:
                            if events.initial is not None and not stop.requested():
                                await self.take(events.initial)
                            async for event in events:
                                if stop.requested():
                                    break
                                if isinstance(event, SnapshotEvent):
                                    await self.take(event.snapshot)
                                if stop.requested():
                                    break
                        except ResyncRequiredError as exc:
                            if not stop.requested():
                                log.info("resynchronising with the client: %s", exc)
        finally:
            self.done.set()

    async def take(self, current: ClientSnapshot) -> None:
        """Publish ``current`` and hand it to the persister, noting what was handed over."""
        with self.keeping.handover.taking(current):
            await self.publishing.publish(current.snapshot)
            await self.offer(current)

    async def offer(self, current: ClientSnapshot) -> None:
        """Offer ``current``'s state (also the final hand-over, when `take` was cut short)."""
        published = self.publishing.current
        if self.keeping.persister is not None and published is not None:
            await self.keeping.offer(current, published, self.client)

    async def close_in_order(self) -> ShutdownReport:
        """Take no new snapshot, finish and hand over the one in hand, wait for its commit."""
        client, stop, handover = self.client, self.stop, self.keeping.handover
        persister = self.keeping.persister
        started = anyio.current_time()
        deadline = started + self.flush_timeout
        if persister is not None:
            persister.hold()  # no commit starts until the final state is known
        if not handover.busy:
            self.scope.cancel()  # idle: waiting for the next snapshot
        with stop.bounded(deadline):
            await client.aclose()  # the sources stop; a decided withdrawal is built first
        with stop.bounded(deadline):
            await client.wait_final_view()  # every source task ended (a late revocation too)
        with stop.bounded(deadline):
            await self.done.wait()
        if not self.done.is_set():
            self.scope.cancel()  # out of time: the snapshot in hand is dropped
            await self.done.wait()  # (a publish or conversion thread cannot be abandoned)
        with stop.bounded(deadline):
            await self.client_run.wait_ended()  # every client task ended (or failed)
        final = client.get_snapshot()
        taken = handover.taken
        if final is not None and (taken is None or final.generation > taken.generation):
            # The client committed a decided withdrawal while it closed (no event is sent for
            # it): necessary cleanup, published and handed over within the same deadline.
            with stop.bounded(deadline, shield=True):
                await self.take(final)
        published = self.publishing.current
        serial = None if published is None else published.serial.value
        if persister is None:
            return ShutdownReport(persisted=None, message="")  # memory only: nothing to persist
        if self.client_run.ended_cleanly:
            persister.release()  # else the older acknowledged state stays on disk
        report = await persist_last(
            handover,
            persister,
            stop,
            published_serial=serial,
            offer=self.offer,
            deadline=deadline,
            flush_timeout=self.flush_timeout,
            started=started,
        )
        if not client.final_view_committed:
            return final_not_built(handover, persister)
        return report
