"""`PduFramer`: bytes in any split → one PDU at a time, framed by the Length field.

Feed it with `PduFramer.receive_data` (``b""`` = EOF) and pull with `PduFramer.next_pdu` until
it returns `NEED_DATA`. It raises only `RtrProtocolError`; after a non-recoverable one (framing
lost) it keeps raising that error and drops further input. The buffer is a `bytearray` read
through an offset and compacted lazily, so the work is O(n) in the bytes received however they
are split, and a caller that drains the framer before feeding it again holds at most one
partial PDU (< ``max_pdu_size``) plus the last chunk.
"""

from __future__ import annotations

import enum

from rtr_protocol.constants import HEADER_SIZE, MAX_PDU_SIZE, ErrorCode
from rtr_protocol.errors import RtrProtocolError
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

    __slots__ = ("_buf", "_drained", "_eof", "_failed", "_last", "_max", "_pos")

    def __init__(self, max_pdu_size: int = MAX_PDU_SIZE) -> None:
        """Start with an empty buffer."""
        if max_pdu_size < HEADER_SIZE:
            raise ValueError(f"max_pdu_size must be at least {HEADER_SIZE}")
        self._max = max_pdu_size
        self._buf = bytearray()
        self._pos = 0
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
        self._drained = False
        if live == length:
            buf.clear()
            self._pos = 0
        else:
            self._pos = pos + length
        self._last = data
        return decode_framed(data)

    def _need_data(self, live: int) -> NeedData:
        if self._eof and live:
            header = bytes(self._buf[self._pos : self._pos + HEADER_SIZE])
            exc = RtrProtocolError(
                ErrorCode.CORRUPT_DATA,
                f"connection closed inside a PDU ({live} octets pending)",
                offending=header,
                version=header[0],
            )
            self._fail(exc)
            raise exc
        self._drained = True
        return NEED_DATA

    def _fail(self, exc: RtrProtocolError) -> None:
        self._failed = exc
        self._buf = bytearray()
        self._pos = 0
