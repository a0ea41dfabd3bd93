"""Lab certificates made with `rtr_server.gen_cert`, TLS router connections from a chosen
loopback address (127.0.0.0/8 is all loopback on Linux), and a check that a router is refused."""

from __future__ import annotations

import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

import anyio

from rtr_server.access import Network
from rtr_server.gen_cert import generate
from rtr_server.settings import ListenAddress, TlsFiles
from tests.server.rtr_client import TIMEOUT, ConnectionClosedError, RtrClient, reset_query

#: The router certificates made: one per address (subjectAltName iPAddress).
ROUTER_IPS = ("127.0.0.1", "127.0.0.2")
TLS_ERRORS = (ssl.SSLError, anyio.BrokenResourceError, anyio.EndOfStream, OSError)


@dataclass(frozen=True, slots=True)
class LabCerts:
    """The files `generate` wrote."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    def server_files(self, *, client_ca: bool = True) -> TlsFiles:
        """The server's TLS files, with or without requiring router certificates."""
        d = self.directory
        return TlsFiles(d / "server.pem", d / "server-key.pem", self.ca if client_ca else None)

    def router(self, ip: str) -> tuple[Path, Path]:
        """Certificate and key of the router whose certificate names ``ip``."""
        return self.directory / f"router-{ip}.pem", self.directory / f"router-{ip}-key.pem"


def make_certs(directory: Path) -> LabCerts:
    """A CA, a server pair (localhost, 127.0.0.1) and a router pair per `ROUTER_IPS`."""
    generate(directory, router_ips=[ipaddress.IPv4Address(ip) for ip in ROUTER_IPS])
    return LabCerts(directory)


def client_context(certs: LabCerts, router_cert_ip: str | None) -> ssl.SSLContext:
    """A router's context: trusts the lab CA, presents the certificate naming
    ``router_cert_ip`` (none when None)."""
    context = ssl.create_default_context(cafile=certs.ca)
    if router_cert_ip is not None:
        context.load_cert_chain(*certs.router(router_cert_ip))
    return context


def tls_listen(allow: tuple[Network, ...] | None = None) -> ListenAddress:
    """A TLS listener on 127.0.0.1 port 0."""
    return ListenAddress("127.0.0.1", 0, tls=True, allow=allow)


async def connect_tls(
    port: int, context: ssl.SSLContext, *, from_ip: str = "127.0.0.1"
) -> RtrClient:
    """A TLS router connection from ``from_ip`` that checked the server's name (localhost)."""
    with anyio.fail_after(TIMEOUT):
        stream = await anyio.connect_tcp(
            "127.0.0.1",
            port,
            local_host=from_ip,
            ssl_context=context,
            tls_hostname="localhost",
            tls_standard_compatible=False,
        )
    return RtrClient(stream)


async def assert_refused(port: int, context: ssl.SSLContext, *, from_ip: str) -> None:
    """The handshake fails, or the server closes the connection without answering a Reset
    Query (with TLS 1.3 the router's side of the handshake may finish first)."""
    try:
        client = await connect_tls(port, context, from_ip=from_ip)
    except TLS_ERRORS:
        return
    async with client:
        try:
            await client.send(reset_query(2))
            pdu = await client.receive_pdu()
        except (ConnectionClosedError, *TLS_ERRORS):
            return
        raise AssertionError(f"expected the router to be refused, got {pdu!r}")
