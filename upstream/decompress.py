"""Bounded decompression: whole exports by magic number, HTTP content codings as they stream.

`decompress` undoes gzip, bzip2 or xz (several members allowed) with an output cap checked as
the output grows; `ContentDecoder` undoes one gzip/deflate Content-Encoding step in pieces, so
the HTTP source counts the decoded body as it arrives. Both raise `FormatError` for corrupt
data.
"""

from __future__ import annotations

import bz2
import lzma
import math
import zlib
from collections.abc import Iterator, Sequence
from typing import Final, Protocol

from upstream.format_error import FormatError, SizeLimitError

__all__ = ["ContentDecoder", "decode", "decode_flush", "decompress"]

#: Output is produced in pieces of at most this size, so the cap is checked as it grows.
_STEP: Final = 1 << 20


class _Decompressor(Protocol):
    @property
    def eof(self) -> bool: ...
    @property
    def unused_data(self) -> bytes: ...


class _StreamDecompressor(_Decompressor, Protocol):
    @property
    def needs_input(self) -> bool: ...
    def decompress(self, data: bytes, max_length: int = -1) -> bytes: ...


def _zlib_pieces(obj: zlib._Decompress, data: bytes) -> Iterator[bytes]:
    while not obj.eof:
        out = obj.decompress(data, _STEP)
        data = obj.unconsumed_tail
        if not out and not data:
            return
        yield out


def _stream_pieces(obj: _StreamDecompressor, data: bytes) -> Iterator[bytes]:
    out = obj.decompress(data, max_length=_STEP)
    while True:
        yield out
        if obj.eof or obj.needs_input:
            return
        out = obj.decompress(b"", max_length=_STEP)


def decompress(data: bytes, max_size: int | None = None) -> bytes:
    """Undo gzip, bzip2 or xz compression; other data is returned as it is.

    The format is recognised by its magic number; several members are allowed.

    Raises:
        FormatError: corrupt or truncated compressed data, or garbage after it.
        SizeLimitError: the output would exceed ``max_size`` (checked as it grows).
    """
    if data[:2] == b"\x1f\x8b":
        kind, magic = "gzip", data[:2]
    elif data[:3] == b"BZh":
        kind, magic = "bzip2", data[:3]
    elif data[:6] == b"\xfd7zXZ\x00":
        kind, magic = "xz", data[:6]
    else:
        return data
    limit = math.inf if max_size is None else max_size
    out: list[bytes] = []
    total = 0
    rest = data
    try:
        while rest:
            obj: _Decompressor
            if kind == "gzip":
                zobj = zlib.decompressobj(16 + zlib.MAX_WBITS)
                obj, pieces = zobj, _zlib_pieces(zobj, rest)
            elif kind == "bzip2":
                bobj = bz2.BZ2Decompressor()
                obj, pieces = bobj, _stream_pieces(bobj, rest)
            else:
                xobj = lzma.LZMADecompressor()
                obj, pieces = xobj, _stream_pieces(xobj, rest)
            for piece in pieces:
                total += len(piece)
                if total > limit:
                    raise SizeLimitError(kind, int(limit))
                out.append(piece)
            if not obj.eof:
                raise FormatError(f"corrupt compressed data: truncated {kind} stream")
            rest = obj.unused_data
            if rest and not rest.startswith(magic):
                if rest.strip(b"\0"):
                    raise FormatError(f"corrupt compressed data: garbage after the {kind} stream")
                break
    except (OSError, EOFError, ValueError, lzma.LZMAError, zlib.error) as exc:
        if isinstance(exc, FormatError):
            raise
        raise FormatError(f"corrupt compressed data: {exc}") from None
    return b"".join(out)


class ContentDecoder:
    """Undo one gzip or deflate Content-Encoding step, in pieces of at most `_STEP` bytes."""

    def __init__(self, encoding: str) -> None:
        """``encoding`` is ``gzip``, ``x-gzip`` or ``deflate``."""
        self.encoding = encoding
        wbits = 16 + zlib.MAX_WBITS if encoding in ("gzip", "x-gzip") else zlib.MAX_WBITS
        self._obj = zlib.decompressobj(wbits)
        self._started = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The decoded pieces of ``data``.

        Raises:
            FormatError: corrupt data.
        """
        while data and not self._obj.eof:
            try:
                out = self._obj.decompress(data, _STEP)
            except zlib.error as exc:
                if self.encoding == "deflate" and not self._started:
                    # "deflate" is often sent raw, without the zlib wrapper (as httpx allows).
                    self._obj = zlib.decompressobj(-zlib.MAX_WBITS)
                    self._started = True
                    continue
                raise FormatError(f"corrupt {self.encoding} Content-Encoding: {exc}") from None
            self._started = True
            data = self._obj.unconsumed_tail
            if out:
                yield out
        # Data after the end of the compressed stream is ignored (as httpx does).

    def flush(self) -> Iterator[bytes]:
        """The pieces still held once the input ended.

        Raises:
            FormatError: the stream was truncated (gzip).
        """
        while not self._obj.eof:
            out = self._obj.decompress(b"", _STEP)
            if not out:
                if self.encoding == "deflate":
                    return  # deflate without its end marker is tolerated (as httpx does)
                raise FormatError(f"truncated {self.encoding} Content-Encoding")
            yield out


def decode(decoders: Sequence[ContentDecoder], data: bytes) -> Iterator[bytes]:
    """``data`` through every decoder in turn (the first is applied first)."""
    if not decoders:
        if data:
            yield data
        return
    for piece in decoders[0].feed(data):
        yield from decode(decoders[1:], piece)


def decode_flush(decoders: Sequence[ContentDecoder]) -> Iterator[bytes]:
    """What the decoders still hold once the input ended, through the later ones."""
    for i, decoder in enumerate(decoders):
        for piece in decoder.flush():
            yield from decode(decoders[i + 1 :], piece)
