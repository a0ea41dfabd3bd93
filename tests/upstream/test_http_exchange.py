"""Who owns an HTTP exchange, against hostile loopback servers, on asyncio and trio (L-10-14)."""

from __future__ import annotations

import asyncio  # noqa: TID251 — the native cancellation under test
import gzip
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator

import anyio
import httpx
import pytest

import upstream.http_body
from tests.upstream.helpers import export, wait_for
from tests.upstream.http_server import (
    RawServer,
    Reply,
    ScriptedServer,
    full_backlog,
    never_answer,
    open_fds,
    reset_mid_body,
    stalled_name_lookups,
)
from tests.upstream.test_http_source import FAST, Recorder, RecordingSource, source_for
from upstream.decompress import ContentDecoder, decode
from upstream.http_exchange import RECOVERY_STEPS

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("error::ResourceWarning")]

BODY = export([("192.0.2.0/24", 24, 64496)])
DRIP = Reply(200, b"[" * 64, piece=1, pause=0.005, endless=True, length=10**7)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    srv = ScriptedServer()
    try:
        yield srv
    finally:
        srv.close()


# ---------------------------------------------------------------- L-13: the worker task


class PoolWatchingSource(RecordingSource):
    """Records the httpcore pool's connections at the moment its owned client starts closing."""

    def __init__(self, url: str, **kwargs: object) -> None:
        super().__init__(url, **{"name": "test", **FAST, **kwargs})
        self.pool_at_close: list[list[str]] = []

    def _make_client(self) -> httpx.AsyncClient:
        client = super()._make_client()
        real_aclose = client.aclose

        async def watched_aclose() -> None:
            pool = client._transport._pool  # type: ignore[attr-defined]
            self.pool_at_close.append([repr(connection) for connection in pool.connections])
            await real_aclose()

        client.aclose = watched_aclose  # type: ignore[method-assign]
        return client


