"""``rtr-serve gen-cert DIR``: a lab CA, a server certificate and one certificate per router.

For labs and tests, not for a production PKI. Keys are ECDSA P-256 and written with mode 0600;
certificates are PEM. The server certificate carries subjectAltName dNSName ``localhost`` (and
any ``--server-dns``) plus the ``--server-ip`` addresses; each router certificate carries its
address as subjectAltName iPAddress, which is what the cache checks (8210bis §9.2). Existing
files are never overwritten.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from rtr_server.access import Address

#: Backdating of notBefore, so a router whose clock lags a little accepts a fresh certificate.
BACKDATE = timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class Issued:
    """One certificate and its key as written."""

    role: str
    cert: Path
    key: Path


def file_stem(address: Address) -> str:
    """A file-name form of an address (``:`` of IPv6 becomes ``_``: ``::1`` -> ``__1``)."""
    return str(address).replace(":", "_")


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    now: datetime,
    days: int,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    )


def _leaf_usage(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    return builder.add_extension(
        x509.BasicConstraints(ca=False, path_length=None), critical=True
    ).add_extension(_key_usage(issues_certificates=False), critical=True)


def _key_usage(*, issues_certificates: bool) -> x509.KeyUsage:
    """Key usage: keyCertSign and cRLSign for a CA, else digitalSignature; nothing more."""
    return x509.KeyUsage(
        digital_signature=not issues_certificates,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=issues_certificates,
        crl_sign=issues_certificates,
        encipher_only=False,
        decipher_only=False,
    )


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Create ``path`` with ``mode`` (regardless of the umask); never overwrite."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
    finally:
        os.close(fd)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def generate(
    directory: Path,
    *,
    ca_name: str = "rtr-serve lab CA",
    server_ips: Sequence[Address] = (ipaddress.IPv4Address("127.0.0.1"),),
    server_dns: Sequence[str] = ("localhost",),
    router_ips: Sequence[Address] = (ipaddress.IPv4Address("127.0.0.1"),),
    days: int = 365,
    now: datetime | None = None,
) -> list[Issued]:
    """Write the CA, the server pair and one router pair per address into ``directory``.

    :returns: what was written, CA first, then the server, then the routers in order
    :raises FileExistsError: when one of the files exists (nothing is written then)
    :raises ValueError: for no router address, a duplicate one or ``days`` < 1
    """
    if days < 1:
        raise ValueError("days must be at least 1")
    if len(set(router_ips)) != len(router_ips):
        raise ValueError("a router address is given twice")
    now = now or datetime.now(UTC)
    plan = [
        Issued("CA", directory / "ca.pem", directory / "ca-key.pem"),
        Issued("server", directory / "server.pem", directory / "server-key.pem"),
    ]
    plan += [
        Issued(
            f"router {ip}",
            directory / f"router-{file_stem(ip)}.pem",
            directory / f"router-{file_stem(ip)}-key.pem",
        )
        for ip in router_ips
    ]
    for issued in plan:
        for path in (issued.cert, issued.key):
            if path.exists():
                raise FileExistsError(f"{path} exists; not overwriting")
    directory.mkdir(parents=True, exist_ok=True)

    ca_key = _new_key()
    ca_subject = _name(ca_name)
    ca_cert = (
        _builder(ca_subject, ca_subject, ca_key, ca_key, now=now, days=days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(issues_certificates=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    pairs: list[tuple[x509.Certificate, ec.EllipticCurvePrivateKey]] = [(ca_cert, ca_key)]

    server_key = _new_key()
    server_names: list[x509.GeneralName] = [x509.DNSName(n) for n in server_dns]
    server_names += [x509.IPAddress(ip) for ip in server_ips]
    server_cert = (
        _leaf_usage(
            _builder(_name("rtr-serve"), ca_subject, server_key, ca_key, now=now, days=days)
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(server_names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pairs.append((server_cert, server_key))

    for ip in router_ips:
        key = _new_key()
        cert = (
            _leaf_usage(
                _builder(_name(f"router {ip}"), ca_subject, key, ca_key, now=now, days=days)
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ip)]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        pairs.append((cert, key))

    for issued, (cert, key) in zip(plan, pairs, strict=True):
        _write_new(issued.key, _pem_key(key), 0o600)
        _write_new(issued.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return plan


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``rtr-serve gen-cert``."""
    p = argparse.ArgumentParser(
        prog="rtr-serve gen-cert",
        description="Make a lab CA, a server certificate and router certificates for RTR over "
        "TLS (PEM; keys mode 0600). Existing files are never overwritten.",
        epilog="example: rtr-serve gen-cert /etc/rtr-serve/tls --server-ip 192.0.2.1 "
        "--router-ip 192.0.2.10 --router-ip 2001:db8::10",
    )
    p.add_argument("directory", type=Path, metavar="DIR", help="where to write the files")
    p.add_argument("--ca-name", default="rtr-serve lab CA", help="CA common name")
    p.add_argument(
        "--server-ip",
        action="append",
        type=ipaddress.ip_address,
        metavar="IP",
        help="server subjectAltName iPAddress; repeat (default 127.0.0.1)",
    )
    p.add_argument(
        "--server-dns",
        action="append",
        metavar="NAME",
        help="server subjectAltName dNSName; repeat (default localhost)",
    )
    p.add_argument(
        "--router-ip",
        action="append",
        type=ipaddress.ip_address,
        metavar="IP",
        help="one router certificate per address (subjectAltName iPAddress); repeat "
        "(default 127.0.0.1)",
    )
    p.add_argument("--days", type=int, default=365, metavar="N", help="validity (default 365)")
    return p


def main(argv: Sequence[str]) -> int:
    """``rtr-serve gen-cert``; 0 on success, 2 with one line on error."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        written = generate(
            args.directory,
            ca_name=args.ca_name,
            server_ips=args.server_ip or [ipaddress.IPv4Address("127.0.0.1")],
            server_dns=args.server_dns or ["localhost"],
            router_ips=args.router_ip or [ipaddress.IPv4Address("127.0.0.1")],
            days=args.days,
        )
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"rtr-serve gen-cert: {exc}\n")
        return 2
    out = sys.stdout
    for issued in written:
        out.write(f"{issued.role}: {issued.cert} (key {issued.key})\n")
    where = args.directory
    out.write(
        f"serve with: --tls-cert {where / 'server.pem'} --tls-key {where / 'server-key.pem'} "
        f"--tls-client-ca {where / 'ca.pem'}\n"
    )
    return 0
