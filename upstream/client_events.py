"""`EventHub`: one client's subscriptions — its watches, the bounded event log, the event ids.

Every event goes to the log and to every watch in one step without an await (one commit
record), then wakes the client's waiters. Snapshot and status events share one sequence per
epoch; status events also count their own. A status identical to the last one sent is no event.
"""

from __future__ import annotations

from collections.abc import Callable

from upstream.event_diff import (
    DEFAULT_EVENT_SIZE_LIMIT,
    Changes,
    snapshot_event,
    status_changes,
    status_key,
)
from upstream.event_log import DEFAULT_EVENT_LOG_SIZE, EventLog
from upstream.events import (
    ClientSnapshot,
    ClientStatus,
    Event,
    EventId,
    ResyncRequiredError,
    StatusEvent,
    Watch,
)

__all__ = ["EventHub"]


class EventHub:
    """The watches, event log and event sequence of one client epoch."""

    def __init__(self, epoch: int, wake: Callable[[], None]) -> None:
        """Events of ``epoch``; ``wake`` is called after each event was sent."""
        self.epoch = epoch
        self._wake = wake
        #: Changes per kind beyond which a `SnapshotEvent` asks for a full revalidation.
        self.size_limit = DEFAULT_EVENT_SIZE_LIMIT
        #: Events the log keeps (`Client.watch` ``after=`` resumes within them); read when
        #: the log is first written.
        self.log_size = DEFAULT_EVENT_LOG_SIZE
        #: The last event's sequence number (snapshot and status events share it).
        self.sequence = 0
        #: The number of status events sent.
        self.status_sequence = 0
        self.watches: set[Watch] = set()
        self._log: EventLog | None = None
        self._last_status: ClientStatus | None = None
        self._last_status_key: object = None

    @property
    def log(self) -> EventLog:
        """The last `log_size` events."""
        if self._log is None:
            self._log = EventLog(self.epoch, self.log_size)
        return self._log

    def subscribe(
        self,
        max_queue: int,
        after: EventId | None,
        current: ClientSnapshot | None,
        status: ClientStatus,
        *,
        ended: bool,
    ) -> Watch:
        """A new watch of ``current`` and ``status`` (the caller took both without an await).

        Already ended when ``ended``.
        """
        watch = Watch(self.watches.discard, self.epoch, max_queue, current, status)
        if ended:
            watch.end()
            return watch
        if after is not None:
            try:
                missed = self.log.after(after)
            except ResyncRequiredError as exc:
                watch.fail(exc)
                return watch
            for event in missed:
                watch.offer(event)
        self.watches.add(watch)
        return watch

    def snapshot(
        self, before: ClientSnapshot | None, current: ClientSnapshot, changes: Changes
    ) -> None:
        """Send the `SnapshotEvent` of ``before`` → ``current``."""
        self.sequence += 1
        self._send(snapshot_event(EventId(self.epoch, self.sequence), before, current, changes))

    def status(self, status: ClientStatus, current: ClientSnapshot | None, *, send: bool) -> None:
        """Note ``status``; unless it equals the last one, send its `StatusEvent` if ``send``."""
        key = status_key(status)
        if key == self._last_status_key:
            return
        before, self._last_status_key, self._last_status = self._last_status, key, status
        if not send:
            return
        self.sequence += 1
        self.status_sequence += 1
        self._send(
            StatusEvent(
                EventId(self.epoch, self.sequence),
                status,
                None if current is None else current.id,
                status_changes(before, status),
                self.status_sequence,
            )
        )

    def end(self) -> None:
        """End every watch normally (a gap before the end still raises a resync)."""
        for watch in list(self.watches):
            watch.end()

    def _send(self, event: Event) -> None:
        self.log.append(event)  # one commit record: the log and every watch, no await
        for watch in list(self.watches):
            watch.offer(event)
        self._wake()
