"""`ReplyProgress`: the time rules one RTR reply must meet (pure: callers pass times and sizes)."""

# An RTR reply runs from our query to its End of Data (or No Data). Three rules bound it; the
# I/O layer feeds the octets it receives and the event loop's time, and ends the connection on
# the first `Violation`:
#
# - stall: no octet at all for ``stall`` seconds, counted from the query and from every octet
#   received (a query left unanswered, or a reply that stops);
# - rate: once the first octet has come, every ``window`` seconds of the reply must bring at
#   least ``min_rate`` × ``window`` octets (a sliding window in 32 buckets, lenient by at most
#   one bucket); this drops a drip (one octet a second) about ``window`` seconds in;
# - deadline: the whole reply must be complete ``deadline`` seconds after the query (a cache
#   that streams fast enough but never reaches End of Data).

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

__all__ = ["BUCKETS", "ReplyProgress", "ResponseTimeoutError", "Violation"]

#: Buckets per rate window: the window slides in steps of ``window / BUCKETS``.
BUCKETS = 32


@dataclass(frozen=True, slots=True)
class Violation:
    """A rule the reply broke: ``rule`` is ``stall``, ``rate`` or ``deadline``."""

    rule: str
    message: str
    #: True when not one octet of the reply had come.
    unanswered: bool = False


class ResponseTimeoutError(Exception):
    """Raised when a reply breaks a rule of `ReplyProgress` (stall, rate, deadline)."""

    def __init__(self, violation: Violation) -> None:
        super().__init__(violation.message)
        self.violation = violation


class ReplyProgress:
    """Tracks one reply at a time against the stall, rate and deadline rules.

    Args:
        stall: seconds without any octet that end a reply (> 0).
        window: seconds over which ``min_rate`` is averaged (> 0).
        min_rate: octets per second a reply must bring once under way (>= 0; 0 turns the
            rate rule off).
        deadline: seconds from the query by which the reply must be complete (> 0).

    Raises:
        ValueError: for a value outside those ranges.
    """

    __slots__ = (
        "_buckets",
        "_first",
        "_last",
        "_started",
        "_step",
        "deadline",
        "min_rate",
        "received_total",
        "stall",
        "window",
    )

    def __init__(self, *, stall: float, window: float, min_rate: float, deadline: float) -> None:
        """Configure; no reply is tracked until `start`."""
        if not (stall > 0 and window > 0 and deadline > 0 and min_rate >= 0):
            raise ValueError("need stall, window and deadline > 0 and min_rate >= 0")
        self.stall = stall
        self.window = window
        self.min_rate = min_rate
        self.deadline = deadline
        self._step = window / BUCKETS
        self._started: float | None = None
        self._first: float | None = None
        self._last = 0.0
        #: (bucket index counted from the first octet, octets in it), oldest first.
        self._buckets: deque[list[int]] = deque()
        #: Octets of the current reply so far.
        self.received_total = 0

    @property
    def active(self) -> bool:
        """True while a reply is tracked (between `start` and `stop`)."""
        return self._started is not None

    def start(self, now: float) -> None:
        """A query went out at ``now``: track its reply (any earlier one is forgotten)."""
        self._started = self._last = now
        self._first = None
        self._buckets.clear()
        self.received_total = 0

    def stop(self) -> None:
        """The reply is complete (or the session no longer waits for one)."""
        self._started = self._first = None
        self._buckets.clear()

    def received(self, octets: int, now: float) -> None:
        """``octets`` arrived at ``now`` (ignored while no reply is tracked)."""
        if self._started is None or octets <= 0:
            return
        if self._first is None:
            self._first = now
        self._last = now
        self.received_total += octets
        index = self._index(now)
        buckets = self._buckets
        if buckets and buckets[-1][0] == index:
            buckets[-1][1] += octets
        else:
            buckets.append([index, octets])
        while buckets[0][0] < index - BUCKETS:
            buckets.popleft()

    def in_window(self, now: float) -> int:
        """Octets counted in the rate window that ends at ``now``."""
        if self._first is None:
            return 0
        oldest = self._index(now - self.window)
        return sum(octets for index, octets in self._buckets if index >= oldest)

    def violation(self, now: float) -> Violation | None:
        """The first rule the tracked reply breaks at ``now``; None when it is on time."""
        started = self._started
        if started is None:
            return None
        if now - self._last >= self.stall:
            if self._first is None:
                return Violation(
                    "stall", f"left a query unanswered for {self.stall:g} s", unanswered=True
                )
            return Violation("stall", f"sent nothing for {self.stall:g} s inside a reply")
        if now - started >= self.deadline:
            return Violation(
                "deadline", f"did not complete a reply within {self.deadline:g} s of the query"
            )
        first = self._first
        if self.min_rate and first is not None and now - first >= self.window:
            need = self.min_rate * self.window
            if self.in_window(now) < need:
                return Violation(
                    "rate",
                    f"sent less than {need:.0f} octets in {self.window:g} s inside a reply "
                    f"(minimum {self.min_rate:g} octets/s)",
                )
        return None

    def next_check(self, now: float) -> float:
        """When `violation` could next change its answer if no octet arrives (inf: never)."""
        started = self._started
        if started is None:
            return math.inf
        at = min(self._last + self.stall, started + self.deadline)
        first = self._first
        if self.min_rate and first is not None:
            at = min(at, max(first + self.window, now + self._step))
        return at

    def _index(self, t: float) -> int:
        assert self._first is not None
        return math.floor((t - self._first) / self._step)
