"""`HttpSettings`: the HTTP listener's address, limits and health rule, checked once at start-up."""

from __future__ import annotations

from dataclasses import dataclass

from rtr_server.settings import ListenAddress, parse_listen

#: All sources failing for longer than this (seconds since the newest successful load) makes
#: /healthz answer 503.
DEFAULT_STALE_AFTER = 3600.0


def parse_http_address(text: str) -> ListenAddress:
    """Parse ``HOST:PORT`` or ``[V6]:PORT``; the host must be given (no implicit wildcard)."""
    address = parse_listen(text)
    if text.startswith(":"):
        raise ValueError(
            f"HTTP address {text!r} has no host; name it, e.g. 127.0.0.1{text} (loopback)"
        )
    return address


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """The HTTP listener (off unless configured)."""

    listen: ListenAddress
    #: Connections served at once; more are answered 503 and closed.
    max_connections: int = 64
    #: A request head larger than this is refused (431) and the connection closed.
    max_request_bytes: int = 8192
    #: Seconds to receive a whole request head, counted from the connection's start or the
    #: end of the previous response (so this is also the keep-alive idle time).
    request_timeout: float = 10.0
    #: A client that accepts no response bytes for this long is dropped.
    write_timeout: float = 30.0
    #: Requests served on one connection before it is closed.
    max_requests_per_connection: int = 1000
    #: Export a per-router serial lag gauge (one series per connected router).
    router_lag: bool = False
    #: See `DEFAULT_STALE_AFTER`.
    stale_after: float = DEFAULT_STALE_AFTER
    #: A listening socket passed by systemd (name ``http``): served instead of binding ``listen``.
    inherited_fd: int | None = None

    def __post_init__(self) -> None:
        if self.max_connections < 1 or self.max_requests_per_connection < 1:
            raise ValueError("HTTP connection limits must be at least 1")
        if self.max_request_bytes < 1024:
            raise ValueError("HTTP request size limit must be at least 1024 bytes")
        if self.request_timeout <= 0 or self.write_timeout <= 0 or self.stale_after <= 0:
            raise ValueError("HTTP timeouts and the staleness bound must be positive")
