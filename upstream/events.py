"""The client's snapshot, status and event types, and `Watch`, one subscriber's bounded queue.

`ClientSnapshot` carries each kind's usable-until time and refuses a kind past it
(`SnapshotExpiredError`); `SnapshotEvent`/`StatusEvent` carry their publish identity and what
changed; `Watch` turns a full queue into a sticky `ResyncRequiredError` and a normal end into
`WatchClosed`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple, Self

import anyio

from persistence.persister import PersisterStatus
from snapshot.delta import AspaChange
from snapshot.kinds import PayloadKind
from snapshot.lifecycle import Lifecycle
from snapshot.model import IPNetwork, RouterKey, Vrp
from snapshot.queries import ResyncRequiredError, SnapshotExpiredError, SnapshotView
from snapshot.snapshot import Snapshot
from upstream.merge import SourceInput
from upstream.status import SourceStatus
from upstream.timekeeper import TimeKeeper

__all__ = [
    "ClientSnapshot",
    "ClientState",
    "ClientStatus",
    "Event",
    "EventId",
    "ResyncRequiredError",
    "SnapshotEvent",
    "SnapshotExpiredError",
    "SnapshotId",
    "SourceChange",
    "StatusEvent",
    "Watch",
    "WatchClosed",
]


#: Where a `Client` is in its life (the states every library object shares).
ClientState = Lifecycle


@dataclass(frozen=True, slots=True)
class ClientSnapshot:
    """A published snapshot with where it came from and until when each kind of it holds."""

    snapshot: Snapshot
    #: The client's publish epoch (one per client); events of one epoch form one sequence.
    epoch: int
    #: Counts snapshots within the client's life.
    generation: int
    #: Active group per payload kind.
    active: dict[PayloadKind, str | None]
    #: Effective time after which each kind's data is no longer exact (None: never).
    usable_until_by_kind: dict[PayloadKind, float | None]
    #: The source payloads this snapshot was built from (what persistence stores).
    inputs: tuple[SourceInput, ...] = ()
    #: The configuration revision it was built under.
    config_revision: int = 0
    #: The effective time its data was judged at (a lower bound of the time the client saw).
    evaluated_at: float = 0.0
    #: The client's effective clock (`check` reads it); None: `check` needs ``now``.
    keeper: TimeKeeper | None = None
    #: The identity of the policy it was judged under (the SLURM policy applied and the
    #: client's record limits): equal data under another policy is another publish.
    policy_id: str = ""

    @property
    def id(self) -> SnapshotId:
        """The snapshot's identity (epoch, generation)."""
        return SnapshotId(self.epoch, self.generation)

    @property
    def usable_until(self) -> float | None:
        """The earliest usable-until time over the kinds (None: never)."""
        times = [t for t in self.usable_until_by_kind.values() if t is not None]
        return min(times, default=None)

    def view(self) -> SnapshotView:
        """The snapshot with its per-kind usable-until times (queries take ``now``)."""
        return SnapshotView(self.snapshot, self.usable_until_by_kind)

    def check(self, kind: PayloadKind, now: float | None = None) -> Snapshot:
        """The snapshot if ``kind`` is usable at ``now`` (the client's effective time).

        Raises:
            SnapshotExpiredError: ``kind`` is past its usable-until time; get a new snapshot.
        """
        if now is None:
            if self.keeper is None:
                raise ValueError("check() needs now= for a snapshot without a clock")
            now = self.keeper.now()
        return self.view().check(now, kind)


@dataclass(frozen=True, slots=True)
class ClientStatus:
    """A consistent picture of the client."""

    state: ClientState
    epoch: int
    revision: int
    generation: int
    active: dict[PayloadKind, str | None]
    started_groups: tuple[str, ...]
    sources: tuple[SourceStatus, ...]
    cleanup_overdue: bool
    #: What each source's data is worth now (``ready``, ``ready_empty``, ``expired``,
    #: ``untrusted``, ``revoked``, ``none``).
    availability: dict[str, str] = field(default_factory=dict)
    #: Each kind of `ClientConfig.required` has an active group (the client's readiness).
    ready: bool = False
    #: While closing: what the close still waits for (``source task <name>``, ``last build``,
    #: ``client tasks``); empty otherwise.
    cleanup_pending: tuple[str, ...] = ()
    #: While closing: seconds since `Client.aclose` began (monotonic); None otherwise.
    cleanup_elapsed: float | None = None
    #: The state file's persistence worker as sampled now (`ClientConfig.state`; None
    #: without one): commits, the last receipt's state, the last error, the backlog.
    persistence: PersisterStatus | None = None
    #: Why closing the state file failed (kept: the next `Client.aclose` retries it).
    persistence_close_error: str | None = None
    #: The configuration revision the state file holds (confirmed commits; ``revision`` is the
    #: one in force); None: no state file, or nothing stored yet.
    persisted_revision: int | None = None


class SnapshotId(NamedTuple):
    """A published snapshot's identity: the client's publish epoch and its generation."""

    epoch: int
    generation: int


class EventId(NamedTuple):
    """An event's publish identity: the epoch and the client's monotonic event sequence.

    Snapshot and status events share the sequence (one total order per epoch); a status
    event never borrows a snapshot's generation.
    """

    epoch: int
    sequence: int