async def test_cancel_storm_during_body_read_and_close_leaves_no_connection(
    server: ScriptedServer, anyio_backend: str
) -> None:
    """asyncio: native ``Task.cancel()`` again and again; trio: the cancel scope.

    The pool holds no connection when the owned client starts closing (without the worker task
    the storm cuts httpcore's response close short and an ACTIVE connection stays in the pool).
    """
    server.script(DRIP)
    source = PoolWatchingSource(server.url())
    sink = Recorder()
    if anyio_backend == "asyncio":
        task = asyncio.get_running_loop().create_task(source.check(sink))
        await wait_for(lambda: server.body_bytes_sent > 10)
        assert source.quota.held > 0
        with anyio.fail_after(5):
            while not task.done():
                task.cancel()
                await asyncio.sleep(0)
        with pytest.raises(asyncio.CancelledError):
            await task
    else:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(source.check, sink)
                await wait_for(lambda: server.body_bytes_sent > 10)
                assert source.quota.held > 0
                tg.cancel_scope.cancel()
    assert source.pool_at_close == [[]]
    await wait_for(lambda: server.open_connections == 0)
    (client,) = source.clients
    assert client.is_closed
    assert source.quota.held == 0
    assert source.status.errors == {}
    assert source.failures == 0
    assert sink.payloads == []


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # native asyncio cancellation
async def test_native_cancel_waits_for_the_worker(server: ScriptedServer) -> None:
    """The cancelled caller returns only after the request's worker task ended (its finally ran)."""
    server.script(DRIP)
    source = source_for(server.url())
    released: list[int] = []
    real_release = source.quota.release

    def recording_release() -> None:
        released.append(source.quota.held)
        real_release()

    source.quota.release = recording_release  # type: ignore[method-assign]
    task = asyncio.get_running_loop().create_task(source.check(Recorder()))
    await wait_for(lambda: server.body_bytes_sent > 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(released) == 1
    assert released[0] > 0
    await wait_for(lambda: server.open_connections == 0)


async def test_the_response_is_closed_in_a_child_of_the_reading_task(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built-in transport: the body is read in the worker, the network close runs in its child."""
    tasks: dict[str, int] = {}
    real_aclose = httpx.Response.aclose

    async def recording_aclose(response: httpx.Response) -> None:
        tasks.setdefault("close", anyio.get_current_task().id)
        await real_aclose(response)

    monkeypatch.setattr(httpx.Response, "aclose", recording_aclose)
    server.script(Reply(200, BODY, piece=100))
    source = source_for(server.url())
    real_count = source._count

    async def recording_count(raw: int) -> None:
        tasks.setdefault("read", anyio.get_current_task().id)
        await real_count(raw)

    source._count = recording_count  # type: ignore[method-assign]
    caller = anyio.get_current_task().id
    with anyio.fail_after(5):
        assert await source.check(Recorder())
    assert len({caller, tasks["read"], tasks["close"]}) == 3


# ---------------------------------------------------------------- L-12 / L-14: the body


async def test_reset_mid_body_is_an_environment_failure_and_nothing_stays_open() -> None:
    srv = RawServer(reset_mid_body)
    try:
        source = source_for(srv.url())
        sink = Recorder()
        before = open_fds()
        with anyio.fail_after(5):
            assert not await source.check(sink)
        assert source.status.errors == {"environment": 1}
        assert sink.payloads == []
        assert source.quota.held == 0
        assert source.quota.peak >= 1000
        assert open_fds() <= before
    finally:
        srv.close()


async def test_endless_body_is_cut_at_max_bytes_and_the_tail_is_never_decoded(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded: list[int] = []

    def counting_decode(decoders: list[ContentDecoder], data: bytes) -> Iterator[bytes]:
        decoded.append(len(data))
        return decode(decoders, data)

    monkeypatch.setattr(upstream.http_body, "decode", counting_decode)
    body = gzip.compress(b"[" * 200_000)
    server.script(Reply(200, body, {"Content-Encoding": "gzip"}, piece=4096, endless=True))
    source = source_for(server.url(), max_bytes=64 * 1024)
    with anyio.fail_after(5):
        assert not await source.check(Recorder())
    assert source.status.errors == {"size": 1}
    assert sum(decoded) == source.status.bytes_read <= 64 * 1024 + 65536
    assert source.quota.held == 0
    await wait_for(lambda: server.open_connections == 0)


class Body(httpx.AsyncByteStream):
    """An injected response body: endless pieces; its close can fail or be ignored."""

    def __init__(self, *, close_error: bool = False, after_close: bool = False) -> None:
        self.close_error = close_error
        self.after_close = after_close
        self.closed = False
        self.steps_after_close = 0
        self.started = anyio.Event()

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        if self.closed:
            if not self.after_close:
                raise StopAsyncIteration
            self.steps_after_close += 1  # a shared connection still delivering
            return b"tail"
        self.started.set()
        await anyio.sleep(0.001)
        return b"[" * 1024

    async def aclose(self) -> None:
        self.closed = True
        if self.close_error:
            raise RuntimeError("close-detail-text")


def injected(body: Body) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.MockTransport(lambda _: httpx.Response(200, stream=body))
    )


async def test_close_error_does_not_replace_the_size_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    body = Body(close_error=True)
    async with injected(body) as client:
        source = source_for("https://example.net/x.json", client=client, max_bytes=10_000)
        with anyio.fail_after(5), caplog.at_level(logging.WARNING):
            assert not await source.check(Recorder())
    assert source.status.errors == {"size": 1}
    assert body.closed
    assert "closing the HTTP response failed" in caplog.text
    assert "close-detail-text" not in caplog.text
    assert source.quota.held == 0


async def test_close_error_during_cancel_keeps_the_cancellation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    body = Body(close_error=True)
    async with injected(body) as client:
        source = source_for("https://example.net/x.json", client=client)
        with anyio.fail_after(5), caplog.at_level(logging.WARNING):
            async with anyio.create_task_group() as tg:
                tg.start_soon(source.check, Recorder())
                await body.started.wait()
                tg.cancel_scope.cancel()
    assert body.closed
    assert source.status.errors == {}
    assert not source.status.attempted
    assert "closing the HTTP response failed" in caplog.text
    assert "close-detail-text" not in caplog.text


async def test_shared_connection_recovery_is_bounded() -> None:
    """An injected body that keeps delivering after close: at most 65,536 steps / 1 s."""
    body = Body(after_close=True)
    async with injected(body) as client:
        source = source_for("https://example.net/x.json", client=client, max_bytes=10_000)
        started = time.monotonic()
        with anyio.fail_after(5):
            assert not await source.check(Recorder())
        assert time.monotonic() - started < 3
    assert source.status.errors == {"size": 1}
    assert 0 < body.steps_after_close <= RECOVERY_STEPS
    assert source.quota.held == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # native asyncio cancellation
async def test_a_native_cancel_during_the_bounded_recovery_is_not_swallowed() -> None:
    """The 1 s recovery budget is AnyIO's own deadline: a native cancel meanwhile propagates."""
    body = Body(after_close=True)
    async with injected(body) as client:
        source = source_for("https://example.net/x.json", client=client, max_bytes=10_000)
        task = asyncio.get_running_loop().create_task(source.check(Recorder()))
        await wait_for(lambda: body.steps_after_close > 0)
        task.cancel()
        with anyio.fail_after(5), pytest.raises(asyncio.CancelledError):
            await task
    assert body.steps_after_close < RECOVERY_STEPS
    assert source.status.errors == {}
    assert source.quota.held == 0


# ---------------------------------------------------------------- L-10: connect and TLS


async def test_connect_to_a_full_backlog_keeps_its_deadline_and_leaves_no_socket() -> None:
    with full_backlog() as port:
        source = source_for(f"http://127.0.0.1:{port}/x.json", connect_timeout=0.3)
        before = open_fds()
        started = time.monotonic()
        with anyio.fail_after(5):
            assert not await source.check(Recorder())
        assert time.monotonic() - started < 2
        assert source.status.errors == {"environment": 1}
        assert "ConnectTimeout" in (source.status.last_error or "")
        assert open_fds() <= before


async def test_cancel_during_connect_leaves_no_socket() -> None:
    with full_backlog() as port:
        source = source_for(f"http://127.0.0.1:{port}/x.json", connect_timeout=30.0)
        before = open_fds()
        with anyio.fail_after(5):
            with anyio.move_on_after(0.3) as scope:
                await source.check(Recorder())
        assert scope.cancelled_caught
        assert open_fds() <= before
        assert source.status.errors == {}


@pytest.mark.parametrize("how", ["timeout", "cancel"])
async def test_tls_handshake_that_never_completes(how: str) -> None:
    srv = RawServer(never_answer)
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
        await wait_for(lambda: srv.peer_closed == 1)
        assert srv.accepted == 1
        assert open_fds() <= before
    finally:
        srv.close()


@pytest.fixture
def stalled_dns(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    with stalled_name_lookups(monkeypatch) as release:
        yield release


@pytest.mark.parametrize("how", ["timeout", "cancel"])
async def test_a_stalled_name_lookup_keeps_the_deadline_and_leaves_no_socket(
    stalled_dns: threading.Event, how: str
) -> None:
    try:
        source = source_for("http://stalled.example.test/x.json", connect_timeout=0.3)
        before = open_fds()
        started = time.monotonic()
        with anyio.fail_after(5):
            if how == "timeout":
                assert not await source.check(Recorder())
                assert source.status.errors == {"environment": 1}
                assert "ConnectTimeout" in (source.status.last_error or "")
            else:
                source.timeout = httpx.Timeout(30.0)
                with anyio.move_on_after(0.3) as scope:
                    await source.check(Recorder())
                assert scope.cancelled_caught
                assert source.status.errors == {}
        assert time.monotonic() - started < 2
        assert not stalled_dns.is_set()
        assert open_fds() <= before
    finally:
        stalled_dns.set()  # the lookup thread ends now, not at the loop's shutdown
