"""`BuildSlots`: the shared reader's own bound on snapshot builds in managed threads.

Contract (persistence contract, shared reading, P-61/P-68): every build of a snapshot runs in
a worker thread admitted by one reader-owned `anyio.CapacityLimiter` of
`SharedReaderLimits.max_concurrent_builds` slots, never AnyIO's process-wide default limiter.
At most one build per purpose is admitted or waiting at a time: one database-header candidate
and one local-time calibration (a re-judging of the held state: expiry, trust, the reader's
SLURM policy). A header's costly preparation (its sources' digests) runs in a slot under the
same rule (`run`). With one slot a calibration waits until an admitted header
build's thread really ended. A build whose task is cancelled while its thread runs keeps its
slot until the thread returns (the thread is never abandoned), so neither cancel nor close
frees a slot a thread still holds.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

import anyio

from persistence.shared import convert
from persistence.state import PersistedState
from snapshot.kinds import PayloadKind
from snapshot.slurm import SlurmPolicy
from snapshot.snapshot import Snapshot

__all__ = ["BuildPurpose", "BuildSlots", "Judge", "Judged"]

T = TypeVar("T")
#: What a build gives: the snapshot, each kind's usable-until time, the ASPA families.
Judged = tuple[Snapshot, dict[PayloadKind, float | None], convert.AspaFamilies]


class Judge(Protocol):
    """What a build runs in its thread: the state judged at a time (`convert.judge_state`)."""

    def __call__(
        self,
        state: PersistedState,
        now: float,
        *,
        own: Mapping[str, float] | None = None,
        policy: SlurmPolicy | None = None,
    ) -> tuple[Snapshot, dict[PayloadKind, float | None]]:
        """The snapshot of ``state`` at ``now`` and each kind's usable-until time."""
        ...


class BuildPurpose(enum.Enum):
    """Why a snapshot is built: at most one build of each is in flight."""

    HEADER = "header"
    CALIBRATION = "calibration"


class BuildSlots:
    """The reader-owned build slots and the builds in flight."""

    def __init__(self, slots: int, judge: Judge | None = None) -> None:
        """``slots`` threads at most; nothing runs until `build` (no event loop needed)."""
        self.total = slots
        self._limiter = anyio.CapacityLimiter(slots)
        #: The pure conversion a build runs (tests put a gated one here).
        self.judge: Judge = judge or convert.judge_state
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
        self,
        purpose: BuildPurpose,
        state: PersistedState,
        now: float,
        *,
        own: Mapping[str, float] | None = None,
        policy: SlurmPolicy | None = None,
    ) -> Judged:
        """Judge ``state`` at ``now`` (sources at ``own``, under ``policy``) in a slot.

        The snapshot, each kind's usable-until time and each ASPA family judged on its own.
        """

        def job() -> Judged:
            snapshot, until = self.judge(state, now, own=own, policy=policy)
            return snapshot, until, convert.judge_families(state, now, own=own)

        return await self.run(purpose, job)

    async def run(self, purpose: BuildPurpose, job: Callable[[], T]) -> T:
        """Run ``job`` for ``purpose`` in a managed thread holding one slot.

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
                job, abandon_on_cancel=False, limiter=self._limiter
            )
        finally:
            self._in_flight.discard(purpose)
