"""The body of an HTTP export: read within its byte budget, decoded, hashed, parsed.

Every failure is a `PollError` with its class (``size``, ``http``, ``format``) and a message
that holds no secret; the parse step runs in a worker thread and skips a body whose SHA-256 is
the content already in force.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import httpx

from upstream.decompress import ContentDecoder, decode, decode_flush, decompress
from upstream.format_error import FormatError, SizeLimitError
from upstream.heap import trim_heap
from upstream.json_format import parse_export
from upstream.pieces import PieceMemo
from upstream.source import Delivery, payload_identity

__all__ = [
    "Parsed",
    "PollError",
    "Response",
    "decompress_bounded",
    "describe",
    "digest_and_parse",
    "read_body",
    "too_large",
]


class PollError(Exception):
    """One failed poll: its class and a message that holds no secret."""

    def __init__(self, error_class: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.message = message
        self.retry_after = retry_after


def describe(exc: BaseException) -> str:
    """``Type: message`` of an exception (just the type when it has no message)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# ---------------------------------------------------------------- bounded decompression


def content_decoders(header: str | None) -> list[ContentDecoder]:
    """Decoders in the order to apply them (the reverse of the header's)."""
    decoders = []
    for token in reversed((header or "").split(",")):
        encoding = token.strip().lower()
        if encoding in ("", "identity"):
            continue
        if encoding not in ("gzip", "x-gzip", "deflate"):
            raise PollError("http", f"unsupported Content-Encoding {encoding[:40]!r}")
        decoders.append(ContentDecoder(encoding))
    return decoders


def too_large(limit: int, what: str) -> PollError:
    """The ``size`` failure of ``what`` past ``limit`` bytes."""
    return PollError("size", f"{what} exceeds the limit of {limit} bytes")


def decompress_bounded(data: bytes, limit: int) -> bytes:
    """`upstream.decompress.decompress` with an output cap; the cap is a ``size`` failure.

    Raises:
        FormatError: corrupt or truncated compressed data.
        PollError: class ``size`` once the output would exceed ``limit``.
    """
    try:
        return decompress(data, max_size=limit)
    except SizeLimitError as exc:
        raise too_large(limit, f"decompressed {exc.kind} body") from None


# ---------------------------------------------------------------- worker-thread step


@dataclass(frozen=True, slots=True)
class Parsed:
    """What the worker-thread step made of a body: its digest and a delivery or a failure."""

    digest: bytes
    delivery: Delivery | None = None
    failure: PollError | None = None


def digest_and_parse(
    chunks: list[bytes],
    known: tuple[bytes | None, ...],
    limit: int,
    max_aspa_providers: int,
    memo: PieceMemo | None = None,
) -> Parsed:
    """Hash the body; unless the hash is ``known``, decompress and parse it (worker thread).

    ``memo`` holds the pieces of the last export read (`upstream.pieces`).
    """
    sha = hashlib.sha256()
    for chunk in chunks:
        sha.update(chunk)
    digest = sha.digest()
    if digest in known:
        return Parsed(digest)
    data = b"".join(chunks)
    chunks.clear()
    try:
        data = decompress_bounded(data, limit)
        payload = parse_export(data, max_aspa_providers=max_aspa_providers, memo=memo)
        del data
        trim_heap()  # the body and the read's transients go back to the system
        return Parsed(digest, Delivery(payload, payload_identity(payload)))
    except FormatError as exc:
        return Parsed(digest, failure=PollError("format", str(exc)))
    except PollError as failure:
        return Parsed(digest, failure=failure)


@dataclass(slots=True)
class Response:
    """A 200 (body read in full) or a 304 (no body)."""

    status: int
    etag: str | None = None
    last_modified: str | None = None
    chunks: list[bytes] | None = None
    raw_bytes: int = 0
    size: int = 0


async def read_body(
    response: httpx.Response,
    raw_body: Callable[[], AsyncIterator[bytes]],
    limit: int,
    counted: Callable[[int], Awaitable[None]],
) -> Response:
    """Read a 200's body in full, undoing its Content-Encoding, within ``limit`` bytes.

    The raw bytes come from ``raw_body()`` (`upstream.http_exchange.ResponseHolder.raw`), whose
    owner closes the response and then unrolls and closes that iterator; this only stops
    consuming it. ``counted`` is awaited with every raw byte count as it arrives, before the
    bytes are kept (``bytes_read`` and the source's byte quota, which may wait for room or fail
    with a `PollError`).

    Raises:
        PollError: ``size`` past the limit, ``http`` for an unsupported Content-Encoding,
            ``format`` for a corrupt one.
    """
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large(limit, f"body (Content-Length {declared})")
    etag, last_modified = response.headers.get("etag"), response.headers.get("last-modified")
    if response.is_stream_consumed:
        # An in-memory response (httpx.Response(content=...) from a test transport) arrives
        # already read and decoded.
        body = response.content
        if len(body) > limit:
            raise too_large(limit, "body")
        await counted(len(body))
        return Response(200, etag, last_modified, [body], len(body), len(body))
    decoders = content_decoders(response.headers.get("content-encoding"))
    chunks: list[bytes] = []
    raw = size = 0
    try:
        async for data in raw_body():
            raw += len(data)
            if raw > limit:
                raise too_large(limit, "body")
            await counted(len(data))
            for piece in decode(decoders, data):
                size += len(piece)
                if size > limit:
                    raise too_large(limit, "decoded body")
                chunks.append(piece)
        for piece in decode_flush(decoders):
            size += len(piece)
            if size > limit:
                raise too_large(limit, "decoded body")
            chunks.append(piece)
    except FormatError as exc:  # a corrupt Content-Encoding
        raise PollError("format", str(exc)) from None
    return Response(200, etag, last_modified, chunks, raw, size)
