"""``rtr-serve dump ssh://``: rtr-serve's SSH listener read by our own client (asyncssh).

The host key must be in the known_hosts file given (an unknown one is refused: one line, exit
1); the router key logs in; the full table and the user appear in the metadata.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rtr_server.server import RtrServer
from rtr_server.ssh_settings import SshSettings
from tests.server.helpers import app_config, base_export, running_app, write_export
from tests.server.ssh_helpers import SshKeys, make_keys, ssh_listen
from tests.tools.helpers import rtr_serve
from upstream.router_fetch import parse_cache_url

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the SSH listener needs asyncio (the dump runs in its own process)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> SshKeys:
    return make_keys(tmp_path_factory.mktemp("ssh"))


def ssh_port(server: RtrServer) -> int:
    (port,) = [port for spec, _, port in server.bound if spec.ssh]
    return port


def test_ssh_urls_parse_with_user_and_default_port() -> None:
    address = parse_cache_url("ssh://rtr@192.0.2.1")
    assert (address.host, address.port, address.ssh_user) == ("192.0.2.1", 22, "rtr")
    assert str(parse_cache_url("ssh://xr@[2001:db8::1]:2222")) == "ssh://xr@[2001:db8::1]:2222"
    assert parse_cache_url("ssh://host:830").ssh_user  # the login name
    with pytest.raises(ValueError, match="ssh://"):
        parse_cache_url("ssh://u:secret@host")


async def test_dump_over_ssh_checks_the_host_key_and_logs_in(tmp_path: Path, keys: SshKeys) -> None:
    path = tmp_path / "export.json"
    write_export(path, base_export())
    settings = SshSettings(host_key=keys.host_key, authorized_keys=keys.authorized_keys)
    config = app_config(path, listen=(ssh_listen(),), ssh=settings)
    async with running_app(config) as app:
        assert app.state is not None
        port = ssh_port(app.server)
        known = tmp_path / "known_hosts"
        public = keys.host_public.export_public_key().decode().strip()
        known.write_text(f"[127.0.0.1]:{port} {public}\n")
        url = f"ssh://rtr@127.0.0.1:{port}"
        login = ["--ssh-key", str(keys.router_key), "--ssh-known-hosts", str(known)]
        ran = await rtr_serve("dump", url, *login)
        assert ran.returncode == 0, ran.stderr
        doc = json.loads(ran.stdout)
        assert doc["metadata"]["cache"] == url
        assert doc["metadata"]["version"] == 2
        assert doc["metadata"]["serial"] == app.state.serial.value
        assert len(doc["roas"]) == app.state.snapshot.vrp_count
        # A host key that is not the cache's: refused before any RTR byte.
        (tmp_path / "other_hosts").write_text(f"[127.0.0.1]:{port} {public[:-8]}AAAAAAAA\n")
        ran = await rtr_serve(
            "dump",
            url,
            "--ssh-key",
            str(keys.router_key),
            "--ssh-known-hosts",
            str(tmp_path / "other_hosts"),
        )
        assert ran.returncode == 1
        assert ran.stderr.startswith(f"rtr-serve dump: {url}: SSH login to 127.0.0.1 port")
        assert ran.stderr.count("\n") == 1
        # A key the cache does not know: the login fails, one line.
        ran = await rtr_serve(
            "dump", url, "--ssh-key", str(keys.other_key), "--ssh-known-hosts", str(known)
        )
        assert ran.returncode == 1
        assert "SSH login" in ran.stderr
        assert ran.stderr.count("\n") == 1
        assert app.server.stats.ssh_refusals["auth_failed"] == 1


async def test_ssh_options_need_an_ssh_url() -> None:
    ran = await rtr_serve("dump", "rtr://127.0.0.1:1", "--ssh-key", "k")
    assert ran.returncode == 2
    assert "need an ssh:// URL" in ran.stderr
