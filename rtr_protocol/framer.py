"""`PduFramer`: bytes in any split → one PDU at a time, framed by the Length field.

Feed it with `PduFramer.receive_data` (``b""`` = EOF) and pull with `PduFramer.next_pdu` until
it returns `NEED_DATA`. It raises only `RtrProtocolError`; after a non-recoverable one (framing
lost) it keeps raising that error and drops further input. The buffer is a `bytearray` read
through an offset and compacted lazily, so the work is O(n) in the bytes received however they
are split, and a caller that drains the framer before feeding it again holds at most one
partial PDU (< ``max_pdu_size``) plus the last chunk.

A reader with a faster path for runs of fixed-size PDUs (the router side staging a full table)
takes them straight from the buffer: `match` returns the octets a pattern matches at the read
position, `skip` consumes what it handled; `consumed` counts every octet taken either way.
"""

from __future__ import annotations

import enum
import re

from rtr_protocol.constants import HEADER_SIZE, MAX_PDU_SIZE
from rtr_protocol.errors import RtrProtocolError, TruncatedPduError
from rtr_protocol.pdu import Pdu
from rtr_protocol.pdu_decode import decode_framed, parse_header


class NeedData(enum.Enum):
    """Sentinel type of `NEED_DATA`."""

    #: No complete PDU is buffered; feed more bytes (or check `PduFramer.eof`).
    NEED_DATA = enum.auto()


#: Returned by `PduFramer.next_pdu` (and `ServerSession.next_action`) when more input is needed.
NEED_DATA = NeedData.NEED_DATA


class PduFramer:
    """Incremental RTR PDU decoder.

    Args:
        max_pdu_size: largest Length accepted; larger PDUs are CORRUPT_DATA (not
            recoverable) and only their header is echoed.
    """

    __slots__ = ("_buf", "_drained", "_eof", "_failed", "_last", "_max", "_pos", "_taken")

    def __init__(self, max_pdu_size: int = MAX_PDU_SIZE) -> None:
        """Start with an empty buffer."""
        if max_pdu_size < HEADER_SIZE:
            raise ValueError(f"max_pdu_size must be at least {HEADER_SIZE}")
        self._max = max_pdu_size
        self._buf = bytearray()
        self._pos = 0
        self._taken = 0
        self._eof = False
        self._drained = True
        self._failed: RtrProtocolError | None = None
        self._last = b""

    @property
    def buffered(self) -> int:
        """Number of received octets held and not yet returned as a PDU."""
        return len(self._buf) - self._pos

    @property
    def held(self) -> int:
        """Octets of memory the buffer currently holds (consumed octets not yet compacted)."""
        return len(self._buf)

    @property
    def consumed(self) -> int:
        """Octets taken from the stream so far (returned as PDUs or skipped)."""
        return self._taken

    @property
    def eof(self) -> bool:
        """True once ``b""`` (end of stream) was received."""
        return self._eof

    @property
    def last_pdu_bytes(self) -> bytes:
        """The raw bytes of the PDU last returned by `next_pdu` (for Error Reports)."""
        return self._last

    def receive_data(self, data: bytes) -> None:
        """Append received bytes; ``b""`` means the peer closed its side.

        Raises:
            RuntimeError: when data arrives after EOF.
        """
        if self._eof:
            if data:
                raise RuntimeError("received data after EOF")
            return
        if not data:
            self._eof = True
            return
        if self._failed is not None:
            return  # framing is lost: nothing more will be parsed, so hold nothing
        pos = self._pos
        if pos:
            live = len(self._buf) - pos
            # Drop consumed octets. Compacting when the caller drained the framer moves only
            # the partial PDU at the tail (each octet at most once); otherwise only when the
            # dead part is at least as large as the live part, which keeps the cost amortised.
            if self._drained or pos >= live:
                del self._buf[:pos]
                self._pos = 0
        self._buf += data

    def next_pdu(self) -> Pdu | NeedData:
        """The next complete PDU, or `NEED_DATA`.

        Raises:
            RtrProtocolError: CORRUPT_DATA for a Length below 8 or above the cap (not
                recoverable) or a truncated PDU at EOF (not recoverable); for a PDU framed by
                its Length but invalid (wrong version, type or length for the type, bad
                fields) the code of `pdu.decode` with ``recoverable=True`` - that PDU is
                consumed and the next call continues with the following one.
        """
        if self._failed is not None:
            raise self._failed
        buf, pos = self._buf, self._pos
        live = len(buf) - pos
        if live < HEADER_SIZE:
            return self._need_data(live)
        try:
            length = parse_header(buf[pos : pos + HEADER_SIZE], self._max)
        except RtrProtocolError as exc:
            self._fail(exc)
            raise
        if live < length:
            return self._need_data(live)
        data = bytes(buf[pos : pos + length])
        self._advance(length)
        self._last = data
        return decode_framed(data)

    def match(self, pattern: re.Pattern[bytes]) -> bytes:
        """The buffered octets ``pattern`` matches at the read position (b"" for none).

        Nothing is consumed: `skip` takes what the caller handled. Matches only what is
        buffered, so a pattern of whole PDUs never returns a partial one.
        """
        if self._failed is not None:
            return b""
        found = pattern.match(self._buf, self._pos)
        return bytes(self._buf[self._pos : found.end()]) if found is not None else b""

    def skip(self, octets: int) -> None:
        """Consume ``octets`` buffered octets the caller handled itself (see `match`).

        Raises:
            ValueError: when fewer octets are buffered.
        """
        if not 0 <= octets <= self.buffered:
            raise ValueError(f"cannot skip {octets} octets with {self.buffered} buffered")
        if octets:
            self._advance(octets)

    def _advance(self, octets: int) -> None:
        self._drained = False
        self._taken += octets
        if self._pos + octets == len(self._buf):
            self._buf.clear()
            self._pos = 0
        else:
            self._pos += octets

    def _need_data(self, live: int) -> NeedData:
        if self._eof and live:
            exc = TruncatedPduError(live, bytes(self._buf[self._pos : self._pos + HEADER_SIZE]))
            self._fail(exc)
            raise exc
        self._drained = True
        return NEED_DATA

    def _fail(self, exc: RtrProtocolError) -> None:
        self._failed = exc
        self._buf = bytearray()
        self._pos = 0
