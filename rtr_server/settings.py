"""`ServerSettings`: every knob of the RTR listener side, validated once at start-up."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from rtr_protocol.constants import MAX_VERSION, Timers
from rtr_server.access import Network
from rtr_server.socket_activation import AdoptedConnection, InheritedSocket
from rtr_server.ssh_settings import SshSettings
from rtr_server.tcp_auth import AoKey, Md5Key
from snapshot import Continuation


class ShutdownNotice(enum.Enum):
    """What v2 routers are told when rtr-serve stops (8210bis §12, codes 12 and 13)."""

    #: Error 12, Cache Restart: keep the data, come back within Expire.
    RESTART = "restart"
    #: Error 13, Cache Shutdown: flush what you learned from us.
    SHUTDOWN = "shutdown"


@dataclass(frozen=True, slots=True)
class ListenAddress:
    """One TCP address to listen on, plain, TLS or SSH, with the router networks it admits."""

    host: str
    port: int
    #: Serve RTR over TLS here (8210bis §9.2; the registered port is 324, rpki-rtr-tls).
    tls: bool = False
    #: Router networks admitted; None admits every address.
    allow: tuple[Network, ...] | None = None
    #: TCP-MD5 and TCP-AO keys per router prefix (`rtr_server.tcp_auth`; config file only).
    tcp_md5: tuple[Md5Key, ...] = ()
    tcp_ao: tuple[AoKey, ...] = ()
    #: Serve RTR over SSH here (subsystem rpki-rtr, 8210bis §9.1; see rtr_server.ssh).
    ssh: bool = False

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def describe(self) -> str:
        """``HOST:PORT``, with ``tls`` and the allowed networks when set (for check-config)."""
        text = f"{self}{' tls' if self.tls else ''}{' ssh' if self.ssh else ''}"
        if self.allow is not None:
            text += f" allow {','.join(str(n) for n in self.allow)}"
        if self.tcp_md5:
            text += f" tcp-md5 {','.join(str(k.peer) for k in self.tcp_md5)}"
        if self.tcp_ao:
            text += f" tcp-ao {','.join(f'{k.peer}#{k.key_id}' for k in self.tcp_ao)}"
        return text


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """The PEM files of the TLS listeners; `rtr_server.tls` turns them into an SSLContext."""

    cert: Path
    key: Path
    #: When set, routers must present a certificate issued by this CA whose subjectAltName
    #: iPAddress entries include the address they connect from.
    client_ca: Path | None = None


def parse_listen(text: str) -> ListenAddress:
    """Parse ``HOST:PORT``, ``[V6]:PORT`` or ``:PORT`` (all addresses); raises ValueError."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"listen address {text!r} is not HOST:PORT")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"listen port {port} outside 0..65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"listen address {text!r}: write IPv6 addresses as [ADDR]:PORT")
    return ListenAddress(host or "::", port)


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Listener, protocol and resource settings of the RTR server."""

    listen: tuple[ListenAddress, ...] = (ListenAddress("127.0.0.1", 8323),)
    timers: Timers = field(default_factory=Timers)
    #: Minimum seconds between two Serial Notify rounds (RFC 8210 §8.2: one per minute).
    notify_interval: float = 60.0
    max_version: int = MAX_VERSION
    min_version: int = 0
    max_connections: int = 4096
    max_per_ip: int = 256
    #: A connection that sends no query within this many seconds is closed.
    query_timeout: float = 60.0
    #: A query that arrives before the first publish is held this many seconds for the data,
    #: then answered with No Data Available; 0 answers No Data at once.
    arrival_hold: float = 50.0
    #: A router that accepts no bytes for this long is dropped; None means 3 × Retry.
    write_timeout: float | None = None
    shutdown_notice: ShutdownNotice = ShutdownNotice.RESTART
    #: Bytes written per send call.
    chunk_size: int = 128 * 1024
    #: Encoded responses kept for sharing (full and delta, all versions).
    response_cache_bytes: int = 256 * 1024 * 1024
    #: Certificate and key of the TLS listeners (required when one listener has ``tls``).
    tls: TlsFiles | None = None
    #: A TLS handshake not finished within this many seconds is abandoned.
    tls_handshake_timeout: float = 10.0
    #: Sockets passed by systemd (socket activation): served instead of binding ``listen``.
    inherited: tuple[InheritedSocket, ...] = ()
    #: Router connections handed over by the previous process image (``kill -USR2``).
    adopted: tuple[AdoptedConnection, ...] = ()
    #: What the previous process image served last (`rtr_server.continuity`), if it handed over.
    continued: Continuation | None = None
    #: Host key, router keys and users of the SSH listeners (required when one has ``ssh``).
    ssh: SshSettings | None = None

    def __post_init__(self) -> None:
        if not self.listen:
            raise ValueError("at least one listen address is needed")
        if self.notify_interval < 0:
            raise ValueError("notify interval must not be negative")
        if not 0 <= self.min_version <= self.max_version <= MAX_VERSION:
            raise ValueError(f"protocol versions must satisfy 0 <= min <= max <= {MAX_VERSION}")
        if self.max_connections < 1 or self.max_per_ip < 1:
            raise ValueError("connection limits must be at least 1")
        if self.query_timeout <= 0:
            raise ValueError("query timeout must be positive")
        if self.arrival_hold < 0:
            raise ValueError("arrival hold must not be negative")
        if self.write_timeout is not None and self.write_timeout <= 0:
            raise ValueError("write timeout must be positive")
        if self.chunk_size < 4096:
            raise ValueError("chunk size must be at least 4096")
        if self.tls is None and any(s.name == "rtr-tls" for s in self.inherited):
            raise ValueError("an rtr-tls socket needs a certificate and key (tls_cert, tls_key)")
        if self.tls is None and any(a.tls for a in self.listen):
            raise ValueError("TLS listeners need a certificate and key (--tls-cert, --tls-key)")
        if self.ssh is None and any(s.name == "rtr-ssh" for s in self.inherited):
            raise ValueError("an rtr-ssh socket needs --ssh-host-key and --ssh-authorized-keys")
        if self.ssh is None and any(a.ssh for a in self.listen):
            raise ValueError("SSH listeners need --ssh-host-key and --ssh-authorized-keys")
        if any(a.ssh and a.tls for a in self.listen):
            raise ValueError("a listener is either TLS or SSH, not both")
        if self.tls_handshake_timeout <= 0:
            raise ValueError("TLS handshake timeout must be positive")

    @property
    def effective_write_timeout(self) -> float:
        """The write timeout in seconds (3 × Retry unless set; 8210bis §9)."""
        if self.write_timeout is not None:
            return self.write_timeout
        return 3.0 * self.timers.retry
