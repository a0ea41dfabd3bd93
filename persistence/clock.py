"""The one injectable clock every time-dependent decision reads (rtr-serve, the shared reader).

``wall()`` is UTC Unix seconds (for absolute ``expires`` times); ``monotonic()`` never jumps (for
intervals and remaining life). Tests pass a fake; ``--reference-time`` uses `FixedWallClock`.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "FixedWallClock", "SystemClock"]


class Clock(Protocol):
    """Source of wall-clock and monotonic time."""

    def wall(self) -> float:
        """UTC time as Unix seconds."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards."""
        ...


class SystemClock:
    """The real clocks."""

    def wall(self) -> float:
        """`time.time`."""
        return time.time()

    def monotonic(self) -> float:
        """`time.monotonic`."""
        return time.monotonic()


class FixedWallClock:
    """Wall time frozen at a reference instant (to evaluate old exports); monotonic is real."""

    #: Wall time stands still on purpose: entry expiry is judged at ``reference`` only.
    frozen = True

    def __init__(self, reference: float) -> None:
        """Freeze wall time at ``reference`` (Unix seconds)."""
        self.reference = reference

    def wall(self) -> float:
        """Always the reference time."""
        return self.reference

    def monotonic(self) -> float:
        """`time.monotonic`."""
        return time.monotonic()
