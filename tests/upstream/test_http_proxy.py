"""Environment proxies go through the owned transport (L-10): a loopback proxy, asyncio and trio."""

from __future__ import annotations

import importlib.util
import select
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator

import anyio
import pytest

from tests.upstream.helpers import export, wait_for
from tests.upstream.http_server import RawServer, Reply, ScriptedServer, never_answer, open_fds
from tests.upstream.test_http_source import Recorder, source_for
from upstream.http_network import ProxySetupError, environment_proxies
from upstream.source import SourceSetupError

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("error::ResourceWarning")]

BODY = export([("192.0.2.0/24", 24, 64496)])


class LoopbackProxy:
    """An HTTP proxy on 127.0.0.1: forwards absolute-URL requests and tunnels ``CONNECT``.

    `requests` holds every request line; `client_closed` counts connections whose client side
    closed first (the proxy then closes its upstream side too).
    """

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.02)
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.requests: list[str] = []
        self.client_closed = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(5)
        for thread in self._threads:
            thread.join(5)
        self._sock.close()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            thread = threading.Thread(target=self._handle, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            data = b""
            while b"\r\n\r\n" not in data:
                piece = conn.recv(4096)
                if not piece:
                    return
                data += piece
            head, _, rest = data.partition(b"\r\n\r\n")
            line = head.split(b"\r\n", 1)[0].decode("ascii")
            with self._lock:
                self.requests.append(line)
            method, target, _ = line.split(" ")
            if method == "CONNECT":
                host, _, port = target.rpartition(":")
                upstream = socket.create_connection((host, int(port)), timeout=5)
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                first = rest
            else:
                url = urllib.parse.urlsplit(target)
                assert url.hostname is not None
                upstream = socket.create_connection((url.hostname, url.port or 80), timeout=5)
                path = url.path + (f"?{url.query}" if url.query else "")
                first = f"{method} {path} HTTP/1.1".encode() + head[len(line) :] + b"\r\n\r\n"
                first += rest
            with upstream:
                if first:
                    upstream.sendall(first)
                if self._pipe(conn, upstream):
                    with self._lock:
                        self.client_closed += 1

    def _pipe(self, conn: socket.socket, upstream: socket.socket) -> bool:
        """Copy both ways until one side closes; True when the client's side closed first."""
        while not self._stopping.is_set():
            ready, _, _ = select.select([conn, upstream], [], [], 0.02)
            for sock in ready:
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    return sock is conn
                (upstream if sock is conn else conn).sendall(data)
        return False


@pytest.fixture
def proxy() -> Iterator[LoopbackProxy]:
    p = LoopbackProxy()
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    srv = ScriptedServer()
    try:
        yield srv
    finally:
        srv.close()


async def test_plain_http_goes_through_the_environment_proxy(
    proxy: LoopbackProxy, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    server.script(Reply(200, BODY))
    source = source_for(server.url())
    sink = Recorder()
    with anyio.fail_after(5):
        assert await source.check(sink)
    assert len(sink.payloads) == 1
    assert proxy.requests == [f"GET {server.url()} HTTP/1.1"]
    await wait_for(lambda: proxy.client_closed == 1)  # the owned client closed its connection


async def test_no_proxy_names_a_direct_host(
    proxy: LoopbackProxy, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    server.script(Reply(200, BODY))
    source = source_for(server.url())
    with anyio.fail_after(5):
        assert await source.check(Recorder())
    assert proxy.requests == []
    assert len(server.requests) == 1


@pytest.mark.parametrize("how", ["timeout", "cancel"])
async def test_a_tls_handshake_through_a_connect_tunnel_that_never_completes(
    proxy: LoopbackProxy, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The tunnel's socket is closed before a timeout or a cancellation propagates."""
    srv = RawServer(never_answer)
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    try:
        source = source_for(srv.url("https"), verify=False, read_timeout=30.0, connect_timeout=0.3)
        await source.prepare()
        before = open_fds()
        started = time.monotonic()
        with anyio.fail_after(5):
            if how == "timeout":
                assert not await source.check(Recorder())
                assert source.status.errors == {"environment": 1}
            else:
                with anyio.move_on_after(0.3):
                    await source.check(Recorder())
                assert source.status.errors == {}
        assert time.monotonic() - started < 2
        assert proxy.requests == [f"CONNECT 127.0.0.1:{srv.port} HTTP/1.1"]
        await wait_for(lambda: proxy.client_closed == 1)
        await wait_for(lambda: srv.peer_closed == 1)
        await wait_for(lambda: open_fds() <= before)  # the proxy's own sockets closed too
    finally:
        srv.close()


@pytest.mark.parametrize("how", ["timeout", "cancel"])
async def test_a_tls_handshake_with_an_https_proxy_that_never_completes(
    monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The socket to the proxy is closed before a timeout or a cancellation propagates.

    It is connected by `OwnedBackend`: httpx's own proxy transport closes it only on an ordinary
    exception, so a cancelled handshake with the proxy would leave it to the garbage collector.
    """
    silent_proxy = RawServer(never_answer)
    monkeypatch.setenv("HTTP_PROXY", f"https://127.0.0.1:{silent_proxy.port}")
    try:
        source = source_for("http://127.0.0.1:9/export.json", connect_timeout=0.3)
        await source.prepare()
        before = open_fds()
        with anyio.fail_after(5):
            if how == "timeout":
                assert not await source.check(Recorder())
                assert source.status.errors == {"environment": 1}
            else:
                with anyio.move_on_after(0.3):
                    await source.check(Recorder())
                assert source.status.errors == {}
        await wait_for(lambda: silent_proxy.peer_closed == 1)
        assert silent_proxy.accepted == 1
        assert open_fds() <= before
    finally:
        silent_proxy.close()


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("socks5://user:secret@127.0.0.1:1080", "socksio"),
        ("ftp://user:secret@127.0.0.1:21", "unsupported scheme 'ftp'"),
        ("http://user:secret@[::1", "bad URL"),
    ],
)
async def test_a_proxy_that_cannot_be_used_is_refused_before_any_network(
    monkeypatch: pytest.MonkeyPatch, value: str, why: str
) -> None:
    if why == "socksio" and importlib.util.find_spec("socksio") is not None:
        pytest.skip("socksio is installed: a SOCKS proxy is usable")
    monkeypatch.setenv("ALL_PROXY", value)
    source = source_for("https://127.0.0.1:9/export.json")
    with pytest.raises(ProxySetupError) as refused:
        await source.prepare()
    assert isinstance(refused.value, SourceSetupError)
    assert why in str(refused.value)
    assert "secret" not in str(refused.value)
    assert source.status.attempted is False


def test_environment_proxies_follow_httpx_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "127.0.0.1:3128")
    monkeypatch.setenv("NO_PROXY", "localhost, .example.net,10.0.0.1,::1")
    assert environment_proxies() == {
        "https://": "http://127.0.0.1:3128",
        "all://localhost": None,
        "all://*.example.net": None,
        "all://10.0.0.1": None,
        "all://[::1]": None,
    }
    monkeypatch.setenv("NO_PROXY", "*")
    assert environment_proxies() == {}
