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
* **Proxies.** `proxy_map` reads and checks the environment's proxies (``HTTP_PROXY``,
  ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``, lower case too; `environment_proxies`, httpx's
  own rules; the source does it once, in its ``prepare``) and `owned_client` mounts an
  `OwnedTransport` for each: its httpcore proxy pool
  (``AsyncHTTPProxy``: forwarding for http, ``CONNECT`` tunnels for https) connects to the proxy
  through `OwnedBackend` as well, so a tunnelled or proxied connection keeps the same owner,
  deadlines and close-on-cancel as a direct one. A SOCKS proxy is refused with
  `ProxySetupError` (a `SourceSetupError`) before any network activity unless ``socksio`` is
  installed; a proxy of another scheme is refused the same way.
* Nothing changes global network behaviour (no patched module, no default socket option).
"""

from __future__ import annotations

import importlib.util
import ipaddress
import ssl
import typing
import urllib.request
from collections.abc import Iterable, Mapping

import anyio
import httpcore
import httpx

from upstream.source import SourceSetupError

__all__ = [
    "OwnedBackend",
    "OwnedStream",
    "OwnedTransport",
    "ProxySetupError",
    "environment_proxies",
    "owned_client",
    "proxy_map",
]

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
    """httpx's default transport whose pool (direct, or to ``proxy``) connects by `OwnedBackend`."""

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | bool,
        limits: httpx.Limits,
        proxy: httpx.Proxy | None = None,
    ) -> None:
        super().__init__(verify=verify, limits=limits, proxy=proxy)
        pool = self._pool
        # httpcore's pool keeps its backend in this attribute (httpcore 1.0); fail loudly if not.
        backend = pool._network_backend  # noqa: SLF001
        assert isinstance(backend, httpcore.AsyncNetworkBackend)
        pool._network_backend = OwnedBackend(backend)  # noqa: SLF001


class ProxySetupError(SourceSetupError):
    """A proxy named by the environment cannot be used (no I/O was done)."""


def environment_proxies() -> dict[str, str | None]:
    """The environment's proxies as httpx mount patterns (None: no proxy for that pattern).

    httpx's own rules (``urllib.request.getproxies``; ``NO_PROXY`` as curl reads it, ``*``
    turning every proxy off).
    """
    info = urllib.request.getproxies()
    mounts: dict[str, str | None] = {}
    for scheme in ("http", "https", "all"):
        if info.get(scheme):
            url = info[scheme]
            mounts[f"{scheme}://"] = url if "://" in url else f"http://{url}"
    for host in (h.strip() for h in info.get("no", "").split(",")):
        if host == "*":
            return {}
        if not host:
            continue
        if "://" in host:
            mounts[host] = None
        elif _is_ip(host, 4) or host.lower() == "localhost":
            mounts[f"all://{host}"] = None
        elif _is_ip(host, 6):
            mounts[f"all://[{host}]"] = None
        else:
            mounts[f"all://*{host}"] = None
    return mounts


def _is_ip(host: str, version: int) -> bool:
    try:
        return ipaddress.ip_address(host.split("/", maxsplit=1)[0]).version == version
    except ValueError:
        return False


def proxy_map() -> dict[str, httpx.Proxy | None]:
    """The environment's proxies, checked (no I/O): mount pattern to proxy (None: direct).

    Raises:
        ProxySetupError: a proxy of the environment cannot be used (see the module); the
            message never quotes the proxy URL (it may hold credentials).
    """
    proxies: dict[str, httpx.Proxy | None] = {}
    for pattern, url in environment_proxies().items():
        if url is None:
            proxies[pattern] = None
            continue
        try:
            scheme = httpx.URL(url).scheme
        except (httpx.InvalidURL, ValueError, TypeError):
            scheme = ""
        if scheme in ("socks5", "socks5h") and importlib.util.find_spec("socksio") is None:
            raise ProxySetupError(
                f"proxy for {pattern} in the environment is a SOCKS proxy, which needs the "
                "socksio package (not installed)"
            )
        if scheme and scheme not in ("http", "https", "socks5", "socks5h"):
            raise ProxySetupError(
                f"proxy for {pattern} in the environment: unsupported scheme {scheme[:20]!r}"
            )
        try:
            proxies[pattern] = httpx.Proxy(url)
        except (httpx.InvalidURL, ValueError, TypeError):
            raise ProxySetupError(f"proxy for {pattern} in the environment: bad URL") from None
    return proxies


def owned_client(
    *,
    verify: ssl.SSLContext | bool,
    timeout: httpx.Timeout,
    limits: httpx.Limits,
    proxies: Mapping[str, httpx.Proxy | None],
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` whose every connection, direct or through ``proxies``, is owned.

    ``proxies`` come from `proxy_map`; each proxy gets an `OwnedTransport` of its own.
    """
    mounts: dict[str, httpx.AsyncBaseTransport | None] = {}
    for pattern, proxy in proxies.items():
        mounts[pattern] = (
            None if proxy is None else OwnedTransport(verify=verify, limits=limits, proxy=proxy)
        )
    return httpx.AsyncClient(
        verify=verify,
        timeout=timeout,
        follow_redirects=False,
        limits=limits,
        transport=OwnedTransport(verify=verify, limits=limits),
        mounts=mounts,
    )
