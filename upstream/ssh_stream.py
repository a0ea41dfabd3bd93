"""`SshByteStream`: an anyio `ByteStream` over one SSH session channel (asyncssh's stream API).

`RtrConnection` runs on it unchanged. `send` writes and then awaits ``SSHWriter.drain()``,
which returns only when asyncssh's send buffer is below its high-water mark (the router's
channel window and the socket decide), so a slow router holds at most one chunk plus that
buffer. End of file from the router is `anyio.EndOfStream`; a lost connection is
`anyio.BrokenResourceError`. `aclose` closes the channel (not the SSH connection: its owner,
`rtr_server.ssh`, closes that when the channel is gone); `ClientSshByteStream`, the client's
(`upstream.ssh_connect`), owns its connection and closes it too.
"""

from __future__ import annotations

import anyio
import asyncssh
from anyio.abc import ByteStream

__all__ = ["ClientSshByteStream", "SshByteStream"]


class SshByteStream(ByteStream):
    """The bytes of one ``rpki-rtr`` subsystem channel."""

    def __init__(
        self, reader: asyncssh.SSHReader[bytes], writer: asyncssh.SSHWriter[bytes]
    ) -> None:
        """Wrap the channel's stdin reader and stdout writer (binary: no encoding)."""
        self._reader = reader
        self._writer = writer
        self._closed = False

    async def receive(self, max_bytes: int = 65536) -> bytes:
        """Up to ``max_bytes`` from the router; raises EndOfStream at its end of file."""
        if self._closed:
            raise anyio.ClosedResourceError
        try:
            data = await self._reader.read(max_bytes)
        except (asyncssh.Error, OSError) as exc:
            raise anyio.BrokenResourceError(str(exc)) from exc
        if not data:
            if self._writer.channel.is_closing():
                raise anyio.BrokenResourceError("SSH channel closed")
            raise anyio.EndOfStream
        return data

    async def send(self, item: bytes) -> None:
        """Write ``item``; returns once asyncssh's buffer has room again (backpressure)."""
        if self._closed:
            raise anyio.ClosedResourceError
        if self._writer.channel.is_closing():
            raise anyio.BrokenResourceError("SSH channel closed")
        try:
            self._writer.write(bytes(item))
            await self._writer.drain()
        except (asyncssh.Error, OSError) as exc:
            raise anyio.BrokenResourceError(str(exc)) from exc

    async def send_eof(self) -> None:
        """Send end of file on the channel (the router may still send)."""
        if not self._closed and not self._writer.channel.is_closing():
            self._writer.write_eof()

    async def aclose(self) -> None:
        """Close the channel; idempotent."""
        if self._closed:
            return
        self._closed = True
        channel = self._writer.channel
        channel.close()
        with anyio.move_on_after(1.0, shield=True):
            await channel.wait_closed()


class ClientSshByteStream(SshByteStream):
    """The subsystem channel of a client; closing it closes the SSH connection it owns."""

    def __init__(
        self,
        conn: asyncssh.SSHClientConnection,
        reader: asyncssh.SSHReader[bytes],
        writer: asyncssh.SSHWriter[bytes],
    ) -> None:
        super().__init__(reader, writer)
        self._conn = conn

    async def aclose(self) -> None:
        try:
            await super().aclose()
        finally:
            self._conn.close()
