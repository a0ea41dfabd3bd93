"""`PieceCutter`: an export's ``roas`` array cut into pieces as its bytes arrive, each decoded once.

The array is cut at entry boundaries into pieces of about `PIECE_SIZE` octets. A piece is
decoded by msgspec as one small array (brackets added) into `upstream.json_typed.Roa` structs
and packed at once, so no structure of the whole array is ever built, and the export's bytes
can be fed block by block (`feed`): only the blocks not cut yet are held. With the `PieceMemo`
of the source's previous export, a piece that starts where a remembered one started (its first
`ANCHOR_SIZE` octets) and has the same SHA-256 is taken from the memo without decoding; after a
changed piece the cut follows the remembered pieces' starts again, so a change of a few entries
decodes a few pieces and the rest of the table is not decoded again.

Why pieces read separately are the array: each decoded piece is a valid comma-separated sequence
of JSON values (a remembered one was, with the same bytes), and only JSON whitespace and one
comma lie between two pieces; so the array is their concatenation, whatever the cut points. A
cut that falls inside a string or a nested value leaves a piece that does not decode; then, like
for any entry that is not of the common shape, the cutter gives up (`PieceRead` None) and the
caller reads the whole document the general way. The caller also checks that the array found is
the document's top-level ``roas`` (`upstream.json_typed.decode_frame`, on `PieceRead.frame`).
"""

from __future__ import annotations

import hashlib
import re
import socket
import struct
from dataclasses import dataclass
from typing import Final

from snapshot.packed import V4, V4_KEY_SIZE, V6
from upstream.json_typed import PIECE_DECODER, PIECE_ERRORS, UNSET, Roa
from upstream.packed_vrp import packed_key
from upstream.pieces import ANCHOR_SIZE, Piece, PieceMemo, add_support, family_part

__all__ = ["MAX_HELD", "PIECE_SIZE", "PieceCutter", "PieceRead", "read_pieces"]

#: Octets after which a new piece is cut at the next entry boundary.
PIECE_SIZE: Final = 64 * 1024
#: How far past a changed piece the starts of the next remembered pieces are looked for.
RESYNC_WINDOW: Final = 4 * PIECE_SIZE
#: Remembered pieces looked for after a changed one (a deleted start skips to the next).
RESYNC_TRIES: Final = 3
#: Octets held before the ``roas`` array or inside one piece before the cutter gives up.
MAX_HELD: Final = 64 << 20

#: JSON whitespace.
_WS: Final = b" \t\n\r"
#: The ``roas`` key and its array's ``[`` (group 1), then whitespace.
_OPEN: Final = re.compile(rb'"roas"[ \t\n\r]*:[ \t\n\r]*(\[)[ \t\n\r]*')
#: After an entry: a comma (group 1) and whitespace, or the array's ``]``.
_AFTER: Final = re.compile(rb"[ \t\n\r]*(?:(,)[ \t\n\r]*|\])")
#: An entry boundary: ``}``, a comma, ``{`` (whitespace anywhere between).
_CUT: Final = re.compile(rb"\}[ \t\n\r]*,[ \t\n\r]*\{")
#: The last entry and the array's end.
_END: Final = re.compile(rb"\}[ \t\n\r]*\]")
_AF4: Final = socket.AF_INET
_AF6: Final = socket.AF_INET6


@dataclass(frozen=True, slots=True)
class PieceRead:
    """The pieces of one export's ``roas`` array, and the document around the array."""

    pieces: list[Piece]
    #: The document before the array's ``[``, and after its ``]``.
    head: bytes
    tail: bytes
    #: Pieces taken from the memo.
    reused: int

    def frame(self, mark: bytes) -> bytes:
        """The document with its ``roas`` array replaced by ``[mark]``."""
        return b"".join((self.head, b"[", mark, b"]", self.tail))


def read_pieces(data: bytes, memo: PieceMemo | None = None) -> PieceRead | None:
    """The pieces of ``data`` (a whole export); None when it cannot be read in pieces."""
    cutter = PieceCutter(memo)
    cutter.feed(data)
    return cutter.finish()


