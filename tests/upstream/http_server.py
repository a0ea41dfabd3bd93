"""A scripted HTTP/1.1 server on 127.0.0.1 in a background thread, for the HTTP source tests.

Each request takes the next `Reply` of the script (the last one repeats once the script is used
up; an empty script answers 404). A reply with an ``etag`` answers 304 to a request whose
If-None-Match names it, as a real server would. Every request is recorded with its headers, and
a client that goes away while a body is being written is counted in `ScriptedServer.disconnects`;
`ScriptedServer.open_connections` counts the connections not ended yet. `RawServer` and
`full_backlog` are the hostile ones: a reset mid-body, a silent peer, a listener that never accepts.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True)
class Reply:
    """One scripted answer."""

    status: int = 200
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Seconds to wait before the status line.
    delay: float = 0.0
    #: Write the body in pieces of this size (0: in one piece) ...
    piece: int = 0
    #: ... with this pause between pieces.
    pause: float = 0.0
    #: Repeat ``body`` until the client goes away (or ``length`` bytes are sent).
    endless: bool = False
    #: Content-Length to announce; None: ``len(body)``, or none at all (and close) if endless.
    length: int | None = None
    #: Sent as ETag; a request whose If-None-Match is this value gets 304 and no body instead.
    etag: str | None = None


@dataclass(frozen=True)
class Seen:
    """One request as received (header names in lower case)."""

    path: str
    headers: dict[str, str]


class ScriptedServer:
    """The server; `close` stops it (pending sleeps of slow replies end at once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._script: list[Reply] = []
        self.requests: list[Seen] = []
        self.disconnects = 0
        #: Connections accepted and not yet ended (a client's close ends one).
        self.open_connections = 0
        self.body_bytes_sent = 0
        self.stopping = threading.Event()
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 10

            def handle(self) -> None:
                with scripted._lock:
                    scripted.open_connections += 1
                try:
                    super().handle()
                finally:
                    with scripted._lock:
                        scripted.open_connections -= 1

            def do_GET(self) -> None:
                scripted._serve(self)

            def log_message(self, fmt: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.01,), daemon=True)
        self._thread.start()

    def url(self, path: str = "/export.json") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._script = list(replies)

    def close(self) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def _next(self, seen: Seen) -> Reply:
        with self._lock:
            self.requests.append(seen)
            if not self._script:
                return Reply(404, b"not found")
            return self._script.pop(0) if len(self._script) > 1 else self._script[0]

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        seen = Seen(handler.path, {k.lower(): v for k, v in handler.headers.items()})
        reply = self._next(seen)
        if reply.etag is not None:
            headers = {**reply.headers, "ETag": reply.etag}
            status = 304 if seen.headers.get("if-none-match") == reply.etag else reply.status
            reply = replace(reply, status=status, headers=headers)
        if reply.delay and self.stopping.wait(reply.delay):
            handler.close_connection = True
            return
        try:
            handler.send_response(reply.status)
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            if reply.status == 304:
                handler.end_headers()
                return
            if reply.length is not None:
                handler.send_header("Content-Length", str(reply.length))
            elif reply.endless:
                handler.send_header("Connection", "close")
                handler.close_connection = True
            else:
                handler.send_header("Content-Length", str(len(reply.body)))
            handler.end_headers()
            handler.wfile.flush()
            self._write_body(handler, reply)
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True
            with self._lock:
                self.disconnects += 1

    def _write_body(self, handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        limit = reply.length if reply.endless else None
        step = reply.piece or len(reply.body) or 1
        sent = 0
        while True:
            for start in range(0, len(reply.body), step):
                piece = reply.body[start : start + step]
                if limit is not None:
                    piece = piece[: limit - sent]
                    if not piece:
                        return
                handler.wfile.write(piece)
                handler.wfile.flush()
                sent += len(piece)
                with self._lock:
                    self.body_bytes_sent += len(piece)
                if reply.pause and self.stopping.wait(reply.pause):
                    return
            if not reply.endless or self.stopping.is_set():
                return


class RawServer:
    """A bare TCP listener on 127.0.0.1 whose connections a hostile ``behaviour`` handles.

    ``behaviour(conn, stopping)`` runs in a thread per connection; the connection is closed
    after it. `accepted` counts connections, `peer_closed` those whose client closed first.
    """

    def __init__(self, behaviour: Callable[[socket.socket, threading.Event], bool]) -> None:
        self._behaviour = behaviour
        self._lock = threading.Lock()
        self.accepted = 0
        self.peer_closed = 0
        self.stopping = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.02)
        self.port = self._sock.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}/export.json"

    def close(self) -> None:
        self.stopping.set()
        self._thread.join(5)
        for thread in self._threads:
            thread.join(5)
        self._sock.close()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            with self._lock:
                self.accepted += 1
            thread = threading.Thread(target=self._handle, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            peer_closed = self._behaviour(conn, self.stopping)
        finally:
            conn.close()
        if peer_closed:
            with self._lock:
                self.peer_closed += 1


def read_request(conn: socket.socket) -> None:
    """Read up to the end of a request's header block."""
    data = b""
    conn.settimeout(5)
    while b"\r\n\r\n" not in data:
        piece = conn.recv(4096)
        if not piece:
            return
        data += piece


def wait_for_peer_close(conn: socket.socket, stopping: threading.Event) -> bool:
    """Read and ignore everything until the client closes (True) or the server stops."""
    conn.settimeout(0.02)
    while not stopping.is_set():
        try:
            if not conn.recv(65536):
                return True
        except TimeoutError:
            continue
        except OSError:
            return True
    return False


def reset_mid_body(conn: socket.socket, stopping: threading.Event) -> bool:
    """Announce a 1 MB body, send a little of it, then reset the connection (RST)."""
    read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n" + b"[" * 1000)
    stopping.wait(0.05)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return False


def never_answer(conn: socket.socket, stopping: threading.Event) -> bool:
    """Accept and never send a byte (a TLS handshake or a request that never completes)."""
    return wait_for_peer_close(conn, stopping)


@contextmanager
def full_backlog() -> Iterator[int]:
    """A port whose listener never accepts and whose accept queue is full: a connect hangs."""
    listener = socket.socket()
    fillers: list[socket.socket] = []
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        for _ in range(8):
            filler = socket.socket()
            filler.settimeout(0.2)
            fillers.append(filler)
            try:
                filler.connect(("127.0.0.1", port))
            except TimeoutError:
                break
        else:
            raise RuntimeError("the accept queue never filled")
        yield port
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


@contextmanager
def stalled_name_lookups(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Name lookups (not numeric ones) block in their worker thread until released (max 10 s)."""
    release = threading.Event()
    real = socket.getaddrinfo

    def stalling(host: object, *args: object, **kwargs: object) -> object:
        flags = kwargs.get("flags", args[4] if len(args) > 4 else 0)
        if isinstance(flags, int) and not flags & socket.AI_NUMERICHOST:
            release.wait(10)
        return real(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", stalling)
    try:
        yield release
    finally:
        release.set()


def open_fds() -> int:
    """Open file descriptors of this process (a leaked socket is one more)."""
    return len(list(Path("/proc/self/fd").iterdir()))
