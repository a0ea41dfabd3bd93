"""A small async RTR test client over `anyio.connect_tcp`, framing with `rtr_protocol`.

It plays a strict router: every byte it receives goes through `PduFramer` (so a malformed PDU
from the server fails the test), responses are read as one contiguous Cache Response .. End of
Data sequence (anything else inside one, e.g. a Serial Notify, is a failure), and Serial Notify
PDUs seen between responses are kept in `RtrClient.notifies`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from types import TracebackType

import anyio
from anyio.abc import ByteStream

from rtr_protocol import (
    NEED_DATA,
    AspaPdu,
    CacheReset,
    CacheResponse,
    EndOfData,
    ErrorReport,
    Ipv4Prefix,
    Ipv6Prefix,
    Pdu,
    PduFramer,
    ResetQuery,
    RouterKeyPdu,
    SerialNotify,
    SerialQuery,
    encode,
)

#: Default bound of every wait on the server.
TIMEOUT = 5.0
#: The PDU types that may appear between Cache Response and End of Data.
PAYLOAD_TYPES = (Ipv4Prefix, Ipv6Prefix, RouterKeyPdu, AspaPdu)
PayloadPdu = Ipv4Prefix | Ipv6Prefix | RouterKeyPdu | AspaPdu


class ConnectionClosedError(Exception):
    """The server closed the connection (EOF, or a reset when ``reset`` is True)."""

    def __init__(self, reset: bool = False) -> None:
        super().__init__("connection reset by the server" if reset else "server closed")
        self.reset = reset


@dataclass(slots=True)
class Response:
    """One complete reply: Cache Response, payload PDUs, End of Data (with the raw octets)."""

    cache_response: CacheResponse
    payload: list[PayloadPdu]
    end_of_data: EndOfData
    raw_cache_response: bytes
    raw_payload: list[bytes] = field(default_factory=list)
    raw_end_of_data: bytes = b""


def reset_query(version: int) -> bytes:
    """The octets of a Reset Query."""
    return encode(ResetQuery(version))


def serial_query(version: int, session_id: int, serial: int) -> bytes:
    """The octets of a Serial Query."""
    return encode(SerialQuery(version, session_id, serial))


def raw_header(version: int, pdu_type: int, octets23: int, length: int) -> bytes:
    """A bare 8-octet header with arbitrary fields (to send things `encode` refuses)."""
    return struct.pack(">BBHI", version, pdu_type, octets23, length)


class RtrClient:
    """One router connection to the server under test."""

    def __init__(self, stream: ByteStream) -> None:
        """Wrap a connected stream (TCP, or TLS over TCP)."""
        self.stream = stream
        self.framer = PduFramer()
        self.notifies: list[SerialNotify] = []
        self.last_raw = b""
        self.eof = False

    @classmethod
    async def connect(cls, port: int, host: str = "127.0.0.1") -> RtrClient:
        """Open a TCP connection to the server."""
        with anyio.fail_after(TIMEOUT):
            return cls(await anyio.connect_tcp(host, port))

    async def __aenter__(self) -> RtrClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close our side (never fails)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
            await self.stream.aclose()

    # ----------------------------------------------------------------- sending
    async def send(self, *items: bytes) -> None:
        """Send the octets of ``items`` in one write (one TCP segment for small data)."""
        with anyio.fail_after(TIMEOUT):
            await self.stream.send(b"".join(items))

    # ----------------------------------------------------------------- receiving
    async def receive_pdu(self, within: float = TIMEOUT) -> Pdu:
        """The next PDU from the server; raises `ConnectionClosedError` at EOF."""
        with anyio.fail_after(within):
            while True:
                pdu = self.framer.next_pdu()
                if pdu is not NEED_DATA:
                    self.last_raw = self.framer.last_pdu_bytes
                    return pdu
                if self.eof:
                    raise ConnectionClosedError
                await self._fill()

    async def _fill(self) -> None:
        try:
            data = await self.stream.receive(1 << 20)
        except anyio.EndOfStream:
            self.eof = True
            self.framer.receive_data(b"")
        except (anyio.BrokenResourceError, ConnectionError) as exc:
            self.eof = True
            raise ConnectionClosedError(reset=True) from exc
        else:
            self.framer.receive_data(data)

    async def receive_raw(self, size: int, within: float = TIMEOUT) -> bytes:
        """Exactly ``size`` octets, bypassing the framer (for very large replies)."""
        assert self.framer.buffered == 0, "framer holds data; cannot read raw"
        chunks: list[bytes] = []
        have = 0
        with anyio.fail_after(within):
            while have < size:
                try:
                    data = await self.stream.receive(min(1 << 20, size - have))
                except anyio.EndOfStream:
                    raise ConnectionClosedError from None
                chunks.append(data)
                have += len(data)
        return b"".join(chunks)

    async def read_reply(self, within: float = TIMEOUT) -> Response | Pdu:
        """The next reply: a whole `Response`, or a single other PDU (Error Report, Cache Reset).

        Serial Notify PDUs before the reply are collected in `notifies`. Inside a response
        only payload PDUs may appear until End of Data; anything else fails the test.
        """
        with anyio.fail_after(within):
            while True:
                first = await self.receive_pdu()
                if isinstance(first, SerialNotify):
                    self.notifies.append(first)
                    continue
                break
            if not isinstance(first, CacheResponse):
                return first
            response = Response(first, [], EndOfData(0, 0, 0, None), self.last_raw)
            while True:
                pdu = await self.receive_pdu()
                if isinstance(pdu, EndOfData):
                    response.end_of_data = pdu
                    response.raw_end_of_data = self.last_raw
                    return response
                assert isinstance(pdu, PAYLOAD_TYPES), (
                    f"{type(pdu).__name__} inside a response (after "
                    f"{len(response.payload)} payload PDUs): {pdu!r}"
                )
                response.payload.append(pdu)
                response.raw_payload.append(self.last_raw)

    async def read_response(self, within: float = TIMEOUT) -> Response:
        """The next reply, which must be a complete `Response`."""
        reply = await self.read_reply(within)
        assert isinstance(reply, Response), f"expected a Cache Response, got {reply!r}"
        return reply

    async def read_error(self, within: float = TIMEOUT) -> ErrorReport:
        """The next reply, which must be an Error Report."""
        reply = await self.read_reply(within)
        assert isinstance(reply, ErrorReport), f"expected an Error Report, got {reply!r}"
        return reply

    async def read_cache_reset(self, within: float = TIMEOUT) -> CacheReset:
        """The next reply, which must be a Cache Reset."""
        reply = await self.read_reply(within)
        assert isinstance(reply, CacheReset), f"expected a Cache Reset, got {reply!r}"
        return reply

    async def reset(self, version: int) -> Response:
        """Send a Reset Query and read the full response."""
        await self.send(reset_query(version))
        return await self.read_response()

    async def serial(self, version: int, session_id: int, serial: int) -> Response | Pdu:
        """Send a Serial Query and read the reply."""
        await self.send(serial_query(version, session_id, serial))
        return await self.read_reply()

    async def expect_closed(self, within: float = TIMEOUT) -> None:
        """The server closes the connection without sending anything (more)."""
        try:
            pdu = await self.receive_pdu(within)
        except ConnectionClosedError:
            return
        raise AssertionError(f"expected the connection to close, got {pdu!r}")

    async def expect_silence(self, duration: float) -> None:
        """Nothing arrives and the connection stays open for ``duration`` seconds."""
        with anyio.move_on_after(duration):
            pdu = await self.receive_pdu(duration + 1.0)
            raise AssertionError(f"expected silence, got {pdu!r}")
        assert not self.eof, "the server closed the connection"