class PieceCutter:
    """Cuts and reads the ``roas`` array of an export fed in blocks (`feed`, then `finish`).

    ``memo`` holds the pieces of the previous export; it is not changed here.
    """

    def __init__(self, memo: PieceMemo | None = None) -> None:
        """Ready for the export's first block."""
        self._memo = memo
        self._old = memo.pieces if memo is not None else ()
        #: The bytes fed and not cut yet (after the array opened: from ``_pos`` on).
        self._buf = b""
        self._pos = 0
        #: The document up to and without the array's ``[``, once found.
        self._head: bytes | None = None
        #: The document after the array's ``]``, once found.
        self._tail: list[bytes] | None = None
        self._pieces: list[Piece] = []
        self._reused = 0
        self._expect = 0  # the remembered piece expected next
        self._failed = False

    def feed(self, block: bytes) -> None:
        """The next block of the export."""
        if self._failed:
            return
        if self._tail is not None:
            self._tail.append(block)
            return
        self._buf = self._buf[self._pos :] + block if self._pos else self._buf + block
        self._pos = 0
        self._advance(final=False)

    def finish(self) -> PieceRead | None:
        """The pieces once every block was fed; None when the export cannot be read in pieces."""
        if not self._failed and self._tail is None:
            self._advance(final=True)
        if self._failed or self._tail is None or self._head is None:
            return None
        return PieceRead(self._pieces, self._head, b"".join(self._tail), self._reused)

    # ------------------------------------------------------------------ the cut
    def _advance(self, *, final: bool) -> None:
        """Cut and read every piece the bytes held decide; at the end of the array, stop."""
        if self._head is None and not self._open(final):
            return
        buf = self._buf
        # Without the export's end, act only with enough bytes ahead to decide as with all.
        horizon = len(buf) if final else len(buf) - RESYNC_WINDOW - 2 * PIECE_SIZE
        while self._pos < horizon or final:
            step = self._step(buf, final)
            if step is None:
                if not final and len(buf) - self._pos > MAX_HELD:
                    self._failed = True
                return
            end, closed = step
            if closed is not None:
                self._tail = [buf[closed + 1 :]]
                self._buf = b""
                return
            self._pos = end

    def _open(self, final: bool) -> bool:
        """Find the array's start; False while it is not in the bytes held (or never will be)."""
        opened = _OPEN.search(self._buf)
        if opened is None or (not final and opened.end() == len(self._buf)):
            if final or len(self._buf) > MAX_HELD:
                self._failed = True
            return False
        self._head = self._buf[: opened.start(1)]
        self._pos = opened.end()
        if self._buf[self._pos : self._pos + 1] == b"]":
            self._tail = [self._buf[self._pos + 1 :]]
            self._buf = b""
        return self._tail is None

    def _step(self, buf: bytes, final: bool) -> tuple[int, int | None] | None:
        """Read the piece at ``_pos``: (where the next starts, the array's ``]`` if it ends).

        None when more bytes are needed, or (``_failed`` set) never can do.
        """
        pos, memo, piece = self._pos, self._memo, None
        hit = memo.at_anchor(buf[pos : pos + ANCHOR_SIZE]) if memo is not None else None
        if hit is not None:
            candidate = self._old[hit]
            end = pos + candidate.size
            if end > len(buf) and not final:
                return None
            if hashlib.sha256(memoryview(buf)[pos:end]).digest() == candidate.digest:
                piece = candidate
            self._expect = hit + 1
        reused = piece is not None
        if piece is None:
            found = self._piece_end(buf, pos, final)
            if found is None:
                return None
            end, expect = found
            piece = _decoded(memoryview(buf)[pos:end])
            if piece is None:
                self._failed = True
                return None
            self._expect = expect
        after = _AFTER.match(buf, end)
        if after is None or (after.end() == len(buf) and not final):
            self._failed = final or after is None
            return None
        self._pieces.append(piece)
        self._reused += reused
        if after.group(1) is None:
            return end, after.end() - 1
        return after.end(), None

    def _piece_end(self, buf: bytes, pos: int, final: bool) -> tuple[int, int] | None:
        """(end, next expected remembered piece) of a new piece starting at ``pos``.

        The piece ends before the first of the next remembered pieces found again, else after
        `PIECE_SIZE` octets at the next entry boundary, or with the array.
        """
        cut = _CUT.search(buf, pos + PIECE_SIZE)
        if cut is None and not final:
            return None
        stop = cut.start() + 1 if cut is not None else len(buf)
        last = _END.search(buf, pos, stop)
        if last is not None:
            stop = last.start() + 1
        elif cut is None:
            self._failed = True
            return None
        best = stop, self._expect
        old = self._old
        for index in range(self._expect, min(self._expect + RESYNC_TRIES, len(old))):
            anchor = old[index].anchor
            at = buf.find(anchor, pos + 1, min(best[0], pos + RESYNC_WINDOW) + len(anchor))
            if at < 0:
                continue
            end = _entry_end_before(buf, at)
            if end is not None and end < best[0]:
                best = end, index
        return best


