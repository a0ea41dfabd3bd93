"""`RawSocketStream`: a plain-TCP router connection as an anyio `SocketStream` over its own socket.

Non-blocking ``recv``/``send`` on the socket, waiting with `anyio.wait_readable` /
`anyio.wait_writable` only when it would block: no transport, protocol object or read buffer
lives in user space (anyio's asyncio streams keep a transport, a read queue and two events per
connection). So nothing the router sent can be waiting in this process while the connection is
idle, and an idle session can be parked with just its socket in an epoll set
(`rtr_server.parking`). TLS wraps this stream like any other.
"""

from __future__ import annotations

import socket

import anyio
from anyio.abc import SocketStream
from anyio.lowlevel import checkpoint, checkpoint_if_cancelled

__all__ = ["RawSocketStream"]


class RawSocketStream(SocketStream):
    """A connected TCP socket (owned: `aclose` closes it) read and written without buffering."""

    __slots__ = ("_closed", "_sock")

    def __init__(self, sock: socket.socket) -> None:
        """Take ``sock`` (connected); it is made non-blocking."""
        sock.settimeout(0.0)
        self._sock = sock
        self._closed = False

    @property
    def _raw_socket(self) -> socket.socket:
        return self._sock

    def fileno(self) -> int:
        """The socket's descriptor (-1 once closed)."""
        return self._sock.fileno()

    async def receive(self, max_bytes: int = 65536) -> bytes:
        """What the router sent (at least one octet); `anyio.EndOfStream` when it closed."""
        await checkpoint_if_cancelled()
        while (data := self.receive_nowait(max_bytes)) is None:
            await anyio.wait_readable(self._sock)
        if not data:
            raise anyio.EndOfStream
        return data

    def receive_nowait(self, max_bytes: int = 65536) -> bytes | None:
        """What the router sent and is waiting now; None: nothing; b"": the router closed."""
        if self._closed:
            raise anyio.ClosedResourceError
        try:
            return self._sock.recv(max_bytes)
        except BlockingIOError:
            return None
        except OSError as exc:
            raise anyio.BrokenResourceError from exc

    async def send(self, item: bytes) -> None:
        """Write all of ``item``, waiting while the socket buffer is full."""
        view = memoryview(item)
        while view:
            sent = self.send_nowait(view)
            if sent:
                view = view[sent:]
            else:
                await anyio.wait_writable(self._sock)
        await checkpoint()  # a writer the router keeps up with still lets others run

    def send_nowait(self, item: bytes | memoryview) -> int:
        """Write what the socket buffer takes now; the octets written (0: nothing fits).

        Raises:
            anyio.BrokenResourceError: the connection is gone.
        """
        if self._closed:
            raise anyio.ClosedResourceError
        try:
            return self._sock.send(item)
        except BlockingIOError:
            return 0
        except OSError as exc:
            raise anyio.BrokenResourceError from exc

    async def send_eof(self) -> None:
        """Shut the sending side."""
        try:
            self._sock.shutdown(socket.SHUT_WR)
        except OSError as exc:
            raise anyio.BrokenResourceError from exc

    async def aclose(self) -> None:
        """Close the socket (idempotent); a task waiting on it gets `anyio.ClosedResourceError`."""
        if not self._closed:
            self._closed = True
            if self._sock.fileno() >= 0:
                anyio.notify_closing(self._sock)
            self._sock.close()
        await checkpoint()
