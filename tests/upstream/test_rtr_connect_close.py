"""A close wakes a task blocked on the socket (L-10): RTR and HTTP streams, asyncio and trio.

The peer never reads, so a large write fills both send buffers and blocks; a reader waits on a
peer that never sends. Closing the stream from another task must end either wait at once (the
RTR source's own send deadline is 30 s; the HTTP write here has none at all).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Awaitable, Callable

import anyio
import httpcore
import pytest
import sniffio

from tests.upstream.helpers import wait_for
from tests.upstream.http_server import RawServer, open_fds
from upstream.http_network import OwnedBackend
from upstream.rtr_source import RtrSource

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("error::ResourceWarning")]

#: Far more than loopback send and receive buffers hold together.
BIG = b"\0" * (64 << 20)


def never_read(conn: socket.socket, stopping: threading.Event) -> bool:
    """Hold the connection open, never reading or sending, until the server stops."""
    stopping.wait(10)
    return False


class Blocked:
    """A task's wait on a stream and how it ended."""

    def __init__(self, wait: Callable[[], Awaitable[object]]) -> None:
        self._wait = wait
        self.started = False
        self.outcome: BaseException | str | None = None

    async def __call__(self) -> None:
        self.started = True
        try:
            await self._wait()
        except Exception as exc:  # noqa: BLE001 — the outcome under test
            self.outcome = exc
        else:
            self.outcome = "returned"


async def close_wakes(blocked: Blocked, close: Callable[[], Awaitable[None]]) -> float:
    """Start ``blocked``, check that it really waits, close; seconds until it ended."""
    ended: list[float] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(blocked)
        await wait_for(lambda: blocked.started)
        await anyio.sleep(0.3)
        assert blocked.outcome is None, "the wait did not block"
        started = time.monotonic()
        with anyio.fail_after(2):
            await close()
            await wait_for(lambda: blocked.outcome is not None, limit=2)
        ended.append(time.monotonic() - started)
    return ended[0]


@pytest.mark.parametrize("direction", ["send", "receive"])
async def test_a_close_wakes_the_rtr_source_blocked_on_its_socket(direction: str) -> None:
    """The stream `RtrSource` connects (``anyio.connect_tcp``) and writes with `RtrSource._send`."""
    before = open_fds()
    srv = RawServer(never_read)
    try:
        source = RtrSource(f"rtr://127.0.0.1:{srv.port}")
        stream = await anyio.connect_tcp("127.0.0.1", srv.port)
        if direction == "send":
            blocked = Blocked(lambda: source._send(stream, BIG))
        else:
            blocked = Blocked(lambda: stream.receive(65536))
        took = await close_wakes(blocked, stream.aclose)
        assert took < 1.0
        # What `RtrSource._connect_once` reports as a lost connection (never a timeout).
        assert isinstance(blocked.outcome, anyio.ClosedResourceError | anyio.BrokenResourceError)
    finally:
        srv.close()  # its accepted socket is one of this process's descriptors too
    assert open_fds() <= before


@pytest.mark.parametrize("direction", ["send", "receive"])
async def test_a_close_wakes_the_http_stream_blocked_on_its_socket(direction: str) -> None:
    """The stream the owned HTTP transport connects (`OwnedBackend` over httpcore's backend)."""
    before = open_fds()
    srv = RawServer(never_read)
    try:
        native: httpcore.AsyncNetworkBackend = (
            httpcore.TrioBackend()
            if sniffio.current_async_library() == "trio"
            else httpcore.AnyIOBackend()
        )
        stream = await OwnedBackend(native).connect_tcp("127.0.0.1", srv.port, timeout=2.0)
        if direction == "send":
            blocked = Blocked(lambda: stream.write(BIG, timeout=None))
        else:
            blocked = Blocked(lambda: stream.read(65536, timeout=None))
        took = await close_wakes(blocked, stream.aclose)
        assert took < 1.0
        assert isinstance(blocked.outcome, httpcore.NetworkError | anyio.ClosedResourceError)
    finally:
        srv.close()  # its accepted socket is one of this process's descriptors too
    assert open_fds() <= before
