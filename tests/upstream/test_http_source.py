"""`HttpSource` against a loopback HTTP server (and httpx.MockTransport), on asyncio and trio."""

from __future__ import annotations

import bz2
import gzip
import logging
import lzma
import threading
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import httpx
import pytest

import upstream.http_body
from tests.clock import FakeClock
from tests.upstream.helpers import export, wait_for
from tests.upstream.http_server import Reply, ScriptedServer
from upstream.decompress import decompress
from upstream.format_error import FormatError
from upstream.http_body import PollError, decompress_bounded
from upstream.http_rules import parse_http_url, user_agent
from upstream.http_source import HttpSource
from upstream.json_format import parse_export
from upstream.payload import SourcePayload
from upstream.pieces import PieceMemo
from upstream.source import Delivery, SourceSetupError
from upstream.status import SourceState

V1 = [("192.0.2.0/24", 24, 64496)]
V2 = [("192.0.2.0/24", 24, 64496), ("2001:db8::/32", 48, 64497)]
V3 = [("198.51.100.0/24", 24, 64498)]
BODY1, BODY2, BODY3 = export(V1), export(V2), export(V3)
GARBAGE = b'{"roas": [{"prefix": "10.0.0.1/8", "asn": 64496'
LAST_MODIFIED = "Wed, 21 Oct 2015 07:28:00 GMT"
SECRET = "s3cr3t-t0ken-value"
FAST = {
    "poll_interval": 0.05,
    "retry_initial": 0.05,
    "connect_timeout": 2.0,
    "read_timeout": 2.0,
    "total_timeout": 4.0,
}

