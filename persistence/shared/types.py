"""The shared reader's configuration, snapshot, status and event types, and one watch's queue.

`SharedSnapshot` refuses a kind past its usable-until time (`SnapshotExpiredError`, judged at
the reader's own effective time), and every kind of a state the reader refused (its write time
too far ahead of the wall clock); `SharedWatch` is one subscriber's bounded queue whose
overflow or a change of the writer's publish identity turns into a sticky `ResyncRequiredError`.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from snapshot.impact import DEFAULT_EVENT_SIZE_LIMIT, EVERYTHING, Changes
from snapshot.kinds import PayloadKind
from snapshot.lifecycle import Lifecycle
from snapshot.model import IPNetwork
from snapshot.queries import ResyncRequiredError, SnapshotView
from snapshot.slurm import SlurmPolicy
from snapshot.snapshot import Snapshot

__all__ = [
    "ALL_AFIS",
    "CLOSE_DEADLINE",
    "DEFAULT_CLOCK_TOLERANCE",
    "Afi",
    "ReaderId",
    "ReaderState",
    "SharedEvent",
    "SharedMetrics",
    "SharedReaderConfig",
    "SharedReaderLimits",
    "SharedSnapshot",
    "SharedStatus",
    "SharedWatch",
    "UpstreamId",
]

#: The fixed bound on how long `aclose` waits for the owner thread (P-72).
CLOSE_DEADLINE = 5.0

#: How far the wall clock may be behind a state's write time before the state is refused (the
#: upstream client's default ``clock_tolerance``: an owner and its readers use the same).
DEFAULT_CLOCK_TOLERANCE = 300.0


class Afi(enum.Enum):
    """An address family of ASPA readiness (`wait_ready(aspa_afi=...)`).

    Each family is judged on its own: its coverage (`SourceRecord.aspa_families`), the writer's
    active group for it (``aspa_v4``/``aspa_v6``) and its entries (a stored afi of 0 serves
    both families); see `persistence.shared.convert.judge_families`.
    """

    IPV4 = "ipv4"
    IPV6 = "ipv6"


#: Both address families: what ASPA readiness needs unless ``aspa_afi`` picks one.
ALL_AFIS = frozenset(Afi)


@dataclass(frozen=True, slots=True)
class SharedReaderLimits:
    """Reader-owned bounds (P-68)."""

    #: Snapshot builds admitted into managed threads at once (a header candidate and a
    #: local-time calibration share them; with one slot a calibration waits for the other).
    max_concurrent_builds: int = 2

    def __post_init__(self) -> None:
        if self.max_concurrent_builds < 1:
            raise ValueError("max_concurrent_builds must be at least 1")


@dataclass(frozen=True, slots=True)
class SharedReaderConfig:
    """Where the owner's SQLite file is and how the reader follows it."""

    path: str | Path
    #: Seconds between two looks at the header.
    poll_interval: float = 1.0
    #: Events one subscriber may have queued before it must resynchronise.
    queue_size: int = 64
    #: The wall clock (Unix seconds); the reader's effective time never goes below what it saw.
    wall: Callable[[], float] = time.time
    #: Longest sleep of the expiry timer between two looks at the clock.
    recheck: float = 1.0
    #: The reader's own bounds (build slots).
    limits: SharedReaderLimits = field(default_factory=SharedReaderLimits)
    #: A state written further ahead of the raw wall clock than this is refused (not served).
    clock_tolerance: float = DEFAULT_CLOCK_TOLERANCE
    #: The reader's own SLURM policy, applied to every snapshot it builds (None from the call:
    #: not valid yet, nothing new is built); without it the owner's policy stored with each
    #: state (`PersistedState.policy_json`) is applied, or none if the owner stored none.
    #: Tell the reader of a change with `SharedSnapshotClient.policy_changed`.
    policy: Callable[[], SlurmPolicy | None] | None = None
    #: Entering waits (retrying every ``poll_interval``) until the file can be opened and read,
    #: instead of failing: a reader started before its owner.
    wait_for_file: bool = False
    #: Changes per kind an event lists; beyond it the event names the kind in
    #: ``requires_full_revalidation`` instead (the upstream client's default).
    event_size_limit: int = DEFAULT_EVENT_SIZE_LIMIT

    def __post_init__(self) -> None:
        if not self.poll_interval > 0 or not self.recheck > 0:
            raise ValueError("poll_interval and recheck must be positive")
        if not self.clock_tolerance > 0:
            raise ValueError("clock_tolerance must be positive")
        if self.queue_size < 1:
            raise ValueError("queue_size must be at least 1")
        if self.event_size_limit < 0:
            raise ValueError("event_size_limit must not be negative")


#: Where a `SharedSnapshotClient` is in its life (the states every library object shares).
ReaderState = Lifecycle


@dataclass(frozen=True, slots=True)
class UpstreamId:
    """The writer a snapshot came from, with the configuration revision of its header."""

    store_id: str
    epoch: int
    generation: int
    config_revision: int


