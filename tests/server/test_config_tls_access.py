"""TLS, access control and the connection limits in the configuration file and on the command
line: [[listeners]], [server] keys, merging, and one-line exit-2 errors for bad TLS files."""

from __future__ import annotations

import ipaddress
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rtr_server.app_config import AppConfig
from rtr_server.cli_args import build_parser
from rtr_server.cli_config import apply_config_file, config_from_args
from rtr_server.config_file import ConfigError, parse_config
from rtr_server.gen_cert import generate
from rtr_server.settings import ListenAddress
from tests.server.test_cli import run_cli
from tests.server.tls_helpers import LabCerts, make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> LabCerts:
    return make_certs(tmp_path_factory.mktemp("tls"))


def net(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(text)


def config_text(certs: LabCerts) -> str:
    d = certs.directory
    return f"""
[server]
listen = ["127.0.0.1:8323"]
allow = ["192.0.2.0/24"]
tls_cert = "{d / "server.pem"}"
tls_key = "{d / "server-key.pem"}"
tls_client_ca = "{d / "ca.pem"}"
tls_handshake_timeout = 5
max_connections = 100
max_per_ip = 4
query_timeout = 30
write_timeout = 90
[[listeners]]
address = "[::1]:324"
tls = true
allow = ["2001:db8::/32", "10.0.0.0/8"]
[[listeners]]
address = "127.0.0.1:3323"
[[sources]]
url = "x.json"
"""


def load(path: Path, *extra: str) -> AppConfig:
    parser = build_parser()
    argv = ["--config", str(path), *extra]
    args = parser.parse_args(argv)
    apply_config_file(parser, args, argv)
    return config_from_args(args)


def test_file_listeners_tls_allow_and_limits(tmp_path: Path, certs: LabCerts) -> None:
    path = tmp_path / "c.toml"
    path.write_text(config_text(certs))
    config = load(path)
    server = config.server
    everyone_here = (net("192.0.2.0/24"),)
    assert server.listen == (
        ListenAddress("127.0.0.1", 8323, allow=everyone_here),
        ListenAddress("::1", 324, tls=True, allow=(net("2001:db8::/32"), net("10.0.0.0/8"))),
        ListenAddress("127.0.0.1", 3323, allow=everyone_here),  # the [server] allow
    )
    assert server.tls is not None
    assert server.tls.client_ca == certs.ca
    assert server.tls_handshake_timeout == 5
    # The limits of #3 come from the file too.
    assert (server.max_connections, server.max_per_ip) == (100, 4)
    assert (server.query_timeout, server.write_timeout) == (30, 90)
    # --listen on the command line replaces the file's listen and [[listeners]].
    server = load(path, "--listen", "127.0.0.1:9999", "--max-per-ip", "2").server
    assert server.listen == (ListenAddress("127.0.0.1", 9999, allow=everyone_here),)
    assert server.max_per_ip == 2
    # --allow on the command line replaces the [server] allow.
    server = load(path, "--allow", "198.51.100.0/24").server
    assert server.listen[0].allow == (net("198.51.100.0/24"),)
    assert server.listen[1].allow == (net("2001:db8::/32"), net("10.0.0.0/8"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[listeners]]\ntls = true", "listeners[0].address: missing"),
        ("[[listeners]]\naddress = 'x'", "listeners[0].address: listen address 'x'"),
        ("[[listeners]]\naddress = ':1'\ntls = 1", "listeners[0].tls: must be bool"),
        ("[[listeners]]\naddress = ':1'\nallow = []", "listeners[0].allow: must not be empty"),
        (
            "[[listeners]]\naddress = ':1'\nallow = ['10.0.0.1/8']",
            "listeners[0].allow[0]: '10.0.0.1/8' is not a network",
        ),
        ("[[listeners]]\naddress = ':1'\nport = 1", "listeners[0].port: unknown key"),
        ("listeners = 1", "listeners: must be an array of tables"),
        ("[server]\nallow = ['x']", "server.allow[0]: 'x' is not a network"),
        ("[server]\nallow = [1]", "server.allow[0]: must be a network string"),
        ("[server]\nlisten_tls = [1]", "server.listen_tls: must be a list of HOST:PORT"),
        ("[server]\ntls_cert = 1", "server.tls_cert: must be str"),
        ("[server]\ntls_handshake_timeout = true", "server.tls_handshake_timeout: must be int"),
    ],
)
def test_file_errors_name_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config(text)


def bad_files(certs: LabCerts, tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    d = certs.directory
    cert, key = str(d / "server.pem"), str(d / "server-key.pem")
    old = tmp_path / "old"
    generate(old, now=datetime.now(UTC) - timedelta(days=10), days=1)
    (tmp_path / "garbage.pem").write_text("not a certificate\n")
    return {
        "missing-cert": (
            ["--tls-cert", str(tmp_path / "nope.pem"), "--tls-key", key],
            "nope.pem: cannot read: No such file",
        ),
        "missing-key": (["--tls-cert", cert, "--tls-key", str(tmp_path / "k.pem")], "cannot read"),
        "garbage-cert": (
            ["--tls-cert", str(tmp_path / "garbage.pem"), "--tls-key", key],
            "no PEM certificate",
        ),
        "cert-as-key": (["--tls-cert", cert, "--tls-key", cert], "no PEM private key"),
        "key-mismatch": (
            ["--tls-cert", cert, "--tls-key", str(d / "router-127.0.0.1-key.pem")],
            "does not match certificate",
        ),
        "expired": (
            ["--tls-cert", str(old / "server.pem"), "--tls-key", str(old / "server-key.pem")],
            "expired on",
        ),
        "garbage-ca": (
            [
                "--tls-cert",
                cert,
                "--tls-key",
                key,
                "--tls-client-ca",
                str(tmp_path / "garbage.pem"),
            ],
            "TLS client CA",
        ),
        "no-cert": ([], "TLS listeners need --tls-cert and --tls-key"),
        "cert-without-key": (["--tls-cert", cert], "give both --tls-cert and --tls-key"),
        "bad-allow": (["--tls-cert", cert, "--tls-key", key, "--allow", "10.0.0.1/8"], "--allow"),
    }


CASES = [
    "missing-cert",
    "missing-key",
    "garbage-cert",
    "cert-as-key",
    "key-mismatch",
    "expired",
    "garbage-ca",
    "no-cert",
    "cert-without-key",
    "bad-allow",
]


@pytest.mark.parametrize("case", CASES)
def test_bad_tls_setup_exits_2_with_one_line(
    case: str, certs: LabCerts, tmp_path: Path, export_path: Path
) -> None:
    args, mentions = bad_files(certs, tmp_path)[case]
    done = run_cli("--source", str(export_path), "--listen-tls", "127.0.0.1:0", *args)
    assert done.returncode == 2, done
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("rtr-serve: error: ")
    assert mentions in lines[0]


def test_check_config_shows_tls_and_listeners(tmp_path: Path, certs: LabCerts) -> None:
    path = tmp_path / "c.toml"
    path.write_text(config_text(certs))
    done = run_cli("check-config", str(path))
    assert done.returncode == 0, done.stderr
    assert (
        "  listen: 127.0.0.1:8323 allow 192.0.2.0/24, [::1]:324 tls allow "
        "2001:db8::/32,10.0.0.0/8, 127.0.0.1:3323 allow 192.0.2.0/24\n"
    ) in done.stdout
    assert f"router certificates from {certs.ca}" in done.stdout
    path.write_text(config_text(certs).replace('tls_key = "', 'tls_key = "/nonexistent'))
    done = run_cli("check-config", str(path))
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1
    assert "TLS key /nonexistent" in done.stderr
