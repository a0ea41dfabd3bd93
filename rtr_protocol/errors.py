"""`RtrProtocolError`: the one exception the codec raises for anything wrong on the wire.

It carries what the session needs to answer with an Error Report directly: the code, the
offending PDU bytes, a text, the version of the offending PDU and whether the byte stream is
still framed (``recoverable``). Any other exception escaping `decode` or `PduFramer` is a bug.
"""

from __future__ import annotations

from rtr_protocol.constants import ErrorCode


class RtrProtocolError(Exception):
    """Raised when received bytes are not a valid RTR PDU for their version.

    Attributes:
        code: the Error Report code that describes the problem.
        offending: the offending PDU as received (only its 8-octet header when the Length
            field itself is unusable), or b"" when there is no PDU to blame.
        text: a short English diagnostic, suitable for an Error Report text.
        version: the Protocol Version octet of the offending PDU, when one was read.
        recoverable: True when the PDU was consumed by its Length field and the stream is
            still in sync (the next PDU can be read); False when framing is lost.
    """

    def __init__(
        self,
        code: ErrorCode,
        text: str,
        *,
        offending: bytes = b"",
        version: int | None = None,
        recoverable: bool = False,
    ) -> None:
        """Build the error; ``text`` is also the exception message."""
        super().__init__(text)
        self.code = code
        self.text = text
        self.offending = offending
        self.version = version
        self.recoverable = recoverable

    @property
    def pdu_type(self) -> int | None:
        """The PDU Type octet of the offending PDU, when at least two octets are known."""
        return self.offending[1] if len(self.offending) >= 2 else None

    def __repr__(self) -> str:
        return (
            f"RtrProtocolError({self.code.name}, {self.text!r}, version={self.version}, "
            f"recoverable={self.recoverable}, offending={self.offending[:16].hex()})"
        )


class TruncatedPduError(RtrProtocolError):
    """The peer closed the connection inside a PDU: ``pending`` octets of it were received.

    Raised by `PduFramer.next_pdu` at EOF (CORRUPT_DATA, not recoverable). A server answers it
    like any framing error; the router side (`ClientSession`) simply closes, reporting nothing.
    """

    def __init__(self, pending: int, header: bytes) -> None:
        """Build the error from the octets pending and the header read so far."""
        super().__init__(
            ErrorCode.CORRUPT_DATA,
            f"connection closed inside a PDU ({pending} octets pending)",
            offending=header,
            version=header[0],
        )
        self.pending = pending
