"""Helpers for the RTR source tests: edge apps, a scripted cache and StayRTR."""

from __future__ import annotations

import shutil
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from anyio.abc import Process, SocketStream, TaskStatus

from rtr_protocol import NEED_DATA, Pdu, PduFramer
from rtr_server.app import App
from rtr_server.app_config import AppConfig, make_clock
from snapshot.publisher import Publisher, SessionIds
from snapshot.snapshot import Snapshot
from tests.clock import FakeClock
from tests.server.helpers import RouterState, settings, wait_until
from tests.server.rtr_client import TIMEOUT, RtrClient
from upstream.payload import SourcePayload
from upstream.rtr_source import RtrSource
from upstream.source import Delivery


def rtr_source_of(app: App) -> RtrSource:
    """The app's one RTR source."""
    (source,) = app.sources
    assert isinstance(source, RtrSource)
    return source


def quick(source: RtrSource) -> RtrSource:
    """Test pacing: short backoff, fast expiry checks."""
    source.retry_initial = 0.05
    source.retry_max = 0.2
    source.expire_check = 0.02
    return source


@asynccontextmanager
async def running_edge(
    port: int, *, clock: FakeClock | None = None, wait_for_data: bool = True
) -> AsyncIterator[App]:
    """An edge `App` whose only source is ``rtr://127.0.0.1:port``, on 127.0.0.1 port 0."""
    config = AppConfig(sources=(f"rtr://127.0.0.1:{port}",), server=settings(), poll_interval=0.05)
    app = App(config, clock or FakeClock(wall="real", monotonic="real"))
    quick(rtr_source_of(app))
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(TIMEOUT):
            await tg.start(app.run)
        if wait_for_data:
            await wait_until(lambda: app.state is not None, what="the edge's first publish")
        try:
            yield app
        finally:
            tg.cancel_scope.cancel()


async def served(port: int, version: int) -> RouterState:
    """What a router of ``version`` holds after a Reset Query to 127.0.0.1:``port``."""
    async with await RtrClient.connect(port) as client:
        return RouterState().apply((await client.reset(version)).payload)


def snapshot_of(app: App) -> Snapshot:
    """The snapshot the app serves now."""
    assert app.state is not None
    return app.state.snapshot


@dataclass
class Core:
    """A core app the test can kill while the edge runs on."""

    app: App
    scope: anyio.CancelScope
    done: anyio.Event

    @property
    def port(self) -> int:
        host, port = self.app.server.addresses[0]
        assert host == "127.0.0.1"
        return port

    async def kill(self) -> None:
        """Cancel the core (its connections get Cache Restart) and wait until it is gone."""
        self.scope.cancel()
        with anyio.fail_after(TIMEOUT):
            await self.done.wait()


@asynccontextmanager
async def running_core(
    config: AppConfig,
    *,
    session_ids: SessionIds | None = None,
    wait_for_data: bool = True,
    within: float = TIMEOUT,
) -> AsyncIterator[Core]:
    """Run a core `App` in its own cancel scope; by default wait for its first publish."""
    app = App(config, make_clock(config.reference_time))
    if session_ids is not None:
        app.publishing.publisher = Publisher(session_ids)
    core = Core(app, anyio.CancelScope(), anyio.Event())

    async def run(*, task_status: TaskStatus[App] = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            with core.scope:
                await app.run(task_status=task_status)
        finally:
            core.done.set()

    async with anyio.create_task_group() as tg:
        with anyio.fail_after(TIMEOUT):
            await tg.start(run)
        if wait_for_data:
            await wait_until(
                lambda: app.state is not None, within=within, what="the core's first publish"
            )
        try:
            yield core
        finally:
            tg.cancel_scope.cancel()


# ------------------------------------------------------------------------------ a sink


@dataclass
class Sink:
    """Collects what a source hands over."""

    payloads: list[SourcePayload] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)

    def __call__(self, delivery: Delivery) -> None:
        self.deliveries.append(delivery)
        self.payloads.append(delivery.payload)

    @property
    def last(self) -> SourcePayload:
        assert self.payloads, "nothing emitted yet"
        return self.payloads[-1]


