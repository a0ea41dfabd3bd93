"""Propagation (benchmark part): N synced v1 routers, the export replaced, until all hold it.

Each router connects, sends a Serial Query at the server's current serial and reads its answer
(synced without a full dump), then waits. Once every router is synced the export file is
replaced; each router acts on the Serial Notify the server sends (Serial Query, the delta; a
Cache Reset is followed by a Reset Query), and the time until the last router has read an End
of Data with a new serial is the propagation time; from the first Serial Notify any router read
to that moment is the fan-out (what the publish costs the server, change detection and parse
left out).
"""

from __future__ import annotations

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
    when it reloads the same file).
    """
    synced = 0
    all_synced = anyio.Event()
    done: list[float] = []
    notified: list[float] = []
    swapped: list[float] = []  # set once the export was replaced

    async def router() -> None:
        nonlocal synced
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            reader = Reader(stream)
            await stream.send(serial_query(session, serial))
            got, reset = await reader.end_of_data()
            assert not reset, "Cache Reset to the first Serial Query"
            mine = got  # StayRTR may have moved its serial on since (same data, a reload)
            synced += 1
            if synced == routers:
                all_synced.set()
            while True:
                pdu = await reader.next_pdu()
                if pdu[1] != SERIAL_NOTIFY:
                    continue
                if swapped:
                    notified.append(time.monotonic())
                await stream.send(serial_query(session, mine))
                got, reset = await reader.end_of_data()
                if reset:
                    await stream.send(RESET_QUERY_V1)
                    got, _ = await reader.end_of_data()
                if got != mine and swapped:
                    done.append(time.monotonic())
                    return
                mine = got  # a new serial before the replacement: the same data again

    with anyio.fail_after(600):
        async with anyio.create_task_group() as tg:
            for _ in range(routers):
                tg.start_soon(router)
            await all_synced.wait()
            started = time.monotonic()
            swapped.append(started)
            swap()
    return Propagation(max(done) - started, max(done) - min(notified))
