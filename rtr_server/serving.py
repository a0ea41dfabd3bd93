"""What a router connection needs from its server: settings, the current state, shared replies.

`RtrConnection` depends on this `ServingContext` Protocol only (never on `RtrServer`), and
counts into the server-wide `ServerStats` it exposes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from rtr_protocol import CloseReason, Hold, SendDelta, SendFull
from rtr_server.settings import ServerSettings
from snapshot.publisher import PublishedState

__all__ = [
    "SSH_REFUSALS",
    "TRANSPORTS",
    "ConnectionStats",
    "HeldAnswer",
    "ServerStats",
    "ServingContext",
]

#: The transports a session can come over (`ServerStats.accepted_by_transport`).
TRANSPORTS = ("tcp", "tls", "ssh")
#: Why an SSH connection ended without a session (`ServerStats.ssh_refusals`; see rtr_server.ssh).
SSH_REFUSALS = (
    "login_timeout",
    "auth_failed",
    "user_not_allowed",
    "no_login",
    "no_session",
    "bad_channel",
)


class HeldAnswer(NamedTuple):
    """Where the time of an answer to a held query went (seconds; for the log)."""

    #: From the query to the first data.
    held: float
    #: Encoding the shared reply, or waiting for the session that encodes it.
    encoded: float
    #: Writing it: as fast as the router reads.
    written: float


@dataclass(slots=True)
class ConnectionStats:
    """What one connection did; logged at close and summed by the server."""

    bytes_sent: int = 0
    bytes_received: int = 0
    reset_queries: int = 0
    serial_queries: int = 0
    notifies: int = 0
    errors_sent: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True)
class ServerStats:
    """Server-wide counters (exposed by the operations layer)."""

    #: Connections that got an RTR session (on TLS listeners: after the handshake).
    accepted: int = 0
    rejected_max_connections: int = 0
    rejected_max_per_ip: int = 0
    #: Closed at accept: the address is outside the listener's allowed networks.
    rejected_not_allowed: int = 0
    #: The same, by listener (bound ``HOST:PORT``).
    rejected_not_allowed_by_listener: Counter[str] = field(default_factory=Counter)
    #: TLS routers refused: handshake timeout, failed handshake (e.g. no or untrusted
    #: certificate), certificate without the router's address (8210bis §9.2).
    tls_handshake_timeouts: int = 0
    tls_handshake_failures: int = 0
    rejected_tls_ip_mismatch: int = 0
    #: Sessions by transport (``tcp``, ``tls``, ``ssh``).
    accepted_by_transport: Counter[str] = field(default_factory=Counter)
    #: SSH connections closed without a session, by reason (`SSH_REFUSALS`).
    ssh_refusals: Counter[str] = field(default_factory=Counter)
    accept_errors: int = 0
    reset_queries: int = 0
    serial_queries: int = 0
    cache_resets: int = 0
    notifies: int = 0
    notify_rounds: int = 0
    #: Queries that arrived before the first data and were held (`--arrival-hold`).
    held_queries: int = 0
    #: Held queries answered with No Data Available because the hold time ran out.
    hold_timeouts: int = 0
    bytes_sent: int = 0
    errors_sent: dict[int, int] = field(default_factory=dict)
    #: Closed router sessions by why they ended.
    disconnects: Counter[CloseReason] = field(default_factory=Counter)


class ServingContext(Protocol):
    """The server as its connections see it."""

    @property
    def settings(self) -> ServerSettings:
        """The listener-independent serving settings (versions, timeouts, chunk size)."""
        ...

    @property
    def state(self) -> PublishedState | None:
        """The state routers are served now (None before the first publish)."""
        ...

    @property
    def stats(self) -> ServerStats:
        """The server-wide counters a connection adds to."""
        ...

    async def response(self, action: SendFull | SendDelta) -> Sequence[bytes]:
        """The shared encoded chunks of a full or delta reply."""
        ...

    def ready_response(self, action: SendFull | SendDelta) -> Sequence[bytes] | None:
        """Those chunks without waiting: encoded, or small and encoded now (None: `response`)."""
        ...

    def response_sent(
        self, peer: str, action: SendFull | SendDelta, size: int, held: HeldAnswer | None = None
    ) -> None:
        """A connection wrote a full or delta reply of ``size`` octets to ``peer``.

        ``held`` says where the time went when the query was held for the first data.
        """
        ...

    def query_held(self, peer: str, action: Hold) -> None:
        """A query from ``peer`` arrived before the first data and is held."""
        ...

    def hold_expired(self, peer: str) -> None:
        """The hold time of ``peer``'s query ran out; it gets No Data Available."""
        ...
