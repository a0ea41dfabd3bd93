"""What the router side of RTR tells its I/O layer: `ClientState` and the `ClientAction`s."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from snapshot.snapshot import Snapshot

__all__ = [
    "ClientAction",
    "ClientState",
    "Disconnect",
    "Downgrade",
    "PollAfter",
    "Publish",
    "Transmit",
]


class ClientState(enum.Enum):
    """Where a `ClientSession` is in its life."""

    #: No transport; `connection_made` starts one.
    DISCONNECTED = enum.auto()
    #: A Reset or Serial Query is out; a Cache Response, Cache Reset or Error Report is due.
    AWAITING_RESPONSE = enum.auto()
    #: Inside Cache Response … End of Data: payload PDUs are staged.
    RECEIVING = enum.auto()
    #: Between exchanges (in sync, or told No Data): waiting for the poll timer or a Notify.
    IDLE = enum.auto()
    #: A Disconnect was handed out; waiting for `connection_lost`.
    CLOSING = enum.auto()


@dataclass(frozen=True, slots=True)
class Transmit:
    """Write ``data`` (a query); the connection continues."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Publish:
    """This cache's complete data is now ``snapshot``.

    ``synced`` is True after an End of Data (the Expire countdown restarts), False when data was
    only trimmed (payload types a downgraded version lacks). ``changed`` is False when an End of
    Data left the data as it was.
    """

    snapshot: Snapshot
    synced: bool
    changed: bool = True


@dataclass(frozen=True, slots=True)
class PollAfter:
    """Call `ClientSession.poll` after ``delay`` seconds (Refresh, or Retry after No Data)."""

    delay: float
    reason: str
    #: True when the cache answered No Data Available (Error 2).
    no_data: bool = False


@dataclass(frozen=True, slots=True)
class Downgrade:
    """The session now speaks ``new`` instead of ``old`` (for the log)."""

    old: int
    new: int
    reason: str
    #: True when the cache sent the pre-standard ASPA layout: worth one warning.
    legacy_aspa: bool = False


@dataclass(frozen=True, slots=True)
class Disconnect:
    """Write ``data`` (an Error Report, or b""), then close the connection.

    ``drop_data``: the session dropped this cache's data (a fatal error); ``reconnect_now``:
    reconnect without a backoff (a version change), otherwise back off first;
    ``protocol_error``: the cache broke the protocol or a bound of this session (for the
    error class), which with ``drop_data`` False leaves the data of the last End of Data held.
    """

    reason: str
    data: bytes = b""
    drop_data: bool = False
    reconnect_now: bool = False
    protocol_error: bool = False


ClientAction = Transmit | Publish | PollAfter | Downgrade | Disconnect
