"""Per-source status (state, last success, last error, counts) for logs, metrics and /status."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class SourceState(enum.Enum):
    """Where a source stands."""

    STARTING = "starting"
    #: The source file or URL does not exist yet (e.g. the validator's first run is not done).
    WAITING = "waiting"
    OK = "ok"
    #: The last attempt failed (rejected update or environment error); older data may serve.
    ERROR = "error"
    #: The source's own life ended (an RTR cache not synced within Expire): its data is gone.
    #: Distinct from OK with zero records, which is a complete but empty (or all-expired) set.
    EXPIRED = "expired"


@dataclass(slots=True)
class SourceStatus:
    """Mutable status of one source, updated only by that source's task."""

    name: str
    kind: str
    location: str
    state: SourceState = SourceState.STARTING
    last_success_wall: float | None = None
    last_error: str | None = None
    last_error_wall: float | None = None
    records: dict[str, int] = field(default_factory=dict)
    #: For sources that hold a connection (RTR): whether it is up now; None for pollers.
    connected: bool | None = None
    bytes_read: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    #: True once the first attempt (success, missing or failure) has finished.
    attempted: bool = False
    #: Successful contacts with the upstream, unchanged answers included (an HTTP 304, an End
    #: of Data with nothing new). Shows the source is alive; never extends any data's life.
    syncs: int = 0

    def failed(self, error_class: str, message: str, wall: float) -> None:
        """Record a failure of ``error_class`` (``format``, ``environment``, ...)."""
        if self.state is not SourceState.EXPIRED:  # expired stays expired until a new sync
            self.state = SourceState.ERROR
        self.last_error = message
        self.last_error_wall = wall
        self.errors[error_class] = self.errors.get(error_class, 0) + 1
        self.attempted = True