@asynccontextmanager
async def running_source(source: RtrSource) -> AsyncIterator[Sink]:
    """Run ``source`` into a `Sink` until the block ends."""
    sink = Sink()
    async with anyio.create_task_group() as tg:
        tg.start_soon(source.run, sink)
        try:
            yield sink
        finally:
            tg.cancel_scope.cancel()


# ------------------------------------------------------------------------------ scripted cache


class CacheConnection:
    """The cache's end of one router connection: read the router's PDUs, send raw bytes."""

    def __init__(self, stream: SocketStream, index: int) -> None:
        self.stream = stream
        self.index = index
        self.framer = PduFramer()
        self.raw: list[bytes] = []

    async def send(self, *chunks: bytes) -> None:
        with anyio.fail_after(TIMEOUT):
            await self.stream.send(b"".join(chunks))

    async def receive(self, within: float = TIMEOUT) -> Pdu | None:
        """The router's next PDU, or None at EOF."""
        with anyio.fail_after(within):
            while True:
                pdu = self.framer.next_pdu()
                if pdu is not NEED_DATA:
                    self.raw.append(self.framer.last_pdu_bytes)
                    return pdu
                if self.framer.eof:
                    return None
                try:
                    data = await self.stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
                    data = b""
                self.framer.receive_data(data)


Script = Callable[[CacheConnection], Awaitable[None]]


@dataclass
class ScriptedCache:
    """A loopback TCP "cache": connection number i runs ``scripts[min(i, last)]``."""

    scripts: list[Script]
    connections: list[CacheConnection] = field(default_factory=list)
    port: int = 0

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[ScriptedCache]:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, self._handle)
            try:
                yield self
            finally:
                tg.cancel_scope.cancel()

    async def _handle(self, stream: SocketStream) -> None:
        conn = CacheConnection(stream, len(self.connections))
        self.connections.append(conn)
        async with stream:
            await self.scripts[min(conn.index, len(self.scripts) - 1)](conn)
            await anyio.sleep_forever()  # hold the connection; the test ends it


# ------------------------------------------------------------------------------ StayRTR

STAYRTR = "stayrtr"


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def running_stayrtr(cache_file: Path, log_file: Path) -> AsyncIterator[int]:
    """StayRTR 0.5 (``-protocol 2``) serving ``cache_file`` on 127.0.0.1; yields the port."""
    async with stayrtr_process(cache_file, log_file) as (port, _):
        yield port


@asynccontextmanager
async def stayrtr_process(
    cache_file: Path, log_file: Path, *, retry: int = 10
) -> AsyncIterator[tuple[int, Process]]:
    """StayRTR 0.5 serving ``cache_file`` (Retry interval ``retry`` s); yields port and process.

    The test may kill the process; it is terminated (or killed) on the way out otherwise.
    """
    binary = shutil.which(STAYRTR)
    if binary is None:
        raise AssertionError(
            "stayrtr is not installed: the StayRTR interop test needs the Debian package "
            "`stayrtr` (0.5.1, /usr/bin/stayrtr); install it with `apt-get install stayrtr`"
        )
    port, metrics = free_port(), free_port()
    command = [
        binary,
        *("-bind", f"127.0.0.1:{port}", "-cache", str(cache_file), "-checktime=false"),
        *("-metrics.addr", f"127.0.0.1:{metrics}", "-protocol", "2"),
        *("-rtr.refresh", "30", "-rtr.retry", str(retry), "-rtr.expire", "600"),
        *("-loglevel", "info"),
    ]
    with log_file.open("wb") as log:
        process: Process = await anyio.open_process(command, stdout=log, stderr=log)
        try:
            await _wait_listening(port, process, log_file)
            yield port, process
        finally:
            with anyio.CancelScope(shield=True):
                if process.returncode is None:
                    process.terminate()
                with anyio.move_on_after(5):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()


async def _wait_listening(port: int, process: Process, log_file: Path) -> None:
    try:
        with anyio.fail_after(TIMEOUT):
            while True:
                if process.returncode is not None:
                    log = await anyio.Path(log_file).read_text()
                    raise AssertionError(f"stayrtr exited: {log}")
                try:
                    stream = await anyio.connect_tcp("127.0.0.1", port)
                except OSError:
                    await anyio.sleep(0.05)
                    continue
                await stream.aclose()
                return
    except TimeoutError:
        log = await anyio.Path(log_file).read_text()
        raise AssertionError(f"stayrtr did not listen: {log}") from None
