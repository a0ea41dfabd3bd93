"""`HttpServer`: an anyio TCP listener serving GET/HEAD requests to one async handler.

Requests are read by `wire.RequestReader` (h11 underneath). Each connection is a task in the
server's task group; `serve` owns the listeners and every connection, and cancelling it closes
them all. Limits: at most ``max_connections`` connections (more get a 503 and are closed at
once), a request head of at most ``max_request_bytes`` (else 431), received within
``request_timeout`` (else the connection is closed, with a 408 when a request had begun), each
response slice accepted within ``write_timeout`` (else the client is dropped), and
``max_requests_per_connection`` requests per connection (keep-alive). A handler that raises
gets a 500 and the connection is closed; the error is logged.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import cast

import anyio
from anyio.abc import SocketAttribute, SocketListener, SocketStream, TaskGroup, TaskStatus

from rtr_server.accept import accept_forever
from rtr_server.http.settings import HttpSettings
from rtr_server.http.wire import (
    HttpError,
    Request,
    RequestReader,
    Response,
    error_response,
    response_head,
)

log = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Response]]

#: Bytes per send call for large bodies (the /json export is tens of MB).
SEND_SLICE = 256 * 1024
#: Bytes asked of the socket per receive while a request head is read.
RECEIVE_SIZE = 65536


@dataclass(slots=True)
class HttpStats:
    """Counters of the listener itself (requests by route are counted by the handler)."""

    connections: int = 0
    rejected_connections: int = 0
    request_timeouts: int = 0
    write_timeouts: int = 0
    handler_errors: int = 0
    #: Requests answered by the server itself (malformed, too large, ...), by status.
    refused: Counter[int] = field(default_factory=Counter)


class _WriteStalledError(Exception):
    """The client accepted no bytes within the write timeout."""


class HttpServer:
    """Serves ``handler`` on ``settings.listen`` until cancelled."""

    def __init__(
        self, settings: HttpSettings, handler: Handler, *, wall: Callable[[], float] = time.time
    ) -> None:
        """Configure; nothing is bound until `serve`. ``wall`` is used for the Date header."""
        self.settings = settings
        self.handler = handler
        self.wall = wall
        self.stats = HttpStats()
        self.addresses: list[tuple[str, int]] = []
        self.active = 0

    async def serve(
        self, *, task_status: TaskStatus[list[tuple[str, int]]] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen until cancelled; reports the bound (host, port) pairs once listening."""
        address = self.settings.listen
        if self.settings.inherited_fd is not None:  # socket activation
            sock = socket.socket(fileno=self.settings.inherited_fd)
            listeners = [await SocketListener.from_socket(sock)]
        else:
            multi = await anyio.create_tcp_listener(
                local_host=address.host, local_port=address.port
            )
            listeners = cast("list[SocketListener]", multi.listeners)
        self.addresses = [
            (
                str(lst.extra(SocketAttribute.local_address)[0]),
                lst.extra(SocketAttribute.local_port),
            )
            for lst in listeners
        ]
        for host, port in self.addresses:
            shown = f"[{host}]" if ":" in host else host
            log.info("HTTP API (metrics, status, dashboard) on http://%s:%d/", shown, port)
        async with anyio.create_task_group() as tg:
            for listener in listeners:
                tg.start_soon(self._accept_loop, listener, tg)
            task_status.started(self.addresses)

    async def _accept_loop(self, listener: SocketListener, tg: TaskGroup) -> None:
        await accept_forever(listener, lambda stream: self._admit(stream, tg), what="HTTP")

    def _admit(self, stream: SocketStream, tg: TaskGroup) -> None:
        if self.active >= self.settings.max_connections:
            self.stats.rejected_connections += 1
            tg.start_soon(self._refuse, stream)
            return
        self.active += 1
        self.stats.connections += 1
        tg.start_soon(self._connection, stream)

    async def _refuse(self, stream: SocketStream) -> None:
        response = Response(503, b"too many HTTP connections\n")
        with anyio.move_on_after(1.0, shield=True):
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                await stream.send(self._head(response, keep_alive=False) + response.body)
            await stream.aclose()

    async def _connection(self, stream: SocketStream) -> None:
        try:
            await self._serve_requests(stream)
        except _WriteStalledError:
            self.stats.write_timeouts += 1
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
            pass
        finally:
            self.active -= 1
            with anyio.move_on_after(1.0, shield=True):
                await stream.aclose()

    async def _serve_requests(self, stream: SocketStream) -> None:
        settings = self.settings
        reader = RequestReader(settings.max_request_bytes)
        for served in range(1, settings.max_requests_per_connection + 1):
            request: Request | None = None
            try:
                with anyio.move_on_after(settings.request_timeout) as waited:
                    request = await self._receive_request(stream, reader)
            except HttpError as exc:
                await self._refuse_request(stream, exc)
                return
            if waited.cancelled_caught:
                self.stats.request_timeouts += 1
                if reader.pending:
                    await self._refuse_request(stream, HttpError(408, "request timeout"))
                return
            if request is None:
                return  # the client closed (between requests, or mid-head)
            try:
                response = await self.handler(request)
            except Exception:
                log.exception("HTTP handler failed for %s %s", request.method, request.target)
                self.stats.handler_errors += 1
                await self._refuse_request(stream, HttpError(500, "internal error"))
                return
            keep_alive = request.keep_alive and served < settings.max_requests_per_connection
            await self._send(stream, request, response, keep_alive=keep_alive)
            if not keep_alive:
                return

    @staticmethod
    async def _receive_request(stream: SocketStream, reader: RequestReader) -> Request | None:
        """The next request on ``stream``; None if the client closes first."""
        while (request := reader.next_request()) is None:
            try:
                data = await stream.receive(RECEIVE_SIZE)
            except anyio.EndOfStream:
                return None
            reader.receive_data(data)
        return request

    async def _refuse_request(self, stream: SocketStream, error: HttpError) -> None:
        self.stats.refused[error.status] += 1
        response = error_response(error)
        await self._write(stream, self._head(response, keep_alive=False) + response.body)

    async def _send(
        self, stream: SocketStream, request: Request, response: Response, *, keep_alive: bool
    ) -> None:
        head = self._head(response, keep_alive=keep_alive)
        body = response.body
        if request.method == "HEAD" or not body:
            await self._write(stream, head)
        elif len(body) <= SEND_SLICE:
            await self._write(stream, head + body)
        else:
            await self._write(stream, head)
            await self._write(stream, body)

    def _head(self, response: Response, *, keep_alive: bool) -> bytes:
        return response_head(
            response, date=formatdate(self.wall(), usegmt=True), keep_alive=keep_alive
        )

    async def _write(self, stream: SocketStream, data: bytes) -> None:
        view = memoryview(data)
        for offset in range(0, len(view), SEND_SLICE):
            with anyio.move_on_after(self.settings.write_timeout) as scope:
                await stream.send(cast("bytes", view[offset : offset + SEND_SLICE]))
            if scope.cancelled_caught:
                raise _WriteStalledError
