"""``--ssh-kex-algorithms`` / ``[server] ssh_kex_algorithms``: the SSH listener offers only the
listed key exchange algorithms (a router offering none of them cannot log in, one offering one
of them is served); an unknown name is one line and exit status 2 before any network."""

from __future__ import annotations

from pathlib import Path

import asyncssh
import pytest

from rtr_server.cli_args import build_parser
from rtr_server.cli_config import apply_config_file, config_from_args
from rtr_server.ssh_settings import SshSettings
from tests.server.helpers import app_config, running_app
from tests.server.ssh_helpers import SshKeys, make_keys, open_router, ssh_connection, ssh_listen
from tests.server.test_cli import run_cli

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> SshKeys:
    return make_keys(tmp_path_factory.mktemp("ssh"))


async def test_only_the_listed_key_exchanges_are_offered(export_path: Path, keys: SshKeys) -> None:
    ssh = SshSettings(
        host_key=keys.host_key,
        authorized_keys=keys.authorized_keys,
        kex_algorithms=("ecdh-sha2-nistp384",),
    )
    config = app_config(export_path, listen=(ssh_listen(),), ssh=ssh)
    async with running_app(config) as app:
        port = next(port for spec, _, port in app.server.bound if spec.ssh)
        with pytest.raises(asyncssh.KeyExchangeFailed):
            async with ssh_connection(
                port, keys, key=keys.router_key, kex_algs=("curve25519-sha256",)
            ):
                pass
        async with ssh_connection(
            port,
            keys,
            key=keys.router_key,
            kex_algs=("curve25519-sha256", "ecdh-sha2-nistp384"),
        ) as conn:
            router = await open_router(conn)
            await router.reset(1)


def test_option_and_config_key_give_the_list(keys: SshKeys, tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f"""
[server]
listen_ssh = ["127.0.0.1:2222"]
ssh_host_key = "{keys.host_key}"
ssh_authorized_keys = "{keys.authorized_keys}"
ssh_kex_algorithms = "ecdh-sha2-nistp384, ecdh-sha2-nistp521"
[[sources]]
url = "x.json"
""")
    parser = build_parser()
    for extra in ([], ["--ssh-kex-algorithms", "curve25519-sha256"]):
        argv = ["--config", str(path), *extra]
        args = parser.parse_args(argv)
        apply_config_file(parser, args, argv)
        ssh = config_from_args(args).server.ssh
        assert ssh is not None
        assert ssh.kex_algorithms == (
            ("curve25519-sha256",) if extra else ("ecdh-sha2-nistp384", "ecdh-sha2-nistp521")
        )
    result = run_cli("check-config", str(path))
    assert result.returncode == 0, result.stderr
    assert "key exchange ecdh-sha2-nistp384, ecdh-sha2-nistp521" in result.stdout


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "curve25519-sha256,nope-sha1",
            "--ssh-kex-algorithms: unknown SSH key exchange algorithm 'nope-sha1'",
        ),
        (",", "--ssh-kex-algorithms: no key exchange algorithm given"),
    ],
)
def test_unknown_or_empty_list_exits_2_with_one_line(
    keys: SshKeys, value: str, message: str
) -> None:
    result = run_cli(
        "--source",
        "x.json",
        "--listen-ssh",
        "127.0.0.1:0",
        "--ssh-host-key",
        str(keys.host_key),
        "--ssh-authorized-keys",
        str(keys.authorized_keys),
        "--ssh-kex-algorithms",
        value,
    )
    assert result.returncode == 2, result
    assert message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
