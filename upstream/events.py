"""The client's snapshot, status and event types, and `Watch`, one subscriber's bounded queue.

`ClientSnapshot` carries each kind's usable-until time and refuses a kind past it
(`SnapshotExpiredError`); `Watch` turns a full queue into a sticky `ResyncRequiredError`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Self

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from snapshot.kinds import PayloadKind
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
    "ResyncRequiredError",
    "SnapshotEvent",
    "SnapshotExpiredError",
    "StatusEvent",
    "Watch",
]


class ClientState(enum.Enum):
    """Where a `Client` is in its life."""

    CREATED = "created"
    OPEN = "open"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


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


@dataclass(frozen=True, slots=True)
class SnapshotEvent:
    """A new snapshot."""

    snapshot: ClientSnapshot


@dataclass(frozen=True, slots=True)
class StatusEvent:
    """The active groups or a source state changed."""

    status: ClientStatus


Event = SnapshotEvent | StatusEvent


@dataclass(eq=False)
class Watch:
    """A bounded stream of events; use as a context manager and an async iterator."""

    #: Called once when the watch closes (the client drops it from its registry).
    release: Callable[[Watch], None]
    epoch: int
    _send: MemoryObjectSendStream[Event]
    _receive: MemoryObjectReceiveStream[Event]
    error: ResyncRequiredError | None = None
    _closed: bool = field(default=False)

    def offer(self, event: Event) -> None:
        """Queue ``event``; a full queue turns into a sticky `ResyncRequiredError`."""
        if self.error is not None or self._closed:
            return
        try:
            self._send.send_nowait(event)
        except anyio.WouldBlock:
            self.fail(ResyncRequiredError("watch queue overflowed; events were lost"))

    def fail(self, error: ResyncRequiredError) -> None:
        """Make every later `receive` raise ``error``."""
        if self.error is None:
            self.error = error
            self._send.close()

    async def receive(self) -> Event:
        """The next event; raises the sticky error once one happened."""
        if self.error is not None:
            raise self.error
        try:
            return await self._receive.receive()
        except anyio.EndOfStream:
            raise self.error or ResyncRequiredError("the client closed") from None

    def close(self) -> None:
        """Stop receiving events."""
        self._closed = True
        self.release(self)
        self._send.close()
        self._receive.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Event:
        return await self.receive()
