"""The shared reader's time and trust: its effective time, each source's own anchor, refusal.

Contract (lifecycle contract, "时间与到期"; persistence contract, shared reading):

* Entries are judged at the reader's own effective time (`TimeKeeper.now`): never earlier than
  any time it has seen, nor than the write and observed times of a state it trusts, carried
  forward on its monotonic clock. A wall clock set back revives nothing; after a forward jump
  is undone, what expired stays expired.
* Each source also has its own anchor: its stored ``evaluated_at``, pinned to the monotonic
  clock when its representation (`SourceRecord.content_digest`) was first read
  (`TimeKeeper.pin`); the same representation in a later state keeps it (a later
  ``evaluated_at`` raises it, none moves it back); a source that leaves the state loses it (the
  floor above stays). A source is judged at the larger of the effective time and its own anchor,
  never at another source's.
* Trust: a state whose write time is ahead of the raw wall clock by more than the clock
  tolerance is refused (nothing of it is served); a refused state does not raise the floor.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from persistence.clock import Clock
from persistence.shared.convert import floor_of, owner_policy
from persistence.state import US_PER_SECOND, PersistedState, StateHeader
from persistence.state_binary import source_digest
from persistence.timekeeper import Pinned, TimeKeeper
from snapshot.slurm import SlurmPolicy

__all__ = ["ReaderTime", "WallClock", "digests_of", "prepare"]


class WallClock:
    """A `Clock` of a wall-clock callable and the real monotonic clock."""

    def __init__(self, wall: Callable[[], float]) -> None:
        """Read the wall clock from ``wall``."""
        self._wall = wall

    def wall(self) -> float:
        """The given wall clock."""
        return self._wall()

    def monotonic(self) -> float:
        """`time.monotonic`."""
        return time.monotonic()


def digests_of(state: PersistedState) -> dict[str, bytes]:
    """Each selected source's representation (the costly part, once per state read)."""
    return {r.name: source_digest(r) for r in state.sources if r.selected}


def prepare(state: PersistedState, *, owner: bool) -> tuple[dict[str, bytes], SlurmPolicy | None]:
    """Once per state read (in a build slot): `digests_of` and, if ``owner``, the owner's policy.

    Raises:
        SlurmError: the owner's stored policy cannot be read.
    """
    return digests_of(state), owner_policy(state) if owner else None


class ReaderTime:
    """The effective time of one reader, its sources' anchors and the clock tolerance."""

    def __init__(self, clock: Clock, tolerance: float) -> None:
        """Keep time by ``clock``; refuse states written more than ``tolerance`` s ahead."""
        self.keeper = TimeKeeper(clock, tolerance=tolerance)
        self._anchors: dict[str, tuple[bytes, Pinned]] = {}

    @property
    def tolerance(self) -> float:
        """The clock tolerance (seconds)."""
        return self.keeper.tolerance

    def now(self) -> float:
        """The effective time (it never moves back)."""
        return self.keeper.now()

    def wall(self) -> float:
        """The raw wall clock."""
        return self.keeper.wall()

    def ahead(self, header: StateHeader) -> float:
        """Seconds the state's write time is ahead of the raw wall clock (negative: behind)."""
        return self.keeper.behind(header.written_at / US_PER_SECOND)

    def refused(self, header: StateHeader) -> bool:
        """Whether the state is refused: written ahead of the wall clock beyond the tolerance."""
        return self.ahead(header) > self.keeper.tolerance

    def judging(
        self, header: StateHeader, state: PersistedState, digests: Mapping[str, bytes]
    ) -> tuple[float, dict[str, float]]:
        """For a trusted state: raise the floor, pin each source; the time now and theirs."""
        self.keeper.observe(floor_of(header, state))
        anchors: dict[str, tuple[bytes, Pinned]] = {}
        for record in state.sources:
            content = digests.get(record.name)
            if content is None:
                continue  # selected for no kind: not served
            kept = self._anchors.get(record.name)
            same = kept[1] if kept is not None and kept[0] == content else None
            evaluated = record.evaluated_at / US_PER_SECOND
            anchors[record.name] = (content, self.keeper.pin(evaluated, same))
        self._anchors = anchors
        own = {name: self.keeper.at(pinned) for name, (_, pinned) in anchors.items()}
        return self.keeper.now(), own
