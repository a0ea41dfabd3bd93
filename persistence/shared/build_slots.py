"""`BuildSlots`: the shared reader's own bound on snapshot builds in managed threads.

Contract (persistence contract, shared reading, P-61/P-68): every build of a snapshot runs in
a worker thread admitted by one reader-owned `anyio.CapacityLimiter` of
`SharedReaderLimits.max_concurrent_builds` slots, never AnyIO's process-wide default limiter.
At most one build per purpose is admitted or waiting at a time: one database-header candidate
and one local-time calibration. With one slot a calibration waits until an admitted header
build's thread really ended. A build whose task is cancelled while its thread runs keeps its
slot until the thread returns (the thread is never abandoned), so neither cancel nor close
frees a slot a thread still holds.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import anyio

from persistence.shared.convert import judge_state
from persistence.state import PersistedState
from snapshot.kinds import PayloadKind
from snapshot.snapshot import Snapshot

__all__ = ["BuildPurpose", "BuildSlots", "Judge"]

#: What a build runs in its thread: the state judged at a time.
Judge = Callable[[PersistedState, float], tuple[Snapshot, dict[PayloadKind, float | None]]]


class BuildPurpose(enum.Enum):
    """Why a snapshot is built: at most one build of each is in flight."""

    HEADER = "header"
    CALIBRATION = "calibration"


class BuildSlots:
    """The reader-owned build slots and the builds in flight."""

    def __init__(self, slots: int, judge: Judge = judge_state) -> None:
        """``slots`` threads at most; nothing runs until `build` (no event loop needed)."""
        self.total = slots
        self._limiter = anyio.CapacityLimiter(slots)
        #: The pure conversion a build runs (tests put a gated one here).
        self.judge = judge
        self._in_flight: set[BuildPurpose] = set()

    @property
    def running(self) -> int:
        """Slots held now: each by a build whose thread has not returned yet."""
        return int(self._limiter.borrowed_tokens)

    @property
    def waiting(self) -> int:
        """Builds admitted for their purpose and waiting for a slot."""
        return int(self._limiter.statistics().tasks_waiting)

    def in_flight(self, purpose: BuildPurpose) -> bool:
        """Whether a build for ``purpose`` waits for a slot or runs."""
        return purpose in self._in_flight

    async def build(
        self, purpose: BuildPurpose, state: PersistedState, now: float
    ) -> tuple[Snapshot, dict[PayloadKind, float | None]]:
        """Judge ``state`` at ``now`` in a managed thread holding one slot.

        Cancelled while waiting for a slot, it leaves at once; cancelled while its thread
        runs, it returns (raising the cancellation) only after the thread ended, holding the
        slot until then.

        Raises:
            RuntimeError: a build for ``purpose`` is already in flight.
        """
        if purpose in self._in_flight:
            raise RuntimeError(f"a {purpose.value} build is already in flight")
        self._in_flight.add(purpose)
        try:
            return await anyio.to_thread.run_sync(
                self.judge, state, now, abandon_on_cancel=False, limiter=self._limiter
            )
        finally:
            self._in_flight.discard(purpose)
