"""`Delivery`: every snapshot the client commits handed to its host, then to its own state file.

The client's commit record wakes `Delivery.committed` (no await, in the same step that updates
the event log and wakes the watches); `run`, a task of the client's own task tree, takes the
latest committed snapshot (a host slower than the commits skips the ones in between), hands it
to the host's ``publish`` hook (rtr-serve: the RTR publisher; it returns the serial and RTR
session ids it was served under) and then offers its state to the persister (`StateKeeping`).
A state recovered at entry is handed to the host first, before `Client.run` reports started.

`close` is the client's orderly end with a state file or a host: commits are held, the sources
stop (a withdrawal they decide is built into the final view), the snapshot in hand is finished
or, out of ``flush_timeout``, dropped; the final view is delivered (necessary cleanup); then
the last state's commit is waited for within the same ``flush_timeout`` and `ShutdownReport`
says what was persisted. A failure of the final build (`failed`) stops the persister at once
and is the report ``persistence_failed``; the store is closed in every case (a failed close is
kept for the next `close`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Protocol

import anyio

from persistence.errors import REVOCATION_FAILED, CloseFailedError
from snapshot.slurm import SlurmPolicy
from snapshot.slurm_document import policy_document
from snapshot.snapshot import Snapshot
from upstream.client_setup import placeholders
from upstream.closing import (
    Publication,
    ShutdownReport,
    StopRequest,
    close_failed,
    final_not_built,
    persist_last,
)
from upstream.config import ClientConfig, SourceConfig, source_identity
from upstream.events import ClientSnapshot
from upstream.recovery import Configured
from upstream.source import Source
from upstream.state_keeping import Keeper, StateKeeping

__all__ = ["Delivery", "PublishHook", "config_identity", "configured_state"]

log = logging.getLogger(__name__)

#: The host's hook: serve ``snapshot``; returns what it is served as (None: not told).
PublishHook = Callable[[Snapshot], Awaitable[Publication | None]]


def config_identity(config: ClientConfig) -> str:
    """The digest of ``config``'s identity (``PersistedState.config_identity``, P-10).

    Its groups in priority order with their timing and members (sorted by name: the
    configuration's order does not change a logical group; an empty group is kept), each
    source's name, group and full identity (`upstream.config.source_identity`), the required
    kinds and the SLURM files; never the revision (that orders changes) nor secrets.
    SHA-256, hex, with its name.
    """
    parts = [
        f"group={g.name};priority={g.priority};startup_timeout={g.startup_timeout!r};"
        f"failback_delay={g.failback_delay!r};sources="
        + ",".join(sorted(s.name for s in config.sources if s.group == g.name))
        for g in config.effective_groups()
    ]
    parts += sorted(
        f"source={s.name};group={s.group};identity={source_identity(s, config)}"
        for s in config.sources
    )
    parts.append("required=" + ",".join(sorted(k.value for k in config.required)))
    parts.append("slurm=" + ",".join(config.slurm))
    return "sha256:" + hashlib.sha256("\n".join(parts).encode()).hexdigest()


def configured_state(
    config: ClientConfig,
    sources: Mapping[str, tuple[SourceConfig, Source]],
    policy: SlurmPolicy | None,
) -> Configured:
    """What ``config`` (with its ``sources`` and the SLURM ``policy`` in force) gives a state."""
    return Configured(
        placeholders=tuple(placeholders(config, sources)),
        groups=tuple(g.name for g in config.effective_groups()),
        identity=config_identity(config),
        policy_id=None if policy is None else config.policy_id(policy.identity()),
        policy_json=None if policy is None else policy_document(policy),
    )


class Closing(Protocol):
    """What `Delivery.close` needs of the client (narrow: no import of the client)."""

    async def close_sources(self) -> None:
        """Stop the sources; the aggregator builds a withdrawal they decided."""
        ...

    async def wait_final_view(self) -> None:
        """Until every source task ended and what they decided is built."""
        ...

    async def wait_run_ended(self) -> None:
        """Until every task of the client's run ended."""
        ...

    @property
    def final_view_committed(self) -> bool:
        """Every source task ended and what they decided is built."""
        ...

    @property
    def run_ended(self) -> bool:
        """Every task of the client's run ended."""
        ...

    def get_snapshot(self) -> ClientSnapshot | None:
        """The current snapshot."""
        ...


class Delivery:
    """One client's flow of committed snapshots to its host and its state file."""

    def __init__(
        self,
        publish: PublishHook | None,
        keeping: StateKeeping | None,
        keeper: Keeper,
        *,
        flush_timeout: float,
        configured: Callable[[], Configured] = Configured,
    ) -> None:
        """Deliver nothing yet (`run` starts); ``configured``: the configuration in force now."""
        self.publish = publish
        self.configured = configured
        self.keeping = keeping
        self.keeper = keeper
        self.flush_timeout = flush_timeout
        #: Cut the close's waits short (`abort`); the close itself goes on.
        self.stop = StopRequest()
        #: Why the final build failed (an exception out of the client's run while closing).
        self.failure: CloseFailedError | None = None
        #: How the close ended (None before it did).
        self.report: ShutdownReport | None = None
        self._wake: anyio.Event | None = None
        self._scope = anyio.CancelScope()
        self._take_scope: anyio.CancelScope | None = None
        self._done: anyio.Event | None = None
        self._busy = False
        self._taken: ClientSnapshot | None = None
        #: What the host said it served last (None: nothing yet, or no host).
        self._publication: Publication | None = None
        self._offers: anyio.Event | None = None

    @property
    def active(self) -> bool:
        """There is a host or a state file to deliver to."""
        return self.publish is not None or self.keeping is not None

    def committed(self) -> None:
        """The client committed a snapshot (no await; wakes `run`)."""
        if self._wake is not None:
            self._wake.set()

    async def run(
        self,
        current: Callable[[], ClientSnapshot | None],
        recovered: Snapshot | None,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Deliver ``recovered`` (first) and every later committed snapshot, until the close."""
        self._done = anyio.Event()
        self._wake = anyio.Event()
        try:
            with self._scope:
                if recovered is not None and self.publish is not None:
                    await self.publish(recovered)  # before any network: served at once
                task_status.started()
                while True:
                    latest = current()
                    if latest is None or latest is self._taken:
                        await self._wake.wait()
                        self._wake = anyio.Event()
                        continue
                    await self._take_shielded(latest)
        finally:
            self._done.set()

    async def _take_shielded(self, latest: ClientSnapshot) -> None:
        # Shielded: the client's close cancels its tasks; the snapshot in hand is finished
        # (or dropped by `close` when out of time, through this scope).
        with anyio.CancelScope(shield=True) as scope:
            self._take_scope = scope
            try:
                await self.take(latest)
            finally:
                self._take_scope = None

    async def take(self, current: ClientSnapshot) -> None:
        """Hand ``current`` to the host, then offer its state to the persister."""
        self._taken = current
        self._busy = True
        keeping = self.keeping
        try:
            if keeping is None:
                if self.publish is not None:
                    await self.publish(current.snapshot)
                return
            with keeping.handover.taking(current):
                if self.publish is not None:
                    self._publication = await self.publish(current.snapshot)
                await self._offer(current)
        finally:
            self._busy = False

    async def _offer(self, current: ClientSnapshot) -> None:
        """Offer ``current``'s state as served last (also the final hand-over when cut short)."""
        keeping = self.keeping
        assert keeping is not None
        published = self._publication
        if self.publish is None:  # no host: the client's own generation stands in
            published = Publication(current.generation, (0, 0, 0), current.snapshot.vrp_count)
        if published is not None:
            await keeping.offer(current, published, self.keeper, self.configured())
            if self._offers is not None:
                self._offers.set()
                self._offers = None

    async def wait_offered(self, generation: int) -> None:
        """Return once a snapshot of ``generation`` or later was offered to the persister."""
        keeping = self.keeping
        assert keeping is not None
        while True:
            offered = keeping.handover.offered
            if offered is not None and offered.generation >= generation:
                return
            if self._offers is None:
                self._offers = anyio.Event()
            await self._offers.wait()

    async def reconfigured(
        self, revision: int, *, current: Callable[[], ClientSnapshot | None]
    ) -> None:
        """A configuration change was applied; store it even while no source has data (P-57).

        With a snapshot published (``current()``, or a recovered one about to be built) the
        next build commits the new revision with its payload, as always. Without, nothing would be
        committed until some source has data: the data-less state of the new configuration
        goes to the state file alone (the host is not handed an empty table: routers keep
        getting No Data Available).
        """
        keeping = self.keeping
        if keeping is None or keeping.persister is None:
            return
        recovery = keeping.recovery
        if recovery is not None and recovery.snapshot is not None:
            return  # seeded data: the next build carries the new revision with it
        await keeping.offer_without_data(
            revision, self.keeper, self.configured(), unless=lambda: current() is not None
        )

    def _served_serial(self) -> int | None:
        """The serial the host serves now (None: nothing was served)."""
        if self.publish is None:
            taken = self._taken
            return None if taken is None else taken.generation
        return None if self._publication is None else self._publication.serial

    def failed(self, exc: BaseException) -> None:
        """The client's run raised while closing: the final build failed; stop persisting."""
        leaf = exc
        while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
            leaf = leaf.exceptions[0]
        self.failure = CloseFailedError(
            f"the final build raised {type(leaf).__name__}: {leaf}", cause=REVOCATION_FAILED
        )
        if self.keeping is not None and self.keeping.persister is not None:
            self.keeping.persister.stop(self.failure)

    def abort(self, reason: str) -> None:
        """Stop waiting for the final commit (e.g. a second SIGTERM); the close goes on."""
        self.stop.abort(reason)

    async def close(self, client: Closing) -> ShutdownReport:
        """Stop the sources, deliver the final view, wait for its commit, close the store."""
        if self.report is not None:  # closed before: only a failed store close is retried
            return await self._close_store(self.report, None)
        try:
            report = await self._close(client)
        except BaseException:
            keeping = self.keeping
            if self.failure is not None and keeping is not None:
                persister = keeping.persister
                held = keeping.handover.held(None if persister is None else persister.persisted)
                await self._close_store(close_failed(self.failure, held), None)
            elif keeping is not None:
                await keeping.close()
            raise
        return await self._close_store(report, 0.0)  # the flush deadline is over

    async def _close_store(self, report: ShutdownReport, wait: float | None) -> ShutdownReport:
        """Close the store (``wait`` as `StateKeeping.close`); the report says how it went."""
        if self.keeping is not None:
            await self.keeping.close(wait)
            report = replace(report, close_error=self.keeping.close_error)
        self.report = report
        return report

    async def _close(self, client: Closing) -> ShutdownReport:
        stop, keeping = self.stop, self.keeping
        started = anyio.current_time()
        deadline = started + self.flush_timeout
        persister = None if keeping is None else keeping.persister
        if persister is not None:
            persister.hold()  # no commit starts until the final state is known
        if not self._busy:
            self._scope.cancel()  # idle: waiting for the next snapshot
        with stop.bounded(deadline):
            await client.close_sources()  # a decided withdrawal is built first
        with stop.bounded(deadline):
            await client.wait_final_view()  # every source task ended (a late revocation too)
        if self._done is not None:
            with stop.bounded(deadline):
                await self._done.wait()
            if not self._done.is_set():
                self._scope.cancel()
                if self._take_scope is not None:
                    self._take_scope.cancel()  # out of time: the snapshot in hand is dropped
                await self._done.wait()  # (a publish or conversion thread cannot be abandoned)
        with stop.bounded(deadline):
            await client.wait_run_ended()  # every client task ended (or failed)
        final = client.get_snapshot()
        taken = self._taken
        if final is not None and (taken is None or final.generation > taken.generation):
            # A decided withdrawal committed while closing (no event is sent for it):
            # necessary cleanup, delivered within the same deadline.
            with stop.bounded(deadline, shield=True):
                await self.take(final)
        if keeping is None or persister is None:
            return ShutdownReport(persisted=None, message="")  # memory only: nothing to persist
        if self.failure is not None:
            return close_failed(self.failure, keeping.handover.held(persister.persisted))
        if client.run_ended:
            persister.release()  # ended cleanly; else the older acknowledged state stays
        handover = keeping.handover
        report = await persist_last(
            handover,
            persister,
            stop,
            published_serial=self._served_serial(),
            offer=self._offer,
            deadline=deadline,
            flush_timeout=self.flush_timeout,
            started=started,
        )
        if not client.final_view_committed:
            return final_not_built(handover, persister)
        return report
