"""Propagation (benchmark part): N synced v1 routers, the export replaced, until all hold it.

Each router connects, sends a Serial Query at the server's current serial and reads its answer
(synced without a full dump), then waits; the routers are sockets on one selector in a worker
thread (`Routers`), so that the client costs far less than the server it measures. Once every
router is synced the export file is replaced; each router acts on the Serial Notify the server sends (Serial Query, the delta; a
Cache Reset is followed by a Reset Query), and the time until the last router has read an End
of Data with a new serial is the propagation time; from the first Serial Notify any router read
to that moment is the fan-out (what the publish costs the server, change detection and parse
left out).
"""

from __future__ import annotations

import selectors
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from anyio.abc import SocketStream

__all__ = ["RESET_QUERY_V1", "Propagation", "propagation", "serial_query"]

SERIAL_NOTIFY = 0
CACHE_RESET = 8
END_OF_DATA = 7
ERROR_REPORT = 10
RESET_QUERY_V1 = bytes([1, 2, 0, 0, 0, 0, 0, 8])


def serial_query(session: bytes, serial: int) -> bytes:
    """A v1 Serial Query."""
    return bytes([1, 1]) + session + (12).to_bytes(4, "big") + serial.to_bytes(4, "big")


class Reader:
    """PDUs of one stream; keeps only what the walk needs (types and the last End of Data)."""

    def __init__(self, stream: SocketStream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    async def next_pdu(self) -> bytes:
        """The next whole PDU (its bytes)."""
        while True:
            if len(self.buffer) >= 8:
                length = int.from_bytes(self.buffer[4:8], "big")
                if len(self.buffer) >= length:
                    pdu = bytes(self.buffer[:length])
                    del self.buffer[:length]
                    return pdu
            chunk = await self.stream.receive(1 << 20)
            self.buffer += chunk
            # Skip whole payload PDUs in the buffer at once (a table is millions of them).
            offset = 0
            while len(self.buffer) - offset >= 8:
                kind = self.buffer[offset + 1]
                length = int.from_bytes(self.buffer[offset + 4 : offset + 8], "big")
                if kind in {SERIAL_NOTIFY, CACHE_RESET, END_OF_DATA, ERROR_REPORT, 3}:
                    break
                if len(self.buffer) - offset < length:
                    break
                offset += length
            del self.buffer[:offset]

    async def end_of_data(self) -> tuple[int, bool]:
        """Read one answer: (End of Data serial, False) or (0, True) for a Cache Reset."""
        while True:
            pdu = await self.next_pdu()
            if pdu[1] == END_OF_DATA:
                return int.from_bytes(pdu[8:12], "big"), False
            if pdu[1] == CACHE_RESET:
                return 0, True
            if pdu[1] == ERROR_REPORT:
                raise RuntimeError(f"error report {int.from_bytes(pdu[2:4], 'big')}")


@dataclass(frozen=True)
class Propagation:
    """Seconds until the last router held the new serial."""

    #: From the export's replacement.
    total: float
    #: From the first Serial Notify a router read.
    fanout: float


async def propagation(
    port: int, routers: int, session: bytes, serial: int, swap: Callable[[], None]
) -> Propagation:
    """How long after ``swap()`` all ``routers`` hold a serial other than their own.

    Each router starts at the serial its first Serial Query (at ``serial``) was answered with
    and follows the Notifies that come before the replacement (StayRTR moves its serial on
    when it reloads the same file). The routers run in a worker thread (`Routers`).
    """
    return await anyio.to_thread.run_sync(Routers(port, routers, session, serial).run, swap)


class Routers:
    """Synced v1 routers as non-blocking sockets on one selector, in one thread.

    A router per anyio task cost this client about as much CPU as the server it measures (10,000
    of them about 1 s): here a router costs a read, a parse of its few PDUs and a write.
    """

    def __init__(self, port: int, count: int, session: bytes, serial: int) -> None:
        self.port, self.count, self.session, self.serial = port, count, session, serial
        self.selector = selectors.DefaultSelector()
        #: Per socket: its unread octets, the serial it holds, whether it is done.
        self.buffers: dict[socket.socket, bytearray] = {}
        self.held: dict[socket.socket, int] = {}
        self.synced = 0
        self.swapped: float | None = None
        self.notified: float | None = None
        self.done: list[float] = []

    def run(self, swap: Callable[[], None]) -> Propagation:
        deadline = time.monotonic() + 600
        query = serial_query(self.session, self.serial)
        try:
            for _ in range(self.count):
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
                sock.sendall(query)
                sock.settimeout(0.0)
                self.buffers[sock] = bytearray()
                self.selector.register(sock, selectors.EVENT_READ)
            while self.synced < self.count:
                self._step(deadline)
            self.swapped = time.monotonic()
            swap()
            while len(self.done) < self.count:
                self._step(deadline)
        finally:
            for sock in self.buffers:
                sock.close()
            self.selector.close()
        assert self.notified is not None
        return Propagation(max(self.done) - self.swapped, max(self.done) - self.notified)

    def _step(self, deadline: float) -> None:
        if time.monotonic() > deadline:
            raise TimeoutError("routers not done within 600 s")
        for key, _ in self.selector.select(timeout=1.0):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            data = sock.recv(1 << 20)
            if not data:
                raise RuntimeError("the server closed a router's connection")
            buffer = self.buffers[sock]
            buffer += data
            self._pdus(sock, buffer)

    def _pdus(self, sock: socket.socket, buffer: bytearray) -> None:
        offset = 0
        while len(buffer) - offset >= 8:
            length = int.from_bytes(buffer[offset + 4 : offset + 8], "big")
            if len(buffer) - offset < length:
                break
            kind = buffer[offset + 1]
            if kind == SERIAL_NOTIFY and sock in self.held:
                if self.swapped is not None and self.notified is None:
                    self.notified = time.monotonic()
                sock.sendall(serial_query(self.session, self.held[sock]))
            elif kind == END_OF_DATA:
                got = int.from_bytes(buffer[offset + 8 : offset + 12], "big")
                self._answered(sock, got)
            elif kind == CACHE_RESET:
                sock.sendall(RESET_QUERY_V1)
            elif kind == ERROR_REPORT:
                raise RuntimeError(f"error report {int.from_bytes(buffer[2:4], 'big')}")
            offset += length
        del buffer[:offset]

    def _answered(self, sock: socket.socket, got: int) -> None:
        if sock not in self.held:  # the first answer: synced at whatever serial it gives
            self.held[sock] = got
            self.synced += 1
        elif got != self.held[sock] and self.swapped is not None:
            self.done.append(time.monotonic())
            self.selector.unregister(sock)
        else:
            self.held[sock] = got  # a new serial before the replacement: the same data again