def _entry_end_before(data: bytes, start: int) -> int | None:
    """The end of the entry before the one starting at ``start``; None if none ends there."""
    end = start - _trailing_ws(data, start)
    if data[end - 1 : end] != b",":
        return None
    end -= 1
    end -= _trailing_ws(data, end)
    return end if data[end - 1 : end] == b"}" else None


def _trailing_ws(data: bytes, end: int) -> int:
    """How many whitespace octets end ``data[:end]``."""
    start = end
    while start > 0 and data[start - 1] in _WS:
        start -= 1
    return end - start


_LENGTHS: Final = {str(n): n for n in range(129)}
#: The packed key (`snapshot.packed` V4/V6) from the address octets, max length, length, ASN.
_PACK_V4: Final = V4.fields.pack
_PACK_V6: Final = V6.fields.pack
#: The host bits of a prefix length (-1 past the family's width: never all zero but 0.0.0.0).
_HOST_V4: Final = [(1 << (32 - n)) - 1 if n <= 32 else -1 for n in range(129)]
_HOST_V6: Final = [(1 << (128 - n)) - 1 for n in range(129)]


def _decoded(span: memoryview) -> Piece | None:
    """The piece of entries ``span``; None when they are not all valid and of the common shape.

    The loop is `upstream.packed_vrp.packed_key` inlined (the same checks, in another order,
    the key packed by `struct`): it is the one place every VRP of a first read goes through.
    """
    try:
        roas = PIECE_DECODER.decode(b"[" + span + b"]")
    except PIECE_ERRORS:
        return None
    v4: dict[bytes, int] = {}
    v6: dict[bytes, int] = {}
    lengths, host_v4, host_v6, unset = _LENGTHS, _HOST_V4, _HOST_V6, UNSET
    inet_pton, from_bytes, af_inet, af_inet6 = socket.inet_pton, int.from_bytes, _AF4, _AF6
    pack_v4, pack_v6 = _PACK_V4, _PACK_V6
    repeated = 0
    for roa in roas:
        address, _, length_text = roa.prefix.partition("/")
        length = lengths.get(length_text)
        if length is None:
            return None
        max_length = roa.maxLength
        if max_length is unset:
            max_length = length
        # struct refuses a negative max length and an ASN outside 0 .. 2**32-1 (struct.error)
        try:
            if ":" in address:
                raw = inet_pton(af_inet6, address)
                if max_length > 128 or from_bytes(raw) & host_v6[length]:
                    return None
                key = pack_v6(raw, max_length, length, roa.asn)
                vrps = v6
            else:
                raw = inet_pton(af_inet, address)
                if max_length > 32 or from_bytes(raw) & host_v4[length]:
                    return None
                key = pack_v4(raw, max_length, length, roa.asn)
                vrps = v4
        except (OSError, ValueError, struct.error):  # ValueError: an embedded NUL
            return None
        if length > max_length:
            return None
        expires = roa.expires
        if vrps.setdefault(key, expires) is not expires:
            repeated += 1
    if repeated or len(v4) + len(v6) != len(roas):
        return _with_repeats(span, roas)
    return Piece(
        hashlib.sha256(span).digest(),
        len(span),
        bytes(span[:ANCHOR_SIZE]),
        len(roas),
        family_part(v4, []),
        family_part(v6, []),
    )


def _with_repeats(span: memoryview, roas: list[Roa]) -> Piece | None:
    """The piece when some VRP is listed more than once in it: its latest expiry, the extras."""
    v4: dict[bytes, int] = {}
    v6: dict[bytes, int] = {}
    v4_extras: list[tuple[bytes, int]] = []
    v6_extras: list[tuple[bytes, int]] = []
    for roa in roas:
        key = packed_key(roa.prefix, roa.asn, roa.maxLength, UNSET)
        if key is None:
            return None
        if len(key) == V4_KEY_SIZE:
            add_support(v4, v4_extras, key, roa.expires)
        else:
            add_support(v6, v6_extras, key, roa.expires)
    return Piece(
        hashlib.sha256(span).digest(),
        len(span),
        bytes(span[:ANCHOR_SIZE]),
        len(roas),
        family_part(v4, v4_extras),
        family_part(v6, v6_extras),
    )
