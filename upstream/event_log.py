"""`EventLog`: the client's last published events, bounded; a resume from a lost window is a resync.

The client appends each event at the same step (no await) that offers it to the subscribers,
so the log and every watch see one sequence. `after` gives the events following an event id,
or raises `ResyncRequiredError` when that id is of another publish epoch, or older than the
log's window (events after it were evicted), or not published yet.
"""

from __future__ import annotations

from collections import deque

from snapshot.queries import ResyncRequiredError
from upstream.events import Event, EventId

__all__ = ["DEFAULT_EVENT_LOG_SIZE", "EventLog"]

#: Events the client keeps by default.
DEFAULT_EVENT_LOG_SIZE = 1024


class EventLog:
    """The last ``limit`` events of one publish epoch, oldest first."""

    def __init__(self, epoch: int, limit: int = DEFAULT_EVENT_LOG_SIZE) -> None:
        """An empty log for events of ``epoch``."""
        if limit < 1:
            raise ValueError("an event log keeps at least one event")
        self.epoch = epoch
        self.limit = limit
        self._events: deque[Event] = deque(maxlen=limit)
        #: The sequence of the last event appended (0: none yet).
        self.last_sequence = 0

    def __len__(self) -> int:
        return len(self._events)

    def append(self, event: Event) -> None:
        """Keep ``event`` (the oldest one drops out once the log is full)."""
        if event.event_id.epoch != self.epoch:
            raise ValueError("an event of another publish epoch")
        if event.event_id.sequence <= self.last_sequence:
            raise ValueError("event sequence numbers must increase")
        self._events.append(event)
        self.last_sequence = event.event_id.sequence

    @property
    def first_sequence(self) -> int:
        """The oldest kept event's sequence (the next one's when the log is empty)."""
        return self._events[0].event_id.sequence if self._events else self.last_sequence + 1

    def after(self, event_id: EventId) -> tuple[Event, ...]:
        """Every event published after ``event_id``, in order.

        Raises:
            ResyncRequiredError: ``event_id`` is of another epoch, was never published, or
                events after it are no longer kept.
        """
        if event_id.epoch != self.epoch:
            raise ResyncRequiredError("the publish epoch changed")
        if event_id.sequence > self.last_sequence:
            raise ResyncRequiredError(f"event {event_id.sequence} was never published")
        if event_id.sequence + 1 < self.first_sequence:
            raise ResyncRequiredError("the event window was lost")
        return tuple(e for e in self._events if e.event_id.sequence > event_id.sequence)
