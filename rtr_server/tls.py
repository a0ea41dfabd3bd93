"""RTR over TLS (RFC 8210 §9.2, 8210bis §9.2): the server SSLContext and the router check.

`make_server_context` reads and checks the PEM files once at start (each problem is one
`TlsConfigError` line naming the file) and returns the context every TLS connection shares:
TLS 1.2 or later, and with a client CA, router certificates required. `accept_tls` does one
router's handshake within a deadline and then applies the rule of §9.2: the router's
certificate carries subjectAltName iPAddress entries and the address the connection comes
from must be one of them (we refuse, as the SHOULD asks). It never closes the stream it was
given: whoever accepted it closes it.
"""

from __future__ import annotations

import enum
import ipaddress
import ssl
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
from anyio.abc import ByteStream
from anyio.streams.tls import TLSAttribute, TLSStream

from rtr_server.access import Address, peer_address
from rtr_server.settings import TlsFiles

if TYPE_CHECKING:
    from cryptography import x509


class TlsConfigError(ValueError):
    """Raised when a certificate, key or CA file is unusable; the message names the file."""


class Refusal(enum.Enum):
    """Why a TLS router was refused."""

    #: The handshake did not finish within the handshake timeout.
    HANDSHAKE_TIMEOUT = "tls-handshake-timeout"
    #: The handshake failed: no or untrusted client certificate, no common protocol, garbage.
    HANDSHAKE_FAILED = "tls-handshake-failed"
    #: The router's certificate has no subjectAltName iPAddress equal to its address.
    IP_MISMATCH = "tls-ip-mismatch"


class TlsRefusedError(Exception):
    """Raised by `accept_tls` when a router is refused; `reason` is the log text."""

    def __init__(self, refusal: Refusal, reason: str) -> None:
        super().__init__(reason)
        self.refusal = refusal
        self.reason = reason


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TlsConfigError(f"{what} {path}: cannot read: {exc.strerror or exc}") from None


def _certificates(path: Path, what: str, now: datetime) -> list[x509.Certificate]:
    from cryptography import x509  # cryptography (~9 MiB) is loaded only for TLS listeners

    data = _read(path, what)
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise TlsConfigError(f"{what} {path}: no PEM certificate in it") from None
    for cert in certs:
        if cert.not_valid_after_utc < now:
            raise TlsConfigError(
                f"{what} {path}: {cert.subject.rfc4514_string()} expired on "
                f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M:%S} UTC"
            )
        if cert.not_valid_before_utc > now:
            raise TlsConfigError(
                f"{what} {path}: {cert.subject.rfc4514_string()} is not valid before "
                f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M:%S} UTC"
            )
    return certs


def make_server_context(files: TlsFiles, *, now: datetime | None = None) -> ssl.SSLContext:
    """The SSLContext of the TLS listeners; raises `TlsConfigError` (no network I/O)."""
    now = now or datetime.now(UTC)
    _certificates(files.cert, "TLS certificate", now)
    key = _read(files.key, "TLS key")
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        load_pem_private_key(key, password=None)
    except TypeError:
        raise TlsConfigError(f"TLS key {files.key}: encrypted keys are not supported") from None
    except ValueError:
        raise TlsConfigError(f"TLS key {files.key}: no PEM private key in it") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(files.cert, files.key)
    except (ssl.SSLError, OSError) as exc:
        raise TlsConfigError(
            f"TLS key {files.key} does not match certificate {files.cert} ({exc})"
        ) from None
    if files.client_ca is not None:
        _certificates(files.client_ca, "TLS client CA", now)
        try:
            context.load_verify_locations(cafile=files.client_ca)
        except (ssl.SSLError, OSError) as exc:
            raise TlsConfigError(f"TLS client CA {files.client_ca}: {exc}") from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def certificate_ip_addresses(der: bytes) -> tuple[Address, ...]:
    """The subjectAltName iPAddress entries of a DER certificate (empty without any)."""
    from cryptography import x509

    cert = x509.load_der_x509_certificate(der)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    values = san.get_values_for_type(x509.IPAddress)
    return tuple(a for a in values if isinstance(a, ipaddress.IPv4Address | ipaddress.IPv6Address))


async def accept_tls(
    stream: ByteStream,
    context: ssl.SSLContext,
    *,
    peer_ip: str,
    deadline: float,
) -> TLSStream:
    """Do the server side of the handshake on ``stream`` and check the router's address.

    :param deadline: when (`anyio.current_time`) an unfinished handshake is abandoned
    :raises TlsRefusedError: on a timeout, a failed handshake or an address not in the
        certificate (only checked when the context requires client certificates)
    """
    with anyio.CancelScope(deadline=deadline):
        try:
            tls = await TLSStream.wrap(
                stream, server_side=True, ssl_context=context, standard_compatible=False
            )
        except ssl.SSLError as exc:
            raise TlsRefusedError(
                Refusal.HANDSHAKE_FAILED, f"TLS handshake failed: {exc.reason or exc}"
            ) from None
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            raise TlsRefusedError(
                Refusal.HANDSHAKE_FAILED, "TLS handshake failed: connection closed by the router"
            ) from None
        if context.verify_mode == ssl.CERT_REQUIRED:
            _check_peer_address(tls, peer_ip)
        return tls
    raise TlsRefusedError(Refusal.HANDSHAKE_TIMEOUT, "TLS handshake not finished in time")


def _check_peer_address(tls: TLSStream, peer_ip: str) -> None:
    der = tls.extra(TLSAttribute.peer_certificate_binary)
    if der is None:  # cannot happen with CERT_REQUIRED; refuse rather than trust
        raise TlsRefusedError(Refusal.HANDSHAKE_FAILED, "no router certificate")
    try:
        names = certificate_ip_addresses(der)
    except ValueError as exc:  # accepted by OpenSSL, yet not parseable here
        raise TlsRefusedError(
            Refusal.IP_MISMATCH, f"router certificate unreadable: {exc}"
        ) from None
    address = peer_address(peer_ip)
    if address is None or address not in names:
        listed = ", ".join(str(n) for n in names) or "none"
        raise TlsRefusedError(
            Refusal.IP_MISMATCH,
            f"router certificate subjectAltName iPAddress ({listed}) does not include {peer_ip}",
        )
