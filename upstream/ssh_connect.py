"""`connect_ssh`: an RTR client's transport over SSH (subsystem ``rpki-rtr``, 8210bis §9.1).

Logs in with a private key (publickey; the agent and ``~/.ssh`` keys when none is given),
checks the cache's host key against a known_hosts file (``~/.ssh/known_hosts`` when none is
given; an unknown host key is refused, never accepted blindly), opens the ``rpki-rtr``
subsystem and returns its channel as an anyio `ByteStream` whose `aclose` also closes the SSH
connection. asyncssh needs asyncio: under another event loop this fails with `SshConnectError`;
it is imported at the first connect, so that a start without SSH sources does not load it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import sniffio
from anyio.abc import ByteStream

__all__ = ["SUBSYSTEM", "SshConnectError", "SshLogin", "connect_ssh"]

SUBSYSTEM = "rpki-rtr"


class SshConnectError(Exception):
    """The SSH login or the subsystem failed; the message is one line."""


@dataclass(frozen=True, slots=True)
class SshLogin:
    """Who logs in, with which key, trusting which host keys (None: OpenSSH's defaults)."""

    user: str
    key_file: str | None = None
    known_hosts: str | None = None


async def connect_ssh(host: str, port: int, login: SshLogin) -> ByteStream:
    """The ``rpki-rtr`` subsystem of ``host:port`` as a byte stream; `SshConnectError`."""
    if sniffio.current_async_library() != "asyncio":
        raise SshConnectError("RTR over SSH needs the asyncio event loop")
    with warnings.catch_warnings():
        # cryptography 51 deprecates DSA, which asyncssh 2.24 still names at import (unused).
        warnings.filterwarnings("ignore", message="DSA is deprecated")
        import asyncssh

        from upstream.ssh_stream import ClientSshByteStream

    options: dict[str, object] = {"username": login.user}
    if login.key_file is not None:
        options["client_keys"] = [login.key_file]
    if login.known_hosts is not None:
        options["known_hosts"] = login.known_hosts
    try:
        conn = await asyncssh.connect(host, port, **options)
    except (OSError, asyncssh.Error, ValueError) as exc:
        raise SshConnectError(f"SSH login to {host} port {port} failed: {exc}") from None
    try:
        writer, reader, _ = await conn.open_session(subsystem=SUBSYSTEM, encoding=None)
    except (OSError, asyncssh.Error) as exc:
        conn.close()
        raise SshConnectError(f"SSH subsystem {SUBSYSTEM} refused: {exc}") from None
    except BaseException:
        conn.close()
        raise
    return ClientSshByteStream(conn, reader, writer)
