"""`rtr-serve gen-cert`: what the lab CA, server and router certificates contain, file modes,
no overwriting; once as a function and once as the command."""

from __future__ import annotations

import ipaddress
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, load_pem_private_key
from cryptography.x509.oid import ExtendedKeyUsageOID

from rtr_server.gen_cert import BACKDATE, generate
from rtr_server.tls import certificate_ip_addresses
from tests.server.test_cli import run_cli

V4 = ipaddress.IPv4Address
V6 = ipaddress.IPv6Address


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_generate_makes_a_ca_a_server_and_one_router_per_address(tmp_path: Path) -> None:
    now = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    issued = generate(
        tmp_path / "lab",
        ca_name="Test CA",
        server_ips=[V4("192.0.2.1"), V6("2001:db8::1")],
        server_dns=["localhost", "rtr.example"],
        router_ips=[V4("192.0.2.10"), V6("2001:db8::10")],
        days=30,
        now=now,
    )
    d = tmp_path / "lab"
    assert [(i.role, i.cert.name, i.key.name) for i in issued] == [
        ("CA", "ca.pem", "ca-key.pem"),
        ("server", "server.pem", "server-key.pem"),
        ("router 192.0.2.10", "router-192.0.2.10.pem", "router-192.0.2.10-key.pem"),
        ("router 2001:db8::10", "router-2001_db8__10.pem", "router-2001_db8__10-key.pem"),
    ]
    for item in issued:
        assert stat.S_IMODE(item.key.stat().st_mode) == 0o600
        assert stat.S_IMODE(item.cert.stat().st_mode) == 0o644
        key = load_pem_private_key(item.key.read_bytes(), password=None)
        cert = load(item.cert)
        assert cert.public_key() == key.public_key(), f"{item.role}: key does not match"
        assert cert.not_valid_before_utc == now - BACKDATE
        assert cert.not_valid_after_utc == now + timedelta(days=30)

    ca = load(d / "ca.pem")
    assert ca.subject.rfc4514_string() == "CN=Test CA"
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca
    server = load(d / "server.pem")
    server.verify_directly_issued_by(ca)
    san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost", "rtr.example"]
    assert certificate_ip_addresses(server.public_bytes(Encoding.DER)) == (
        V4("192.0.2.1"),
        V6("2001:db8::1"),
    )
    eku = server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    for name, ip in (("router-192.0.2.10.pem", "192.0.2.10"), ("router-2001_db8__10.pem", "")):
        router = load(d / name)
        router.verify_directly_issued_by(ca)
        want = (V4(ip),) if ip else (V6("2001:db8::10"),)
        assert certificate_ip_addresses(router.public_bytes(Encoding.DER)) == want
        eku = router.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
        leaf = router.extensions.get_extension_for_class(x509.BasicConstraints).value
        assert not leaf.ca


def test_generate_never_overwrites(tmp_path: Path) -> None:
    generate(tmp_path, router_ips=[V4("127.0.0.1")])
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(FileExistsError, match=r"ca\.pem exists"):
        generate(tmp_path, router_ips=[V4("127.0.0.2")])
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_generate_refuses_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="days"):
        generate(tmp_path, days=0)
    with pytest.raises(ValueError, match="twice"):
        generate(tmp_path, router_ips=[V4("127.0.0.1"), V4("127.0.0.1")])
    assert not any(tmp_path.iterdir())


def test_gen_cert_command(tmp_path: Path) -> None:
    lab = tmp_path / "lab"
    args = ["gen-cert", str(lab), "--router-ip", "127.0.0.2", "--days", "7"]
    done = run_cli(*args)
    assert done.returncode == 0, done.stderr
    assert f"router 127.0.0.2: {lab / 'router-127.0.0.2.pem'}" in done.stdout
    assert f"--tls-client-ca {lab / 'ca.pem'}" in done.stdout
    assert sorted(p.name for p in lab.iterdir()) == [
        "ca-key.pem",
        "ca.pem",
        "router-127.0.0.2-key.pem",
        "router-127.0.0.2.pem",
        "server-key.pem",
        "server.pem",
    ]
    server = load(lab / "server.pem")
    assert server.not_valid_after_utc - server.not_valid_before_utc == timedelta(days=7) + BACKDATE
    # A second run would overwrite: one line, exit 2.
    again = run_cli(*args)
    assert again.returncode == 2
    assert again.stderr.count("\n") == 1
    assert "exists; not overwriting" in again.stderr
