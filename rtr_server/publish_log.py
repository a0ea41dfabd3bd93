"""`PublishLog`: a bounded ring of the most recent publishes (serial, time, counts, delta sizes)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from snapshot.publisher import PublishedState

#: Publishes kept by default (the dashboard shows them; /status lists them).
DEFAULT_KEEP = 32


@dataclass(frozen=True, slots=True)
class PublishRecord:
    """One publish: what was made current, when, and how much changed."""

    serial: int
    #: Wall time (Unix seconds) at which the state was handed to the server.
    wall: float
    #: Seconds the publish took (delta computation included).
    duration: float
    #: Record counts of the new state by kind (``vrp_v4``, ``vrp_v6``, ``router_key``, ``aspa``).
    counts: dict[str, int]
    #: Announcements and withdrawals by kind; None for the first state of a session.
    delta: dict[str, int] | None

    @property
    def delta_size(self) -> int | None:
        """Total records announced plus withdrawn (None for a first state)."""
        return None if self.delta is None else sum(self.delta.values())


class PublishLog:
    """The last ``keep`` publishes, oldest first."""

    def __init__(self, keep: int = DEFAULT_KEEP) -> None:
        """Start empty."""
        if keep < 1:
            raise ValueError("a publish log keeps at least one record")
        self._records: deque[PublishRecord] = deque(maxlen=keep)
        #: Every publish ever recorded (also those that fell out of the ring).
        self.total = 0

    def record(self, state: PublishedState, *, wall: float, duration: float) -> PublishRecord:
        """Remember the publish of ``state``."""
        delta = None if state.last_delta is None else state.last_delta.counts()
        entry = PublishRecord(state.serial.value, wall, duration, state.snapshot.counts(), delta)
        self._records.append(entry)
        self.total += 1
        return entry

    @property
    def last(self) -> PublishRecord | None:
        """The most recent publish, if any."""
        return self._records[-1] if self._records else None

    def __iter__(self) -> Iterator[PublishRecord]:
        return iter(tuple(self._records))

    def __len__(self) -> int:
        return len(self._records)