pytestmark = [
    pytest.mark.anyio,
    # A body left early (size limit, cancellation) is unrolled after the response is closed, so
    # httpx's and httpcore's nested async generators end instead of being left to the garbage
    # collector (on trio each would warn, encode/httpx#3686): any ResourceWarning fails a test.
    pytest.mark.filterwarnings("error::ResourceWarning"),
]


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The owned client honours proxy variables; the loopback tests must not go through one."""
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    srv = ScriptedServer()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture
def other_server() -> Iterator[ScriptedServer]:
    srv = ScriptedServer()
    try:
        yield srv
    finally:
        srv.close()


class Recorder:
    """A sink that keeps what it is given."""

    def __init__(self) -> None:
        self.payloads: list[SourcePayload] = []
        self.deliveries: list[Delivery] = []

    def __call__(self, delivery: Delivery) -> None:
        self.deliveries.append(delivery)
        self.payloads.append(delivery.payload)

    def vrps(self) -> list[int]:
        return [p.counts()["vrp_v4"] + p.counts()["vrp_v6"] for p in self.payloads]


class RecordingSource(HttpSource):
    """Keeps every backoff delay chosen and every client it created."""

    def __init__(self, url: str, **kwargs: object) -> None:
        super().__init__(url, **kwargs)  # type: ignore[arg-type]
        self.delays: list[float] = []
        self.clients: list[httpx.AsyncClient] = []

    def _backoff(self, failure: PollError) -> float:
        delay = super()._backoff(failure)
        self.delays.append(delay)
        return delay

    def _make_client(self) -> httpx.AsyncClient:
        client = super()._make_client()
        self.clients.append(client)
        return client


def source_for(url: str, **kwargs: object) -> RecordingSource:
    return RecordingSource(url, **{"name": "test", **FAST, **kwargs})


def same(payload: SourcePayload, body: bytes) -> bool:
    return payload == parse_export(body)


def state(source: HttpSource) -> SourceState:
    """The current state (a call, so that mypy does not narrow it across awaits)."""
    return source.status.state


# ---------------------------------------------------------------- configuration, no I/O


BAD_URLS = [
    "",
    "ftp://example.net/export.json",
    "file:///tmp/export.json",
    "example.net/export.json",
    "http://",
    "http:///export.json",
    "https://:443/export.json",
    "http://example.net:0/x",
    "http://example.net:65536/x",
    "http://example.net:port/x",
    "http://exa mple.net/x",
    "http://example.net/x\n",
    " http://example.net/x",
    "http://[2001:db8::zz]/x",
    "http://user:pw-in-url@example.net/x",
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_bad_url_is_a_value_error_from_parse_and_constructor(url: str) -> None:
    with pytest.raises(ValueError, match="URL") as parsed:
        parse_http_url(url)
    with pytest.raises(ValueError, match="URL") as constructed:
        HttpSource(url)
    for exc in (parsed.value, constructed.value):
        assert "pw-in-url" not in str(exc)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/export.json",
        "https://rpki.example.net/json?format=rpki-client",
        "https://[2001:db8::1]:8443/rpki.json",
        "HTTPS://Example.NET/x.json.gz",
    ],
)
def test_good_url(url: str) -> None:
    assert parse_http_url(url).scheme in ("http", "https")
    source = HttpSource(url)
    assert source.status.kind == "http"
    assert source.status.state is SourceState.STARTING
    assert source.name == url


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"headers": {"Authorization": f"Bearer {SECRET}\r\nX-Evil: 1"}}, "printable"),
        ({"headers": {"Authorization": f"Bearer {SECRET} "}}, "blanks"),
        ({"headers": {"If-None-Match": "x"}}, "set by the source"),
        ({"headers": {"Bad Name": "x"}}, "header name"),
        ({"ca_file": "/nonexistent/ca.pem", "verify": False}, "verify"),
        ({"poll_interval": 0}, "poll_interval"),
        ({"max_bytes": 0}, "max_bytes"),
        ({"retry_initial": 5.0, "retry_max": 1.0}, "retry_max"),
    ],
)
def test_bad_options_are_value_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        HttpSource("https://example.net/x.json", **kwargs)  # type: ignore[arg-type]
    assert SECRET not in str(caught.value)


@pytest.mark.anyio
async def test_ca_file_is_loaded_by_prepare_not_by_the_constructor(tmp_path: Path) -> None:
    pem = tmp_path / "ca.pem"
    source = HttpSource("https://example.net/x.json", ca_file=pem)  # no file: no I/O yet
    with pytest.raises(SourceSetupError, match="CA file"):
        await source.prepare()
    pem.write_text("not a certificate\n")
    with pytest.raises(SourceSetupError, match="CA file"):
        await source.prepare()
    with pytest.raises(SourceSetupError, match="CA file"):
        await source.check(lambda delivery: None)  # a poll prepares first: no request made


def test_secret_headers_are_not_in_repr() -> None:
    source = HttpSource("https://example.net/x.json", headers={"X-Token": SECRET})
    assert SECRET not in repr(source)
    assert SECRET not in repr(vars(source))
    assert SECRET not in repr(source.status)


def test_backoff_doubles_with_jitter_up_to_the_cap_and_honours_retry_after() -> None:
    source = HttpSource("http://example.net/x", retry_initial=1.0, retry_max=8.0)
    failure = PollError("environment", "HTTP 503")
    for n, ceiling in enumerate([1.0, 2.0, 4.0, 8.0, 8.0, 8.0]):
        source.failures = n
        for _ in range(20):
            assert ceiling / 2 <= source._backoff(failure) <= ceiling
    source.failures = 10_000
    assert source._backoff(failure) <= 8.0
    source.failures = 0
    assert source._backoff(PollError("environment", "429", retry_after=5.0)) == 5.0
    assert source._backoff(PollError("environment", "429", retry_after=600.0)) == 8.0


def test_user_agent_names_rtr_serve() -> None:
    assert user_agent().startswith("rtr-serve/")


# ---------------------------------------------------------------- bounded decompression


def _samples() -> list[bytes]:
    body = BODY2 * 50
    return [
        body,
        gzip.compress(body),
        gzip.compress(body[:100]) + gzip.compress(body[100:]),  # two members
        gzip.compress(body) + b"\0" * 8,  # padding
        bz2.compress(body),
        bz2.compress(body[:100]) + bz2.compress(body[100:]),
        lzma.compress(body),
    ]


@pytest.mark.parametrize("data", _samples())
def test_bounded_decompression_matches_decompress(data: bytes) -> None:
    assert decompress_bounded(data, 1 << 20) == decompress(data)
    if data == decompress(data):
        return  # not compressed: the raw body was counted while it arrived
    with pytest.raises(PollError) as caught:
        decompress_bounded(data, 1000)
    assert caught.value.error_class == "size"
    assert "exceeds the limit of 1000 bytes" in caught.value.message


@pytest.mark.parametrize(
    "data",
    [
        gzip.compress(BODY2)[:-10],
        gzip.compress(BODY2) + b"trailing garbage",
        bz2.compress(BODY2)[:-5],
        lzma.compress(BODY2)[:-5],
        b"\x1f\x8b" + bytes(30),
    ],
)
def test_bounded_decompression_rejects_corrupt_data(data: bytes) -> None:
    with pytest.raises(FormatError, match="corrupt compressed data"):
        decompress_bounded(data, 1 << 20)


# ---------------------------------------------------------------- loopback HTTP


async def test_conditional_request_and_304_emit_nothing(server: ScriptedServer) -> None:
    etag = '"v1-abc"'
    server.script(
        Reply(200, BODY1, {"ETag": etag, "Last-Modified": LAST_MODIFIED}),
        Reply(304, headers={"ETag": etag}),
    )
    clock = FakeClock(wall=1_000.0, monotonic="real")
    source = source_for(server.url(), clock=clock)
    sink = Recorder()
    with anyio.fail_after(5):
        assert await source.check(sink)
        clock.set_wall(2_000.0)
        assert not await source.check(sink)
        assert not await source.check(sink)
    first, second, third = server.requests
    assert "if-none-match" not in first.headers
    assert "if-modified-since" not in first.headers
    assert first.headers["user-agent"] == user_agent()
    assert "gzip" in first.headers["accept-encoding"]
    for later in (second, third):
        assert later.headers["if-none-match"] == etag
        assert later.headers["if-modified-since"] == LAST_MODIFIED
    assert len(sink.payloads) == 1
    assert same(sink.payloads[0], BODY1)
    status = source.status
    assert status.state is SourceState.OK
    assert status.attempted
    assert status.errors == {}
    assert status.last_success_wall == 1_000.0  # a 304 refreshes nothing
    assert status.records == {"vrp_v4": 1, "vrp_v6": 0, "router_key": 0, "aspa": 0}
    assert status.bytes_read == len(BODY1)
    assert all(client.is_closed for client in source.clients)


async def test_identical_body_with_new_etag_emits_nothing(server: ScriptedServer) -> None:
    server.script(
        Reply(200, BODY1, {"ETag": '"a"'}),
        Reply(200, BODY1, {"ETag": '"b"'}),
        Reply(200, BODY2, {"ETag": '"c"'}),
    )
    source = source_for(server.url())
    sink = Recorder()
    with anyio.fail_after(5):
        assert await source.check(sink)
        assert not await source.check(sink)
        assert await source.check(sink)
    assert [r.headers.get("if-none-match") for r in server.requests] == [None, '"a"', '"b"']
    assert sink.vrps() == [1, 2]
    assert source.status.bytes_read == 2 * len(BODY1) + len(BODY2)
    assert source.status.errors == {}


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "raw-deflate", "gzip-file"])
async def test_compressed_bodies(server: ScriptedServer, encoding: str) -> None:
    body = BODY2
    if encoding == "gzip":
        reply = Reply(200, gzip.compress(body), {"Content-Encoding": "gzip"})
    elif encoding == "deflate":
        reply = Reply(200, zlib.compress(body), {"Content-Encoding": "deflate"})
    elif encoding == "raw-deflate":
        packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        raw = packer.compress(body) + packer.flush()
        reply = Reply(200, raw, {"Content-Encoding": "deflate"})
    else:
        reply = Reply(200, gzip.compress(body), {"Content-Type": "application/gzip"})
    server.script(reply)
    source = source_for(server.url())
    sink = Recorder()
    with anyio.fail_after(5):
        assert await source.check(sink)
    assert same(sink.payloads[0], body)
    assert source.status.bytes_read == len(reply.body)


@pytest.mark.parametrize("case", ["streamed", "content-length", "gzip-encoding", "gzip-file"])
async def test_body_over_max_bytes_is_rejected(server: ScriptedServer, case: str) -> None:
    limit = 64 * 1024
    if case == "streamed":  # no Content-Length: only counting while reading can stop it
        big = Reply(200, b"x" * 16384, endless=True)
    elif case == "content-length":
        big = Reply(200, b"x" * 16384, endless=True, length=100 * limit)
    elif case == "gzip-encoding":
        big = Reply(200, gzip.compress(bytes(50 * limit)), {"Content-Encoding": "gzip"})
    else:
        big = Reply(200, gzip.compress(b" " * (50 * limit)))
    server.script(Reply(200, BODY1), big)
    source = source_for(server.url(), max_bytes=limit)
    sink = Recorder()
    with anyio.fail_after(5):
        assert await source.check(sink)
        assert not await source.check(sink)
    status = source.status
    assert status.state is SourceState.ERROR
    assert status.errors == {"size": 1}
    assert status.last_error is not None
    assert f"limit of {limit} bytes" in status.last_error
    assert status.records == {"vrp_v4": 1, "vrp_v6": 0, "router_key": 0, "aspa": 0}
    assert len(sink.payloads) == 1
    assert status.bytes_read < 4 * limit
    if big.endless:
        # The client hung up instead of draining the body: the server's writes fail.
        await wait_for(lambda: server.disconnects == 1)
        assert server.body_bytes_sent < 100 * limit


async def test_slow_server_times_out_and_backoff_grows(server: ScriptedServer) -> None:
    slow = Reply(200, BODY1, delay=1.0)
    server.script(slow, slow, slow, Reply(200, BODY1))
    source = source_for(server.url(), read_timeout=0.1, retry_initial=0.05, poll_interval=30.0)
    sink = Recorder()
    async with anyio.create_task_group() as tg:
        tg.start_soon(source.run, sink)
        await wait_for(lambda: len(sink.payloads) == 1)
        tg.cancel_scope.cancel()
    assert source.status.errors == {"environment": 3}
    assert source.status.last_error is not None
    assert "ReadTimeout" in source.status.last_error
    assert source.status.state is SourceState.OK
    assert len(source.delays) == 3
    for n, delay in enumerate(source.delays):
        assert 0.05 * 2**n / 2 <= delay <= 0.05 * 2**n
    assert source.delays == sorted(source.delays)
    assert source.failures == 0
    assert source.next_delay == 30.0
    assert all(client.is_closed for client in source.clients)


async def test_total_timeout_bounds_a_dripping_body(server: ScriptedServer) -> None:
    server.script(Reply(200, BODY1, piece=8, pause=0.05))
    source = source_for(server.url(), total_timeout=0.3)
    sink = Recorder()
    with anyio.fail_after(5):
        assert not await source.check(sink)
    assert source.status.errors == {"environment": 1}
    assert source.status.last_error == "no complete response within 0.3 s"
    assert sink.payloads == []
    await wait_for(lambda: server.disconnects == 1)


@pytest.mark.parametrize("code", [500, 503, 429])
async def test_server_error_is_retried_then_loaded(server: ScriptedServer, code: int) -> None:
    server.script(Reply(code, b"busy", {"Retry-After": "0"}), Reply(200, BODY2))
    source = source_for(server.url(), poll_interval=30.0)
    sink = Recorder()
    async with anyio.create_task_group() as tg:
        tg.start_soon(source.run, sink)
        await wait_for(lambda: len(sink.payloads) == 1)
        tg.cancel_scope.cancel()
    assert source.status.errors == {"environment": 1}
    assert source.status.last_error is not None
    assert source.status.last_error.startswith(f"HTTP {code}")
    assert same(sink.payloads[0], BODY2)
    assert len(source.delays) == 1
    assert source.failures == 0


@pytest.mark.parametrize("code", [401, 403, 404, 410])
async def test_client_errors_are_class_http_without_backoff(
    server: ScriptedServer, code: int
) -> None:
    server.script(Reply(code, b"no"))
    source = source_for(server.url(), poll_interval=0.05)
    sink = Recorder()
    async with anyio.create_task_group() as tg:
        tg.start_soon(source.run, sink)
        await wait_for(lambda: len(server.requests) >= 3)
        tg.cancel_scope.cancel()
    assert set(source.status.errors) == {"http"}
    assert source.status.last_error is not None
    assert source.status.last_error.startswith(f"HTTP {code}")
    assert source.delays == []
    assert source.next_delay == 0.05
    assert source.status.state is SourceState.ERROR
    assert source.status.attempted
    assert sink.payloads == []


async def test_unsupported_content_encoding_is_class_http(server: ScriptedServer) -> None:
    server.script(Reply(200, b"???", {"Content-Encoding": "br"}))
    source = source_for(server.url())
    with anyio.fail_after(5):
        assert not await source.check(Recorder())
    assert source.status.errors == {"http": 1}


async def test_garbage_is_rejected_once_and_old_payload_stays(server: ScriptedServer) -> None:
    server.script(
        Reply(200, BODY1, {"ETag": '"1"'}),
        Reply(200, GARBAGE, {"ETag": '"2"'}),
        Reply(304),  # the rejected content, unchanged
        Reply(200, GARBAGE),  # again, without validators: not parsed (nor counted) again
        Reply(200, BODY1, {"ETag": '"1"'}),  # the data in force is back
        Reply(200, gzip.compress(b"\x00garbage")),  # not JSON once decompressed
        Reply(200, BODY3),
    )
    source = source_for(server.url())
    sink = Recorder()
    with anyio.fail_after(5):
        assert await source.check(sink)
        assert not await source.check(sink)
        status = source.status
        assert status.state is SourceState.ERROR
        assert status.errors == {"format": 1}
        assert status.last_error is not None
        assert "JSON" in status.last_error
        assert not await source.check(sink)
        assert server.requests[2].headers["if-none-match"] == '"2"'
        assert not await source.check(sink)
        assert state(source) is SourceState.ERROR
        assert status.errors == {"format": 1}
        assert not await source.check(sink)
        assert state(source) is SourceState.OK
        assert not await source.check(sink)
        assert status.errors == {"format": 2}
        assert await source.check(sink)
    assert len(sink.payloads) == 2
    assert same(sink.payloads[0], BODY1)
    assert same(sink.payloads[1], BODY3)
    assert state(source) is SourceState.OK
    assert status.records == {"vrp_v4": 1, "vrp_v6": 0, "router_key": 0, "aspa": 0}


async def test_secret_header_is_sent_but_never_shown(
    server: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.script(
        Reply(500, b"oops"),
        Reply(403, b"forbidden"),
        Reply(200, GARBAGE),
        Reply(200, b'{"roas": [{"prefix": "' + SECRET.encode() + b'", "asn": 1}]}'),  # echoed
        Reply(200, b"x" * 5000),
        Reply(200, BODY1, delay=1.0),
        Reply(200, BODY1),
    )
    source = source_for(
        server.url(),
        headers={"Authorization": f"Bearer {SECRET}"},
        read_timeout=0.1,
        max_bytes=4000,
    )
    sink = Recorder()
    errors = []
    with anyio.fail_after(5):
        for _ in range(7):
            await source.check(sink)
            errors.append(source.status.last_error)
    assert len(sink.payloads) == 1
    assert set(source.status.errors) == {"environment", "http", "format", "size"}
    assert errors[3] is not None
    assert "roas[0]: prefix='***'" in errors[3]
    assert [r.headers.get("authorization") for r in server.requests] == [f"Bearer {SECRET}"] * 7
    assert caplog.records
    for record in caplog.records:
        assert SECRET not in record.getMessage()
    assert SECRET not in caplog.text
    assert all(e is not None and SECRET not in e for e in errors)
    assert SECRET not in repr(source)
    assert SECRET not in repr(source.status)


async def test_redirects_keep_secrets_on_their_origin(
    server: ScriptedServer, other_server: ScriptedServer
) -> None:
    server.script(
        Reply(301, headers={"Location": "/moved.json"}),
        Reply(302, headers={"Location": other_server.url("/elsewhere.json")}),
    )
    other_server.script(Reply(200, BODY2))
    source = source_for(server.url(), headers={"X-Token": SECRET})
    sink = Recorder()
    with anyio.fail_after(5):
        assert await source.check(sink)
    assert [r.path for r in server.requests] == ["/export.json", "/moved.json"]
    assert all(r.headers["x-token"] == SECRET for r in server.requests)
    (elsewhere,) = other_server.requests
    assert elsewhere.path == "/elsewhere.json"
    assert "x-token" not in elsewhere.headers
    assert same(sink.payloads[0], BODY2)


async def test_redirect_loop_is_class_http(server: ScriptedServer) -> None:
    server.script(Reply(302, headers={"Location": "/export.json"}))
    source = source_for(server.url())
    with anyio.fail_after(5):
        assert not await source.check(Recorder())
    assert source.status.errors == {"http": 1}
    assert source.status.last_error == "more than 5 redirects"
    assert len(server.requests) == 6


# ---------------------------------------------------------------- ownership and cancellation


async def test_redirect_from_https_to_http_is_refused() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.scheme == "https":
            return httpx.Response(302, headers={"Location": "http://example.net/x.json"})
        return httpx.Response(200, content=BODY1)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        source = source_for("https://example.net/x.json", client=client)
        with anyio.fail_after(5):
            assert not await source.check(Recorder())
    assert source.status.errors == {"http": 1}
    assert source.status.last_error == "HTTP 302 from https to plain http refused"


async def test_injected_client_is_not_closed() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(200, content=BODY1, headers={"ETag": '"x"'})

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    try:
        source = source_for("https://example.net/x.json", client=client)
        sink = Recorder()
        async with anyio.create_task_group() as tg:
            tg.start_soon(source.run, sink)
            await wait_for(lambda: calls >= 3)
            tg.cancel_scope.cancel()
        assert await source.check(sink) is False
        assert len(sink.payloads) == 1
        assert not client.is_closed
        assert source.clients == []
    finally:
        await client.aclose()


async def test_owned_client_is_closed_when_run_ends(server: ScriptedServer) -> None:
    server.script(Reply(200, BODY1))
    source = source_for(server.url())
    sink = Recorder()
    async with anyio.create_task_group() as tg:
        tg.start_soon(source.run, sink)
        await wait_for(lambda: len(sink.payloads) == 1)
        (client,) = source.clients
        assert not client.is_closed
        tg.cancel_scope.cancel()
    assert client.is_closed


async def test_cancelled_download_closes_the_connection(server: ScriptedServer) -> None:
    server.script(Reply(200, b"[" * 64, piece=1, pause=0.01, endless=True, length=10**6))
    source = source_for(server.url())
    with anyio.move_on_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(source.check, Recorder())
            await wait_for(lambda: server.body_bytes_sent > 10)
            tg.cancel_scope.cancel()
    await wait_for(lambda: server.disconnects == 1)
    assert server.body_bytes_sent < 10**6
    (client,) = source.clients
    assert client.is_closed


class TrackedStream(httpx.AsyncByteStream):
    """A response body that hangs after its first piece and records being closed."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b'{"roas": ['
        self.started.set()
        await anyio.sleep(30)
        yield b"]}"

    async def aclose(self) -> None:
        self.closed = True


