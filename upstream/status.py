"""Per-source status (state, last success, last error, counts) for logs, metrics and /status.

Every change of ``state`` logs exactly one line (event ``source_state``: source, old and new
state, reason and error class), wherever in a source the assignment happens; assigning the
state a source is already in logs nothing, so a source polled in a steady state stays quiet.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


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


#: Why a source enters a state when no error explains it.
_REASONS = {
    SourceState.STARTING: "starting",
    SourceState.WAITING: "no data at the source yet",
    SourceState.OK: "data loaded or confirmed",
    SourceState.ERROR: "error",
    SourceState.EXPIRED: "no successful sync within the Expire interval",
}


@dataclass(slots=True)
class SourceStatus:
    """Mutable status of one source, updated only by that source's task."""

    name: str
    kind: str
    location: str
    state: SourceState = SourceState.STARTING
    last_success_wall: float | None = None
    last_error: str | None = None
    #: The class (``format``, ``environment``, ``connection``, ...) of ``last_error``.
    last_error_class: str | None = None
    last_error_wall: float | None = None
    records: dict[str, int] = field(default_factory=dict)
    #: For sources that hold a connection (RTR): whether it is up now; None for pollers.
    connected: bool | None = None
    #: For file sources: whether the export's directory is watched for changes (False: polling
    #: only, the watch could not be set up); None for other sources.
    watching: bool | None = None
    bytes_read: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    #: True once the first attempt (success, missing or failure) has finished.
    attempted: bool = False
    #: Successful contacts with the upstream, unchanged answers included (an HTTP 304, an End
    #: of Data with nothing new). Shows the source is alive; never extends any data's life.
    syncs: int = 0

    def __setattr__(self, name: str, value: object) -> None:
        """Assign; a change of ``state`` is logged (once per change, never per poll)."""
        if name != "state":
            object.__setattr__(self, name, value)
            return
        old = getattr(self, "state", None)  # unset while __init__ runs
        object.__setattr__(self, name, value)
        if old is not None and old is not value and isinstance(value, SourceState):
            self._log_change(old, value)

    def _log_change(self, old: SourceState, new: SourceState) -> None:
        error_class = self.last_error_class if new is SourceState.ERROR else None
        if new is SourceState.ERROR and self.last_error is not None:
            reason = self.last_error
        else:
            reason = _REASONS[new]
        bad = new in (SourceState.ERROR, SourceState.EXPIRED)
        log.log(
            logging.WARNING if bad else logging.INFO,
            "source %s: %s -> %s (%s%s)",
            self.name,
            old.value,
            new.value,
            f"{error_class} error: " if error_class else "",
            reason,
            extra={
                "event": "source_state",
                "source": self.name,
                "kind": self.kind,
                "old": old.value,
                "new": new.value,
                "reason": reason,
                "error_class": error_class,
            },
        )

    def failed(self, error_class: str, message: str, wall: float) -> None:
        """Record a failure of ``error_class`` (``format``, ``environment``, ...)."""
        # The error first: the state change below is logged with it.
        self.last_error = message
        self.last_error_class = error_class
        self.last_error_wall = wall
        self.errors[error_class] = self.errors.get(error_class, 0) + 1
        self.attempted = True
        if self.state is not SourceState.EXPIRED:  # expired stays expired until a new sync
            self.state = SourceState.ERROR
