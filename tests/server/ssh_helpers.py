"""SSH lab for the server tests: keys made with asyncssh, an asyncssh client as the router.

`make_keys` writes a host key, two router keys and an authorized_keys file (the second key
is not in it); `connect_router` logs in and opens the ``rpki-rtr`` subsystem, and returns an
`RtrClient` over the channel (the same `SshByteStream` the server uses, client side).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import asyncssh

from rtr_server.settings import ListenAddress
from tests.server.rtr_client import TIMEOUT, RtrClient
from upstream.ssh_stream import SshByteStream


@dataclass(frozen=True, slots=True)
class SshKeys:
    """Key files of one test module."""

    host_key: Path
    host_public: asyncssh.SSHKey
    router_key: Path
    other_key: Path
    authorized_keys: Path
    directory: Path


def make_keys(directory: Path, *, options: str = "") -> SshKeys:
    """An ed25519 host key, an ed25519 router key (authorized, with ``options``), an RSA one
    that is not authorized."""
    host = asyncssh.generate_private_key("ssh-ed25519")
    host.write_private_key(directory / "host_key")
    router = asyncssh.generate_private_key("ssh-ed25519")
    router.write_private_key(directory / "router_key")
    other = asyncssh.generate_private_key("ssh-rsa", key_size=2048)
    other.write_private_key(directory / "other_key")
    line = router.export_public_key().decode().strip()
    (directory / "authorized_keys").write_text(f"{options + ' ' if options else ''}{line}\n")
    return SshKeys(
        directory / "host_key",
        host.convert_to_public(),
        directory / "router_key",
        directory / "other_key",
        directory / "authorized_keys",
        directory,
    )


def ssh_listen(allow: tuple[str, ...] | None = None) -> ListenAddress:
    """An SSH listener on 127.0.0.1, port 0."""
    from rtr_server.access import parse_networks

    return ListenAddress("127.0.0.1", 0, ssh=True, allow=parse_networks(allow) if allow else None)


@asynccontextmanager
async def ssh_connection(
    port: int,
    keys: SshKeys,
    *,
    user: str = "rtr",
    key: Path | None = None,
    password: str | None = None,
    from_ip: str = "127.0.0.1",
    kex_algs: tuple[str, ...] = (),
) -> AsyncIterator[asyncssh.SSHClientConnection]:
    """A logged-in SSH connection that checked the host key (raises asyncssh errors)."""
    known = asyncssh.import_known_hosts(
        f"[127.0.0.1]:{port} {keys.host_public.export_public_key().decode().strip()}\n"
    )
    with anyio.fail_after(TIMEOUT):
        conn = await asyncssh.connect(
            "127.0.0.1",
            port,
            username=user,
            client_keys=[str(key)] if key is not None else [],
            password=password,
            known_hosts=known,
            local_addr=(from_ip, 0),
            agent_path=None,
            config=None,
            preferred_auth="publickey,password" if password else "publickey",
            kex_algs=list(kex_algs) if kex_algs else (),
        )
    try:
        yield conn
    finally:
        conn.close()
        with anyio.move_on_after(2):
            await conn.wait_closed()


async def open_router(conn: asyncssh.SSHClientConnection) -> RtrClient:
    """Open the ``rpki-rtr`` subsystem on ``conn``; an `RtrClient` over its channel."""
    with anyio.fail_after(TIMEOUT):
        writer, reader, _ = await conn.open_session(subsystem="rpki-rtr", encoding=None)
    return RtrClient(SshByteStream(reader, writer))
