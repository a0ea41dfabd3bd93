"""`HttpServer` over real loopback TCP: keep-alive, HEAD, refusals, limits and timeouts."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import httpx
import pytest
from anyio.abc import SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from rtr_server.http.server import HttpServer
from rtr_server.http.settings import HttpSettings, parse_http_address
from rtr_server.http.wire import Request, Response
from tests.http.helpers import LOOPBACK
from tests.server.helpers import wait_until
from tests.server.rtr_client import TIMEOUT

pytestmark = pytest.mark.anyio

BIG = bytes(range(256)) * 4096 * 32  # 32 MiB: more than loopback socket buffers absorb


async def echo(request: Request) -> Response:
    """Answers with the method and path; /big with `BIG`; /boom raises."""
    if request.path == "/boom":
        raise RuntimeError("handler bug")
    if request.path == "/big":
        return Response(200, BIG, "application/octet-stream")
    return Response(200, f"{request.method} {request.path}\n".encode())


@asynccontextmanager
async def serving(**overrides: object) -> AsyncIterator[tuple[HttpServer, int]]:
    server = HttpServer(HttpSettings(LOOPBACK, **overrides), echo)  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(TIMEOUT):
            addresses = await tg.start(server.serve)
        try:
            yield server, addresses[0][1]
        finally:
            tg.cancel_scope.cancel()


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes


class RawClient:
    """A plain TCP client that reads responses framed by Content-Length."""

    def __init__(self, stream: SocketStream) -> None:
        self.stream = stream
        self.buffered = BufferedByteReceiveStream(stream)

    @classmethod
    @asynccontextmanager
    async def connect(cls, port: int) -> AsyncIterator[RawClient]:
        with anyio.fail_after(TIMEOUT):
            stream = await anyio.connect_tcp("127.0.0.1", port)
        async with stream:
            yield cls(stream)

    async def send(self, data: bytes) -> None:
        with anyio.fail_after(TIMEOUT):
            await self.stream.send(data)

    async def response(self, *, head_only: bool = False) -> RawResponse:
        with anyio.fail_after(TIMEOUT):
            head = await self.buffered.receive_until(b"\r\n\r\n", 65536)
            status_line, *lines = head.decode("latin-1").split("\r\n")
            headers = {}
            for line in lines:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            size = 0 if head_only else int(headers.get("content-length", "0"))
            body = await self.buffered.receive_exactly(size) if size else b""
        return RawResponse(int(status_line.split(" ")[1]), headers, body)

    async def closed(self) -> bool:
        """True when the server closes the connection (within the test timeout)."""
        with anyio.fail_after(TIMEOUT):
            try:
                data = await self.buffered.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
                return True
        raise AssertionError(f"expected a close, got {data!r}")


def get(path: str, *extra: str, method: str = "GET") -> bytes:
    return "\r\n".join([f"{method} {path} HTTP/1.1", "Host: t", *extra, "", ""]).encode()


async def test_keep_alive_pipelining_and_head() -> None:
    async with serving() as (server, port), RawClient.connect(port) as client:
        # Two requests in one segment, then a HEAD: three responses on one connection.
        await client.send(get("/a") + get("/b"))
        first, second = await client.response(), await client.response()
        assert (first.status, first.body) == (200, b"GET /a\n")
        assert second.body == b"GET /b\n"
        assert "connection" not in second.headers
        await client.send(get("/c", method="HEAD"))
        head = await client.response(head_only=True)
        assert head.headers["content-length"] == str(len(b"HEAD /c\n"))
        await client.send(get("/d", "Connection: close"))
        last = await client.response()
        assert last.body == b"GET /d\n"
        assert last.headers["connection"] == "close"
        assert await client.closed()
        assert server.stats.connections == 1


async def test_httpx_round_trip_and_big_body() -> None:
    async with serving() as (_, port), httpx.AsyncClient(timeout=TIMEOUT) as client:
        response = await client.get(f"http://127.0.0.1:{port}/big")
        assert response.status_code == 200
        assert response.content == BIG
        assert "date" in response.headers


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (get("/", method="POST"), 405),
        (b"GET / HTTP/1.1\r\n\r\n", 400),
        (b"GET / HTTP/3.0\r\nHost: t\r\n\r\n", 505),
        (get("/", "Content-Length: 3") + b"abc", 400),
    ],
)
async def test_refused_requests_close_the_connection(request_bytes: bytes, status: int) -> None:
    async with serving() as (server, port), RawClient.connect(port) as client:
        await client.send(request_bytes)
        response = await client.response()
        assert response.status == status
        assert response.headers["connection"] == "close"
        assert await client.closed()
        assert server.stats.refused[status] == 1


async def test_oversized_head_gets_431() -> None:
    async with serving(max_request_bytes=1024) as (_, port), RawClient.connect(port) as client:
        await client.send(get("/", "X-Filler: " + "a" * 2000))
        assert (await client.response()).status == 431
        assert await client.closed()


async def test_slow_request_gets_408_and_idle_connection_is_closed() -> None:
    async with serving(request_timeout=0.3) as (server, port):
        async with RawClient.connect(port) as client:
            await client.send(b"GET / HTTP/1.1\r\n")  # never finished
            assert (await client.response()).status == 408
            assert await client.closed()
        async with RawClient.connect(port) as idle:
            assert await idle.closed()  # nothing sent: closed without a response
        assert server.stats.request_timeouts == 2


async def test_connection_limit() -> None:
    async with serving(max_connections=1) as (server, port):
        async with RawClient.connect(port) as first:
            await first.send(get("/x"))
            assert (await first.response()).status == 200
            async with RawClient.connect(port) as second:
                refused = await second.response()
                assert refused.status == 503
                assert await second.closed()
            assert server.stats.rejected_connections == 1
        await wait_until(lambda: server.active == 0, what="the first connection to end")
        async with RawClient.connect(port) as third:
            await third.send(get("/y"))
            assert (await third.response()).body == b"GET /y\n"


async def test_requests_per_connection_limit() -> None:
    async with serving(max_requests_per_connection=2) as (_, port), RawClient.connect(port) as c:
        await c.send(get("/1"))
        assert "connection" not in (await c.response()).headers
        await c.send(get("/2"))
        assert (await c.response()).headers["connection"] == "close"
        assert await c.closed()


async def test_handler_error_is_a_500(caplog: pytest.LogCaptureFixture) -> None:
    async with serving() as (server, port), RawClient.connect(port) as client:
        await client.send(get("/boom"))
        response = await client.response()
        assert response.status == 500
        assert b"handler bug" not in response.body
        assert await client.closed()
        assert server.stats.handler_errors == 1
    assert "handler bug" in caplog.text


async def test_client_that_does_not_read_is_dropped() -> None:
    async with serving(write_timeout=0.3) as (server, port):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(TIMEOUT)
            sock.connect(("127.0.0.1", port))
            sock.sendall(get("/big"))
            await wait_until(lambda: server.stats.write_timeouts == 1, what="the drop")
            await wait_until(lambda: server.active == 0, what="the close")
        finally:
            sock.close()


async def test_serve_reports_addresses_and_cancel_closes_connections() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as (server, port):
            assert server.addresses == [("127.0.0.1", port)]
            stream = await anyio.connect_tcp("127.0.0.1", port)
            client = RawClient(stream)
            await client.send(get("/"))
            assert (await client.response()).status == 200
            assert server.active == 1
        # serve() was cancelled with a keep-alive connection open: that connection is closed.
        async with stream:
            assert await client.closed()


def test_http_address_needs_a_host() -> None:
    assert parse_http_address("127.0.0.1:8080").port == 8080
    assert parse_http_address("[::1]:8080").host == "::1"
    with pytest.raises(ValueError, match="no host"):
        parse_http_address(":8080")
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_http_address("8080")


# ------------------------------------------------------------------ framing over real TCP


async def send_in_pieces(client: RawClient, data: bytes, sizes: list[int]) -> None:
    """Send ``data`` cut into pieces of ``sizes`` (then the rest), pausing after each send."""
    offset = 0
    for size in sizes:
        await client.send(data[offset : offset + size])
        offset += size
        await anyio.sleep(0.002)  # lets the server read each piece on its own
    if offset < len(data):
        await client.send(data[offset:])


async def test_request_dripped_byte_by_byte() -> None:
    request = get("/drip", "X-Filler: " + "v" * 40)
    async with serving() as (server, port), RawClient.connect(port) as client:
        await send_in_pieces(client, request, [1] * len(request))
        response = await client.response()
        assert (response.status, response.body) == (200, b"GET /drip\n")
        # The connection stays usable: a second request, in 3-byte pieces.
        second = get("/again", "Connection: close")
        await send_in_pieces(client, second, [3] * (len(second) // 3))
        assert (await client.response()).body == b"GET /again\n"
        assert await client.closed()
        assert server.stats.connections == 1
        assert not server.stats.refused


@pytest.mark.parametrize("cut", ["in-first-head", "at-boundary", "in-empty-line", "in-second"])
async def test_pipelined_pair_split_anywhere(cut: str) -> None:
    first = get("/a")
    # An empty line between pipelined requests is ignored (RFC 9112 §2.2).
    data = first + b"\r\n" + get("/b", "Connection: close")
    at = {
        "in-first-head": len(first) // 2,
        "at-boundary": len(first),
        "in-empty-line": len(first) + 1,
        "in-second": len(first) + 10,
    }[cut]
    async with serving() as (server, port), RawClient.connect(port) as client:
        await send_in_pieces(client, data, [at])
        one, two = await client.response(), await client.response()
        assert (one.status, one.body) == (200, b"GET /a\n")
        assert "connection" not in one.headers
        assert (two.status, two.body) == (200, b"GET /b\n")
        assert two.headers["connection"] == "close"
        assert await client.closed()
        assert not server.stats.refused


def sized_request(size: int) -> bytes:
    """A GET whose head (up to and including its empty line) is exactly ``size`` bytes."""
    base = get("/", "X-Pad: ")
    return get("/", "X-Pad: " + "p" * (size - len(base)))


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (sized_request(1024), 200),
        (sized_request(1025), 431),
        (sized_request(1025)[:1024], 431),  # 1024 bytes and no end of the head yet
        (b"\r\n\r\n", 400),  # an empty request
    ],
)
async def test_head_size_limit_is_exact(data: bytes, status: int) -> None:
    async with serving(max_request_bytes=1024) as (_, port), RawClient.connect(port) as client:
        await client.send(data)
        assert (await client.response()).status == status


async def test_a_begun_request_that_is_only_an_empty_line_times_out_with_408() -> None:
    async with serving(request_timeout=0.3) as (server, port), RawClient.connect(port) as client:
        await client.send(b"\r\n")
        assert (await client.response()).status == 408
        assert await client.closed()
        assert server.stats.refused[408] == 1


async def test_a_head_ending_in_bare_line_feeds_is_served() -> None:
    """On the wire as in the parser (RFC 9112 §2.2: LF alone may end a line)."""
    async with serving(request_timeout=2.0) as (_, port), RawClient.connect(port) as client:
        await client.send(b"GET /lf HTTP/1.1\nHost: t\nConnection: close\n\n")
        assert (await client.response()).body == b"GET /lf\n"
