"""`AppView`: what the HTTP layer reads of the running process, as a Protocol.

`HttpApi`, the collectors and the views of `rtr_server.http.observe` depend on this only, never
on `rtr_server.app.App` (which implements it): the HTTP layer imports nothing of the
composition root.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from rtr_protocol.session import ServerSession
from rtr_server.admission import Admission
from rtr_server.publish_log import PublishLog
from rtr_server.serving import ConnectionStats, ServerStats
from rtr_server.settings import ServerSettings
from snapshot.publisher import PublishedState

__all__ = [
    "KINDS",
    "SOURCE_STATES",
    "AppView",
    "ConnectionView",
    "GroupView",
    "Persister",
    "PersisterStatus",
    "ServerView",
    "SourceView",
    "WallClock",
]

#: The values of upstream.status.SourceState, in the order metrics list them.
SOURCE_STATES = ("starting", "waiting", "ok", "error", "expired")
#: Payload kinds in the order they are shown.
KINDS = ("vrp", "aspa", "router_key")


class PersisterStatus(Protocol):
    """What the persistence layer reports (see `persistence.persister.PersisterStatus`)."""

    @property
    def backend(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def last_persisted_id(self) -> str | None: ...
    @property
    def last_commit_wall(self) -> float | None: ...
    @property
    def commits(self) -> int: ...
    @property
    def failures(self) -> int: ...
    @property
    def last_error(self) -> str | None: ...
    @property
    def stopped(self) -> bool: ...
    @property
    def error_code(self) -> str | None: ...
    @property
    def error_details(self) -> dict[str, str] | None: ...


class Persister(Protocol):
    """The persistence worker, when state is saved."""

    @property
    def status(self) -> PersisterStatus: ...


class ConnectionView(Protocol):
    """One router connection: its peer, its session state machine and its counters."""

    @property
    def peer(self) -> str: ...
    @property
    def session(self) -> ServerSession: ...
    @property
    def stats(self) -> ConnectionStats: ...


class ServerView(Protocol):
    """The RTR server: what it serves, its settings, counters and connections."""

    @property
    def state(self) -> PublishedState | None: ...
    @property
    def settings(self) -> ServerSettings: ...
    @property
    def stats(self) -> ServerStats: ...
    @property
    def connections(self) -> Collection[ConnectionView]: ...
    @property
    def admission(self) -> Admission: ...


class WallClock(Protocol):
    """The process's wall clock (Unix seconds)."""

    def wall(self) -> float: ...


@dataclass(frozen=True, slots=True)
class SourceView:
    """One source as configured and as it stands."""

    name: str
    kind: str
    location: str
    group: str
    state: str
    #: RTR sources: whether the connection is up; None for pollers.
    connected: bool | None
    last_success_wall: float | None
    last_error: str | None
    last_error_wall: float | None
    records: dict[str, int]
    bytes_read: int
    errors: dict[str, int]
    syncs: int
    #: File sources: whether the export's directory is watched (False: polling only).
    watching: bool | None = None


@dataclass(frozen=True, slots=True)
class GroupView:
    """One group: its priority, whether it runs, and the kinds it is active for."""

    name: str
    priority: int
    started: bool
    active_for: tuple[str, ...]
    sources: tuple[str, ...]


class AppView(Protocol):
    """The running process as the HTTP layer sees it (read in the event loop thread)."""

    @property
    def clock(self) -> WallClock:
        """The wall clock every view is taken at."""
        ...

    @property
    def state(self) -> PublishedState | None:
        """The state routers are served (None before the first publish)."""
        ...

    @property
    def server(self) -> ServerView:
        """The RTR server (its sessions and counters)."""
        ...

    @property
    def publishes(self) -> PublishLog:
        """The most recent publishes."""
        ...

    @property
    def persister(self) -> Persister | None:
        """The persistence worker; None when state is kept in memory only."""
        ...

    @property
    def persistence_close_error(self) -> str | None:
        """Why closing the state store failed; None: it closed, or not yet."""
        ...

    def source_views(self) -> tuple[SourceView, ...]:
        """Every configured source with its status (none for a state follower)."""
        ...

    def group_views(self) -> tuple[GroupView, ...]:
        """Every group in priority order (none for a state follower)."""
        ...

    def active_groups(self) -> dict[str, str | None]:
        """The active group per payload kind (None: no group is ready for it)."""
        ...

    def usable_until(self) -> float | None:
        """Until when the client's current snapshot is exact (None: no limit or none)."""
        ...