async def test_cancelled_download_closes_the_response_stream() -> None:
    stream = TrackedStream()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=stream)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        source = source_for("https://example.net/x.json", client=client)
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(source.check, Recorder())
                await stream.started.wait()
                tg.cancel_scope.cancel()
        assert stream.closed
        assert not client.is_closed
    assert source.status.errors == {}


async def test_parsing_runs_in_a_worker_thread(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop_thread = threading.get_ident()
    threads: list[int] = []

    def recording_parse(
        data: bytes | str, *, max_aspa_providers: int, memo: PieceMemo | None = None
    ) -> SourcePayload:
        threads.append(threading.get_ident())
        return parse_export(data, max_aspa_providers=max_aspa_providers, memo=memo)

    monkeypatch.setattr(upstream.http_body, "parse_export", recording_parse)
    server.script(Reply(200, gzip.compress(BODY1)))
    source = source_for(server.url())
    with anyio.fail_after(5):
        assert await source.check(Recorder())
    assert len(threads) == 1
    assert threads[0] != loop_thread


async def test_an_export_built_ahead_of_the_wall_clock_is_held_back_then_admitted(
    server: ScriptedServer,
) -> None:
    """Item 4 over HTTP: the body is read once; a 304 later admits it once the clock allows."""
    etag = '"v1"'
    body = b'{"metadata": {"generated": 1800000400}, "roas": []}'
    server.script(Reply(200, body, {"ETag": etag}), Reply(304, headers={"ETag": etag}), Reply(304))
    clock = FakeClock(wall=1_800_000_000.0, monotonic="real")
    source = source_for(server.url(), clock=clock)
    sink = Recorder()
    with anyio.fail_after(5):
        assert not await source.check(sink)
        assert source.status.last_error_class == "time"
        assert "beyond the clock tolerance of 300 s" in (source.status.last_error or "")
        assert not source.refreshing()
        assert not await source.check(sink)  # a 304, still ahead: held
        clock.move_wall(101)
        assert await source.check(sink)  # a 304 now admits the body read before
    assert len(sink.deliveries) == 1
    assert source.status.state is SourceState.OK
