"""SSH in the configuration file and on the command line: ``[[listeners]] ssh = true``,
``[[ssh_users]]`` (scrypt hashes from ``rtr-serve ssh-password``), and one-line exit-2 errors
before any network (no host key, unusable key files, a bad hash, the trio backend)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtr_server.app_config import AppConfig
from rtr_server.cli_args import build_parser
from rtr_server.cli_config import apply_config_file, config_from_args
from rtr_server.config_file import ConfigError, parse_config
from rtr_server.settings import ListenAddress
from rtr_server.ssh_settings import hash_password, verify_password
from tests.server.ssh_helpers import SshKeys, make_keys
from tests.server.test_cli import run_cli


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> SshKeys:
    return make_keys(tmp_path_factory.mktemp("ssh"))


def load(path: Path, *extra: str) -> AppConfig:
    parser = build_parser()
    argv = ["--config", str(path), *extra]
    args = parser.parse_args(argv)
    apply_config_file(parser, args, argv)
    return config_from_args(args)


def test_password_hash_round_trip() -> None:
    stored = hash_password("correct horse")
    assert stored.startswith("scrypt$16384$8$1$")
    assert verify_password("correct horse", stored)
    assert not verify_password("correct hors", stored)
    assert hash_password("correct horse") != stored  # a new salt each time
    assert not verify_password("x", "plain-text-password")


def test_file_listener_ssh_users_and_server_keys(tmp_path: Path, keys: SshKeys) -> None:
    stored = hash_password("pw")
    path = tmp_path / "c.toml"
    path.write_text(f"""
[server]
listen = ["127.0.0.1:8323"]
ssh_host_key = "{keys.host_key}"
ssh_authorized_keys = "{keys.authorized_keys}"
ssh_allow_user = ["rtr", "router1"]
ssh_login_timeout = 7
[[listeners]]
address = "127.0.0.1:2222"
ssh = true
allow = ["127.0.0.0/8"]
[[ssh_users]]
name = "router1"
password_hash = "{stored}"
[[sources]]
url = "x.json"
""")
    server = load(path).server
    assert [a for a in server.listen if a.ssh] == [
        ListenAddress("127.0.0.1", 2222, ssh=True, allow=server.listen[1].allow)
    ]
    ssh = server.ssh
    assert ssh is not None
    assert (ssh.host_key, ssh.authorized_keys) == (keys.host_key, keys.authorized_keys)
    assert ssh.allow_users == ("rtr", "router1")
    assert ssh.login_timeout == 7
    assert ssh.password_hash("router1") == stored
    assert "<hidden>" in repr(ssh.users[0])
    assert stored not in repr(ssh)
    # check-config shows it, without the hash.
    result = run_cli("check-config", str(path))
    assert result.returncode == 0, result.stderr
    assert "127.0.0.1:2222 ssh allow 127.0.0.0/8" in result.stdout
    assert "ssh: host key" in result.stdout
    assert "1 password users" in result.stdout
    assert stored not in result.stdout


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ('[[ssh_users]]\nname = "a"\npassword_hash = "secret"', "ssh_users[0]: not an scrypt"),
        ('[[ssh_users]]\nname = "a"', "ssh_users[0].password_hash: missing"),
        ('[[ssh_users]]\nname = "a"\npassword = "x"', "ssh_users[0].password: unknown key"),
        ('[[listeners]]\naddress = ":1"\nssh = true\ntls = true', "either tls or ssh"),
        ('[[listeners]]\naddress = ":1"\nssh = "yes"', "listeners[0].ssh: must be bool"),
    ],
)
def test_bad_ssh_config_is_named_by_path(doc: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_config(doc)


def test_ssh_listener_needs_host_key_and_router_keys(keys: SshKeys, tmp_path: Path) -> None:
    base = ["--source", "x.json", "--listen-ssh", "127.0.0.1:0"]
    cases = [
        ([], "--ssh-host-key"),
        (["--ssh-host-key", str(keys.host_key)], "--ssh-authorized-keys"),
        (
            ["--ssh-host-key", str(tmp_path / "missing"), "--ssh-authorized-keys", "x"],
            f"SSH host key {tmp_path / 'missing'}: cannot read",
        ),
        (
            ["--ssh-host-key", str(keys.authorized_keys), "--ssh-authorized-keys", "x"],
            f"SSH host key {keys.authorized_keys}:",
        ),
        (
            ["--ssh-host-key", str(keys.host_key), "--ssh-authorized-keys", str(keys.host_key)],
            f"SSH authorized keys {keys.host_key}:",
        ),
        (
            [
                "--ssh-host-key",
                str(keys.host_key),
                "--ssh-authorized-keys",
                str(keys.authorized_keys),
                "--async-backend",
                "trio",
            ],
            "SSH listeners need the asyncio backend",
        ),
    ]
    for extra, message in cases:
        result = run_cli(*base, *extra)
        assert result.returncode == 2, (extra, result.stderr)
        assert message in result.stderr, (extra, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_ssh_password_subcommand_prints_a_usable_entry(tmp_path: Path) -> None:
    import subprocess

    from tests.server.test_cli import RTR_SERVE

    result = subprocess.run(
        [RTR_SERVE, "ssh-password", "router7"],
        input="pass word\n",
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    doc = parse_config(result.stdout)
    assert doc.ssh_users[0].name == "router7"
    assert verify_password("pass word", doc.ssh_users[0].password_hash)
