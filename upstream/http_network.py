"""The owned HTTP transport's network backend: every socket keeps one owner through connect and TLS.

Contract:

* `OwnedTransport` is httpx's own `httpx.AsyncHTTPTransport` (its pool, limits, TLS context and
  exception mapping unchanged) whose httpcore pool connects through `OwnedBackend`.
* `OwnedBackend` delegates to httpcore's backend for the running library; the TCP connect
  (AnyIO's, or trio's: the multi-address race closes its losers) and every read and write keep
  their deadlines and cancellation — nothing here shields a network wait.
* `OwnedStream.start_tls` closes the plain socket when the handshake ends with *any* exception,
  cancellation included, before it propagates (httpcore closes it only for an ordinary
  exception, so a cancelled handshake would leave the socket to the garbage collector). The
  close is shielded from AnyIO cancellation; it does not wait on the network.
* Nothing changes global network behaviour (no patched module, no default socket option).
"""

from __future__ import annotations

import ssl
import typing
from collections.abc import Iterable

import anyio
import httpcore
import httpx

__all__ = ["OwnedBackend", "OwnedStream", "OwnedTransport"]

SocketOption = (
    tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
)


class OwnedStream(httpcore.AsyncNetworkStream):
    """A connected stream whose TLS upgrade never leaves the plain socket without its owner."""

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        """Read from the socket per call (no background receive queue)."""
        return await self._stream.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Write ``buffer`` within ``timeout``."""
        await self._stream.write(buffer, timeout)

    async def aclose(self) -> None:
        """Close the socket (or the TLS stream over it)."""
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 — httpcore's interface
    ) -> httpcore.AsyncNetworkStream:
        """The TLS stream; on any exception (cancellation too) the socket is closed first."""
        try:
            upgraded = await self._stream.start_tls(ssl_context, server_hostname, timeout)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._stream.aclose()
            raise
        return OwnedStream(upgraded)

    def get_extra_info(self, info: str) -> typing.Any:
        """What the wrapped stream tells (``ssl_object``, ``server_addr``, ``is_readable`` ...)."""
        return self._stream.get_extra_info(info)


class OwnedBackend(httpcore.AsyncNetworkBackend):
    """Connects through ``backend`` and hands out `OwnedStream` objects."""

    def __init__(self, backend: httpcore.AsyncNetworkBackend) -> None:
        self._backend = backend

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 — httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """The TCP connection (deadline and cancellation as the wrapped backend keeps them)."""
        stream = await self._backend.connect_tcp(
            host, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )
        return OwnedStream(stream)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 — httpcore's interface
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """A Unix socket connection (unused by the sources; kept for completeness)."""
        stream = await self._backend.connect_unix_socket(
            path, timeout=timeout, socket_options=socket_options
        )
        return OwnedStream(stream)

    async def sleep(self, seconds: float) -> None:
        """Sleep as the wrapped backend does."""
        await self._backend.sleep(seconds)


class OwnedTransport(httpx.AsyncHTTPTransport):
    """httpx's default transport whose pool connects through `OwnedBackend`."""

    def __init__(self, *, verify: ssl.SSLContext | bool, limits: httpx.Limits) -> None:
        super().__init__(verify=verify, limits=limits)
        pool = self._pool
        # httpcore's pool keeps its backend in this attribute (httpcore 1.0); fail loudly if not.
        backend = pool._network_backend  # noqa: SLF001
        assert isinstance(backend, httpcore.AsyncNetworkBackend)
        pool._network_backend = OwnedBackend(backend)  # noqa: SLF001