@dataclass(frozen=True, slots=True)
class ReaderId:
    """The reader's own identity of a snapshot it published (not the writer's).

    ``store_id`` is new for each reader; ``epoch`` starts at 1 and grows with each change of
    the writer's publish identity (a resynchronisation); ``generation`` is the reader's publish
    count, growing with every snapshot it publishes (a new header or a local re-judging).
    """

    store_id: str
    epoch: int
    generation: int


@dataclass(frozen=True, slots=True)
class SharedSnapshot:
    """The writer's state as the reader judged it, with each kind's usable-until time."""

    snapshot: Snapshot
    #: The publish identity of the writer it follows: store id and epoch, and its generation.
    store_id: str
    epoch: int
    generation: int
    #: The writer's configuration revision of that state.
    config_revision: int
    #: Effective time after which each kind's data is no longer exact (None: never).
    usable_until_by_kind: dict[PayloadKind, float | None]
    #: The effective time the state was judged at.
    evaluated_at: float
    #: The reader's effective clock (`check` reads it when no ``now`` is given).
    clock: Callable[[], float] | None = field(default=None, compare=False)
    #: The writer's active groups per kind, as its stored selection records them.
    active_groups: Mapping[PayloadKind, tuple[str, ...]] = field(default_factory=dict)
    #: The reader's own publish count: every snapshot it publishes (a new header or a local
    #: re-evaluation of the held one) has the next one.
    local_generation: int = 0
    #: The reader's own store id and epoch (see `ReaderId`).
    reader_store_id: str = ""
    local_epoch: int = 0
    #: The state was refused (written too far ahead of the wall clock): the snapshot is empty
    #: and no kind is usable.
    refused: bool = False
    #: The ASPA families covered (by a live source of the family's active group), each
    #: family's usable-until time (None: never) and the writer's active group of each family.
    aspa_covered: frozenset[Afi] = frozenset()
    aspa_usable_until_by_afi: Mapping[Afi, float | None] = field(default_factory=dict)
    aspa_active_groups: Mapping[Afi, tuple[str, ...]] = field(default_factory=dict)

    @property
    def reader_id(self) -> ReaderId:
        """The reader's own identity of this snapshot."""
        return ReaderId(self.reader_store_id, self.local_epoch, self.local_generation)

    @property
    def upstream_id(self) -> UpstreamId:
        """The writer's identity and configuration revision of this snapshot."""
        return UpstreamId(self.store_id, self.epoch, self.generation, self.config_revision)

    def aspa_usable(self, afi: Afi, now: float) -> bool:
        """Whether ASPA data may be used for ``afi`` at ``now``: covered, not past its end.

        Never for a refused state, nor for a family no live source of its active group covers.
        """
        if self.refused or afi not in self.aspa_covered:
            return False
        until = self.aspa_usable_until_by_afi.get(afi)
        return until is None or now < until

    @property
    def version(self) -> tuple[int, int]:
        """(epoch, generation) of the writer's state."""
        return (self.epoch, self.generation)

    @property
    def usable_until(self) -> float | None:
        """The earliest usable-until time over the kinds and ASPA families (None: never)."""
        times = [t for t in self.usable_until_by_kind.values() if t is not None]
        times += [t for t in self.aspa_usable_until_by_afi.values() if t is not None]
        return min(times, default=None)

    def view(self) -> SnapshotView:
        """The snapshot with its per-kind usable-until times (queries take ``now``)."""
        return SnapshotView(self.snapshot, self.usable_until_by_kind)

    def usable(self, kind: PayloadKind, now: float) -> bool:
        """Whether ``kind`` may still be used at ``now``."""
        if self.refused:
            return False
        until = self.usable_until_by_kind.get(kind)
        return until is None or now < until

    def check(self, kind: PayloadKind, now: float | None = None) -> Snapshot:
        """The snapshot if ``kind`` is usable at ``now`` (the reader's effective time).

        Raises:
            SnapshotExpiredError: ``kind`` is past its usable-until time; get a new snapshot.
        """
        if now is None:
            if self.clock is None:
                raise ValueError("check() needs now= for a snapshot without a clock")
            now = self.clock()
        return self.view().check(now, kind)


@dataclass(frozen=True, slots=True)
class SharedStatus:
    """An I/O-free sample of the reader."""

    state: ReaderState
    #: The writer followed: its store id, epoch, generation and configuration revision.
    store_id: str | None
    epoch: int | None
    generation: int | None
    config_revision: int | None
    #: The last read failure (None once a read succeeds again).
    persistence_error: str | None
    #: False before a state was read, and once the old view expired after a read failure.
    available: bool
    #: The kinds usable now.
    ready_kinds: frozenset[PayloadKind]
    cleanup_overdue: bool = False
    #: The writer's identity of the held snapshot (None before any state was read).
    upstream_id: UpstreamId | None = None
    #: VRPs are usable now (the default meaning of "ready").
    ready: bool = False
    #: The ASPA families usable now, each judged on its own.
    aspa_ready: frozenset[Afi] = frozenset()
    #: Each kind's and each ASPA family's usable-until time (None: never or nothing held).
    usable_until_by_kind: Mapping[PayloadKind, float | None] = field(default_factory=dict)
    aspa_usable_until_by_afi: Mapping[Afi, float | None] = field(default_factory=dict)
    #: The writer's active groups per kind in the held state.
    active_groups: Mapping[PayloadKind, tuple[str, ...]] = field(default_factory=dict)
    #: The ASPA families covered in the held state and the writer's active group of each.
    aspa_covered: frozenset[Afi] = frozenset()
    aspa_active_groups: Mapping[Afi, tuple[str, ...]] = field(default_factory=dict)
    #: The reader's own publish count of the held snapshot, and its own identity of it.
    local_generation: int = 0
    reader_id: ReaderId | None = None
    #: False while the state read last is refused (the wall clock too far behind its write time).
    trusted: bool = True
    #: Complete states read, and failed reads, so far.
    reads: int = 0
    read_errors: int = 0


