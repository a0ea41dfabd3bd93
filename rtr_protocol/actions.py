"""What a `ServerSession` tells its I/O layer to do: typed actions, each carrying its facts.

The I/O layer never looks inside the bytes: a reply says what it is (`SendFull`, `SendDelta`,
`SendCacheReset`, `SendError` with its code), and `Close` says why the session ended as one of
the bounded `CloseReason` values (stats and metric labels) plus a free-text detail (logs).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rtr_protocol.constants import ErrorCode
from snapshot import Serial

if TYPE_CHECKING:
    from snapshot import Delta, PublishedState

__all__ = [
    "Action",
    "Close",
    "CloseReason",
    "Hold",
    "SendCacheReset",
    "SendDelta",
    "SendError",
    "SendFull",
]


class CloseReason(enum.Enum):
    """Why a router session ended; the value is the metric label."""

    #: The router closed its side.
    PEER_CLOSED = "peer_closed"
    #: No query within the query timeout (I/O layer).
    QUERY_TIMEOUT = "query_timeout"
    #: The router accepted no bytes within the write timeout (I/O layer).
    WRITE_STALLED = "write_stalled"
    #: The transport failed under us (reset, TLS alert; I/O layer).
    CONNECTION_LOST = "connection_lost"
    #: We shut down (Cache Restart / Cache Shutdown sent where the version has them).
    SHUTDOWN = "shutdown"
    #: Closed before its first query to make way for a newcomer at a connection cap (I/O layer).
    EVICTED = "evicted"
    #: The router sent an Error Report (which is never answered).
    ROUTER_ERROR = "router_error"
    #: The router broke the protocol; we closed, with an Error Report where one exists.
    PROTOCOL_ERROR = "protocol_error"
    #: Closed at the first publish so a v0 router that got No Data redials (it may ignore a
    #: Serial Notify for serial 0 while its own serial is 0, as GoBGP 3.10 does).
    REDIAL = "redial"
    #: Handed to the re-executed server (``kill -USR2``; I/O layer): still open for the router.
    HANDED_OVER = "handed_over"
    #: Not known (yet): the session has not ended.
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class SendFull:
    """Write the full reply (Cache Response, all payload, End of Data) for ``state``."""

    version: int
    state: PublishedState

    @property
    def session_id(self) -> int:
        """The session id of ``version``, sent in Cache Response and End of Data."""
        return self.state.session_ids.for_version(self.version)


@dataclass(frozen=True, slots=True)
class SendDelta:
    """Write the incremental reply from ``from_serial`` to ``state.serial`` (may be empty)."""

    version: int
    state: PublishedState
    from_serial: Serial
    delta: Delta
    #: The other session id a query named when it was sent before it could read our previous
    #: answer (`rtr_protocol.session_pipelined`); None for every ordinary Serial Query.
    named_session: int | None = None

    @property
    def session_id(self) -> int:
        """The session id of ``version``, sent in Cache Response and End of Data."""
        return self.state.session_ids.for_version(self.version)


@dataclass(frozen=True, slots=True)
class SendCacheReset:
    """Write a Cache Reset (``data``): the router's serial cannot be served incrementally."""

    version: int
    data: bytes


@dataclass(frozen=True, slots=True)
class SendError:
    """Write the Error Report ``data`` of ``code``; the session continues (e.g. No Data)."""

    code: ErrorCode
    data: bytes


@dataclass(frozen=True, slots=True)
class Hold:
    """A query arrived while there is no data: nothing to write yet.

    The session is HELD. The I/O layer answers it at the first publish (`next_action` with a
    state) or, when its hold time runs out first, with `ServerSession.hold_expired`.
    """

    version: int
    #: The held query is a Serial Query (else a Reset Query).
    serial_query: bool


@dataclass(frozen=True, slots=True)
class Close:
    """Write ``data`` (an Error Report of ``error``, or nothing), then close the connection."""

    reason: CloseReason
    detail: str
    data: bytes = b""
    #: The code of the Error Report in ``data`` (None when ``data`` is empty).
    error: ErrorCode | None = None


Action = SendFull | SendDelta | SendCacheReset | SendError | Hold | Close
