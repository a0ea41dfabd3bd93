"""`SessionState`: where a `ServerSession` (the cache side of one RTR connection) is in its life."""

from __future__ import annotations

import enum

__all__ = ["SessionState"]


class SessionState(enum.Enum):
    """Where a `ServerSession` is in its life."""

    #: Fresh connection: no query yet, protocol version not negotiated.
    AWAITING_QUERY = enum.auto()
    #: Version negotiated; waiting for the next query.
    IDLE = enum.auto()
    #: A SendFull/SendDelta was handed out; the I/O layer is writing it.
    RESPONDING = enum.auto()
    #: A query came while there was no data (`Hold`); it is answered at the first data.
    HELD = enum.auto()
    #: Finished: a Close was handed out (or `goodbye` was called).
    CLOSED = enum.auto()