@dataclass(frozen=True, slots=True)
class SharedMetrics:
    """An I/O-free sample of the reader's counters."""

    state: ReaderState
    #: The reader's own publish count and the writer's generation it holds.
    local_generation: int
    upstream_generation: int | None
    #: Header looks, looks that failed, complete states read.
    polls: int
    poll_failures: int
    states_read: int
    #: Builds published from a new header, local re-evaluations published, and
    #: re-evaluations dropped because a new header was published while they ran.
    header_builds: int
    calibrations: int
    stale_calibrations: int
    #: Build slots: the bound, held by a running thread now, tasks waiting for one.
    max_concurrent_builds: int
    builds_running: int
    builds_waiting: int
    #: The reader's effective time of the last completed header look (None: none yet).
    last_poll_at: float | None
    #: Records of the held snapshot and open subscriptions.
    vrps: int
    router_keys: int
    aspas: int
    watchers: int


@dataclass(frozen=True, slots=True)
class SharedEvent:
    """A new snapshot, of ``kind`` initial, changed, coalesced, expired, refused, trusted or policy.

    ``refused``: the state is not trusted (an empty snapshot); ``trusted``: trusted again;
    ``policy``: the reader's SLURM policy changed.

    ``start`` and ``end`` are the (epoch, generation) versions the diff goes between (a
    ``coalesced`` one skipped the generations between them); ``added``/``removed`` count the
    records of the complete endpoint diff (an ASPA record replaced counts once each way).

    ``changes`` is that diff with its conservative impact, as the upstream client's
    `SnapshotEvent` has it (`snapshot.impact`): ``affected_prefixes`` holds every prefix of an
    added or removed VRP (revalidate every route it covers, whatever its origin or length),
    ``affected_customers`` every customer whose ASPA record changed, and a kind with more
    changes than the reader's ``event_size_limit`` is named in ``requires_full_revalidation``
    with none of its changes listed. An ``initial`` event asks for a full revalidation of every
    kind: all of its snapshot is new to the subscriber.
    """

    kind: str
    snapshot: SharedSnapshot
    start: tuple[int, int] | None
    end: tuple[int, int]
    added: int = 0
    removed: int = 0
    changes: Changes = EVERYTHING

    @property
    def affected_prefixes(self) -> tuple[IPNetwork, ...]:
        """Every prefix of an added or removed VRP (revalidate all routes it covers)."""
        return self.changes.affected_prefixes

    @property
    def affected_customers(self) -> tuple[int, ...]:
        """Every customer whose ASPA record changed."""
        return self.changes.affected_customers

    @property
    def requires_full_revalidation(self) -> frozenset[PayloadKind]:
        """The kinds whose changes are not listed: revalidate everything of them."""
        return self.changes.requires_full_revalidation


@dataclass(eq=False)
class SharedWatch:
    """A bounded stream of events; use as a context manager and an async iterator."""

    release: Callable[[SharedWatch], None]
    _send: MemoryObjectSendStream[SharedEvent]
    _receive: MemoryObjectReceiveStream[SharedEvent]
    error: ResyncRequiredError | None = None
    _closed: bool = False

    @classmethod
    def create(cls, release: Callable[[SharedWatch], None], size: int) -> SharedWatch:
        """A watch with a queue of ``size`` events."""
        send, receive = anyio.create_memory_object_stream[SharedEvent](size)
        return cls(release, send, receive)

    def offer(self, event: SharedEvent) -> None:
        """Queue ``event``; a full queue turns into a sticky `ResyncRequiredError`."""
        if self.error is not None or self._closed:
            return
        try:
            self._send.send_nowait(event)
        except anyio.WouldBlock:
            self.fail(ResyncRequiredError("the watch queue overflowed: resynchronise"))

    def fail(self, error: ResyncRequiredError) -> None:
        """Make ``error`` sticky: every later read raises it."""
        if self.error is None:
            self.error = error
        self._send.close()

    def close(self) -> None:
        """End the stream (the reader closes); iteration stops."""
        if not self._closed:
            self._closed = True
            self._send.close()
            self._receive.close()
            self.release(self)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SharedEvent:
        if self.error is not None:
            raise self.error
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            if self.error is not None:
                raise self.error from None
            raise StopAsyncIteration from None
