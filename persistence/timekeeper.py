"""`TimeKeeper`: the process's effective UTC time (never moves back) and per-source clock anchors.

Contract (lifecycle contract, "时间与到期"):

* ``wall()`` and ``monotonic()`` are the raw samples of the injected `Clock`; ``now()`` is the
  *effective* UTC time: the larger of the raw wall clock and the highest effective time observed
  so far carried forward on the monotonic clock. It never moves back, whatever the wall clock
  does: a clock set back never extends a life, a clock set forward only ever ends lives early,
  and after a forward jump is undone the entries that expired stay expired.
* `observe` raises the lower bound (a recovered state's write time, a reader's header), which
  then advances with the monotonic clock like any other observation.
* An `Anchor` pins the raw wall clock and the monotonic clock at the moment a source's raw input
  was admitted; `Anchor.drift` is how far the wall clock has moved against the monotonic clock
  since. A drift beyond the tolerance makes an online source untrusted until new raw input is
  admitted (the caller's rule). Tolerance absorbs measurement noise; it never adds to a deadline.
* A `Pinned` time is an effective time someone else reached (a stored source's
  ``evaluated_at``) pinned to the local monotonic clock when it was first seen, so that it
  advances with it: a source's own time anchor in a reader. `TimeKeeper.pin` keeps an anchor
  when the same data comes again (raised by a later time, never moved back); `TimeKeeper.at`
  is the time to judge that source at: never earlier than ``now()`` nor than its own anchor.
* A frozen clock (``--reference-time``, `FixedWallClock`) is offline evaluation: ``now()`` is the
  reference time, nothing drifts and no floor moves.

Nothing here sleeps or does I/O; everything reads the injected clock only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from persistence.clock import Clock, FixedWallClock, SystemClock

__all__ = ["Anchor", "Pinned", "TimeKeeper", "as_keeper"]


@dataclass(frozen=True, slots=True)
class Anchor:
    """Raw wall and monotonic time sampled together when raw input was admitted."""

    wall: float
    mono: float

    def extrapolated(self, mono: float) -> float:
        """The wall time now, had the wall clock run like the monotonic clock since the anchor."""
        return self.wall + (mono - self.mono)

    def drift(self, wall: float, mono: float) -> float:
        """Seconds the wall clock moved against the monotonic clock since the anchor."""
        return wall - self.extrapolated(mono)


@dataclass(frozen=True, slots=True)
class Pinned:
    """An effective UTC time, pinned to the local monotonic clock: it advances with it."""

    at: float
    mono: float

    def carried(self, mono: float) -> float:
        """The pinned time carried forward to monotonic time ``mono``."""
        return self.at + (mono - self.mono)


class TimeKeeper:
    """The effective time of one process (or one shared reader), shared by all its sources.

    Args:
        clock: the raw UTC and monotonic samplers (tests inject a fake).
        tolerance: seconds of drift between the two clocks tolerated before a source's time
            state is distrusted (see `Anchor.drift`).
    """

    __slots__ = ("_floor_mono", "_floor_wall", "clock", "frozen", "tolerance")

    def __init__(self, clock: Clock, *, tolerance: float = 300.0) -> None:
        """Start with no observation: the first `now` is the raw wall clock."""
        if not tolerance > 0:
            raise ValueError("the clock tolerance must be positive")
        self.clock = clock
        self.tolerance = tolerance
        #: Offline evaluation at a fixed reference time (no drift, no floor).
        self.frozen = isinstance(clock, FixedWallClock)
        self._floor_wall = -math.inf
        self._floor_mono = clock.monotonic()

    # ------------------------------------------------------------------ the Clock protocol
    def wall(self) -> float:
        """The raw UTC wall clock (for checks of external times such as an export's build time)."""
        return self.clock.wall()

    def monotonic(self) -> float:
        """The raw monotonic clock."""
        return self.clock.monotonic()

    # ------------------------------------------------------------------ effective time
    def now(self) -> float:
        """The effective UTC time: never earlier than any earlier result (see the module doc)."""
        wall, mono = self.clock.wall(), self.clock.monotonic()
        if self.frozen:
            return wall
        carried = self._floor_wall + (mono - self._floor_mono)
        if wall >= carried:
            self._floor_wall, self._floor_mono = wall, mono
            return wall
        return carried

    def observe(self, when: float) -> None:
        """Raise the lower bound to ``when`` (UTC seconds) as of now; lower ones change nothing."""
        if self.frozen or math.isnan(when):
            return
        mono = self.clock.monotonic()
        if when > self._floor_wall + (mono - self._floor_mono):
            self._floor_wall, self._floor_mono = when, mono

    def pin(self, when: float, kept: Pinned | None = None) -> Pinned:
        """``when`` pinned now; ``kept`` instead if, carried to now, it is no earlier.

        So a later time for the same data raises its anchor and an earlier one never moves it
        back. Unlike `observe`, it raises no one else's time.
        """
        mono = self.clock.monotonic()
        if kept is not None and (math.isnan(when) or kept.carried(mono) >= when):
            return kept
        return Pinned(when, mono)

    def at(self, pinned: Pinned | None) -> float:
        """The time to judge data anchored at ``pinned`` at: ``now()``, or its carried anchor."""
        now = self.now()
        if pinned is None or self.frozen:
            return now
        return max(now, pinned.carried(self.clock.monotonic()))

    def anchor(self) -> Anchor:
        """The raw wall and monotonic clocks, sampled together now."""
        return Anchor(self.clock.wall(), self.clock.monotonic())

    def drift(self, anchor: Anchor) -> float:
        """How far the wall clock moved against the monotonic clock since ``anchor`` (0 frozen)."""
        if self.frozen:
            return 0.0
        return anchor.drift(self.clock.wall(), self.clock.monotonic())

    def untrusted(self, anchor: Anchor) -> bool:
        """True when the drift since ``anchor`` exceeds the tolerance."""
        return abs(self.drift(anchor)) > self.tolerance

    def behind(self, when: float) -> float:
        """Seconds the raw wall clock is behind ``when`` (negative: ahead of it)."""
        return when - self.clock.wall()


def as_keeper(clock: Clock | None, tolerance: float = 300.0) -> TimeKeeper:
    """``clock`` itself when it is a `TimeKeeper` (the shared one), else a keeper of its own."""
    if isinstance(clock, TimeKeeper):
        return clock
    return TimeKeeper(clock or SystemClock(), tolerance=tolerance)