@dataclass(frozen=True, slots=True)
class SourceChange:
    """One source's change of ``what``, from ``before`` to ``after`` (None: absent).

    ``what`` is ``added``, ``removed``, ``payload`` or ``selection`` in a snapshot event;
    ``state``, ``connected``, ``availability`` or ``removed`` in a status event.
    """

    name: str
    what: str
    before: str | None
    after: str | None


@dataclass(frozen=True, slots=True)
class SnapshotEvent:
    """A published snapshot and what changed from the one before.

    A kind whose changes exceed the client's event size limit is named in
    ``requires_full_revalidation`` and its change lists are empty (never a truncated list
    posing as complete). Otherwise ``affected_prefixes`` holds every prefix of an added or
    removed VRP: revalidate every route it covers, whatever its origin or length;
    ``affected_customers`` every customer whose ASPA record changed.
    """

    event_id: EventId
    snapshot: ClientSnapshot
    before_id: SnapshotId | None
    after_id: SnapshotId
    before_config_revision: int | None
    after_config_revision: int
    #: ``initial`` (the client's first snapshot), ``config`` (a new configuration revision),
    #: ``data`` (the payload changed) or ``refresh`` (same payload, new metadata or times).
    reason: str
    vrps_added: tuple[Vrp, ...] = ()
    vrps_removed: tuple[Vrp, ...] = ()
    router_keys_added: tuple[RouterKey, ...] = ()
    router_keys_removed: tuple[RouterKey, ...] = ()
    aspa_changes: tuple[AspaChange, ...] = ()
    source_changes: tuple[SourceChange, ...] = ()
    affected_prefixes: tuple[IPNetwork, ...] = ()
    affected_customers: tuple[int, ...] = ()
    requires_full_revalidation: frozenset[PayloadKind] = frozenset()


@dataclass(frozen=True, slots=True)
class StatusEvent:
    """The active groups, a source's state, connection or availability changed."""

    event_id: EventId
    status: ClientStatus
    #: The snapshot current when the status was observed (None before the first).
    observed_snapshot_id: SnapshotId | None
    source_changes: tuple[SourceChange, ...] = ()
    #: Counts status events alone (a pure connection change advances only this and the
    #: event sequence, never the generation).
    status_sequence: int = 0


Event = SnapshotEvent | StatusEvent


class WatchClosed(Exception):  # noqa: N818 - an end, not an error
    """Raised by `Watch.receive` after a normal end (the client closed); ``async for`` stops.

    A gap before the end is raised as `ResyncRequiredError` first.
    """


@dataclass(eq=False)
class Watch:
    """One subscriber: ``initial``, ``initial_status``, then a bounded queue of events.

    Use it as a context manager and an async iterator.

    Overflow, a lost window or an epoch change make it terminally resync-required: the flag
    is set, the queue dropped and the receiver woken (nothing is pushed into the full queue);
    every later `receive` raises `ResyncRequiredError`.
    """

    #: Called once when the watch closes (the client drops it from its registry).
    release: Callable[[Watch], None]
    epoch: int
    max_queue: int
    #: The current snapshot at registration (None before the first); not repeated as an event.
    initial: ClientSnapshot | None
    initial_status: ClientStatus
    error: ResyncRequiredError | None = None
    #: True after a normal end (the client closed): unconsumed events were dropped.
    ended: bool = False
    _queue: deque[Event] = field(default_factory=deque)
    _wake: anyio.Event = field(default_factory=anyio.Event)
    _closed: bool = False

    def offer(self, event: Event) -> None:
        """Queue ``event``; a full queue or another epoch turns into resync-required."""
        if self.error is not None or self.ended or self._closed:
            return
        if event.event_id.epoch != self.epoch:
            self.fail(ResyncRequiredError("the publish epoch changed"))
        elif len(self._queue) >= self.max_queue:
            self.fail(ResyncRequiredError("watch queue overflowed; events were lost"))
        else:
            self._queue.append(event)
            self._notify()

    def fail(self, error: ResyncRequiredError) -> None:
        """Make every later `receive` raise ``error`` (sticky; the queue is dropped)."""
        if self.error is None and not self.ended:
            self.error = error
            self._queue.clear()
            self._notify()

    def end(self) -> None:
        """A normal end: unconsumed events are dropped, `receive` raises `WatchClosed`."""
        if not self.ended:
            self.ended = True
            self._queue.clear()
            self._notify()

    def _notify(self) -> None:
        self._wake.set()
        self._wake = anyio.Event()

    async def receive(self) -> Event:
        """The next event.

        Raises:
            ResyncRequiredError: events were lost (sticky; also after the end).
            WatchClosed: the subscription ended normally.
        """
        while True:
            if self.error is not None:
                raise self.error
            if self._queue:
                return self._queue.popleft()
            if self.ended or self._closed:
                raise WatchClosed("the subscription ended")
            await self._wake.wait()

    def close(self) -> None:
        """Stop receiving events."""
        if not self._closed:
            self._closed = True
            self.release(self)
            self._queue.clear()
            self._notify()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Event:
        try:
            return await self.receive()
        except WatchClosed:
            raise StopAsyncIteration from None
