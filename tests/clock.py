"""The tests' one fake clock: wall and monotonic time, each fixed or real, moved by the test."""

from __future__ import annotations

import time
from typing import Literal

__all__ = ["FakeClock", "Real"]

#: A clock that follows the real one (plus whatever the test moves it by).
Real = Literal["real"]


class FakeClock:
    """Wall (UTC Unix seconds) and monotonic time that move when the test moves them.

    Each of the two is either fixed at a number or ``"real"``: then it reads the real clock
    (`time.time`, `time.monotonic`) plus the seconds the test has moved it by. It implements
    `upstream.clock.Clock`; the bound method ``wall`` is a ``Callable[[], float]`` wall clock for
    the persistence backends.
    """

    def __init__(
        self, *, wall: float | Real = 1_800_000_000.0, monotonic: float | Real = 1000.0
    ) -> None:
        """Start at ``wall`` and ``monotonic`` (a number, or ``"real"``)."""
        self._real_wall = isinstance(wall, str)
        self._real_monotonic = isinstance(monotonic, str)
        self._wall = 0.0 if isinstance(wall, str) else float(wall)
        self._monotonic = 0.0 if isinstance(monotonic, str) else float(monotonic)

    def wall(self) -> float:
        """UTC time as Unix seconds."""
        return self._wall + (time.time() if self._real_wall else 0.0)

    def monotonic(self) -> float:
        """Seconds on the monotonic clock."""
        return self._monotonic + (time.monotonic() if self._real_monotonic else 0.0)

    def advance(self, seconds: float) -> None:
        """Time passes: both clocks move by ``seconds``.

        Moving the monotonic clock alone instead reads, to the time keeper, as a wall clock set
        back, which distrusts online sources.
        """
        self._wall += seconds
        self._monotonic += seconds

    def move_wall(self, seconds: float) -> None:
        """The wall clock alone jumps by ``seconds`` (negative: it is set back)."""
        self._wall += seconds

    def set_wall(self, now: float) -> None:
        """The wall clock alone is set to read ``now``."""
        self._wall = now - time.time() if self._real_wall else now

    def move_monotonic(self, seconds: float) -> None:
        """The monotonic clock alone moves on by ``seconds``."""
        self._monotonic += seconds
