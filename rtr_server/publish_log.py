"""`PublishLog`: a bounded ring of the most recent publishes, and `log_publish`, their log line."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from snapshot.publisher import PublishedState

log = logging.getLogger("rtr_server.app")  # the publish line keeps its logger name

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


def log_publish(state: PublishedState, duration: float) -> None:
    """The one line per publish (event ``publish``): serial, counts, delta, duration."""
    counts = state.snapshot.counts()
    text = ", ".join(f"{k}={v}" for k, v in counts.items())
    ids = state.session_ids
    fields: dict[str, object] = {
        "event": "publish",
        "serial": state.serial.value,
        "session_ids": {"v0": ids.v0, "v1": ids.v1, "v2": ids.v2},
        "counts": counts,
        "duration_s": round(duration, 3),
    }
    if state.last_delta is None:
        fields.update(delta=None, delta_size=None)
        log.info(
            "published serial %s (session ids v0/v1/v2 %d/%d/%d): %s (%.2f s)",
            state.serial,
            ids.v0,
            ids.v1,
            ids.v2,
            text,
            duration,
            extra=fields,
        )
        return
    delta = state.last_delta.counts()
    size = sum(delta.values())
    fields.update(delta=delta, delta_size=size)
    log.info(
        "published serial %s: %s; delta of %d changes: %s (%.2f s)",
        state.serial,
        text,
        size,
        ", ".join(f"{k}={v}" for k, v in delta.items() if v),
        duration,
        extra=fields,
    )
