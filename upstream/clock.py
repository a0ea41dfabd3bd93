"""The injectable clock, re-exported from `persistence.clock` (the shared reader reads it too).

It lives below upstream because persistence (the shared reader) never imports upstream.
"""

from persistence.clock import Clock, FixedWallClock, SystemClock

__all__ = ["Clock", "FixedWallClock", "SystemClock"]
