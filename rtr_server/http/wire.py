"""Sans-IO HTTP/1.1 for a GET/HEAD-only server: parse one request head, encode one response head.

`parse_request_head` takes the octets up to and including the blank line that ends the head
(RFC 9112 §2.1) and returns a `Request` or raises `HttpError` carrying the status to answer
with; it never raises anything else. Requests with a body are refused: GET and HEAD have no
use for one, so a ``Content-Length`` other than 0 or any ``Transfer-Encoding`` is 400 (the
connection is then closed, since the body's framing is not followed). Nothing here reads a
socket or a clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qsl, unquote

#: Methods served; anything else is 405 (RFC 9110 §15.5.6, with an Allow header).
METHODS = ("GET", "HEAD")
#: Header lines accepted in one request head.
MAX_HEADERS = 100
#: RFC 9110 §5.6.2 token characters (method and field names).
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: Field values: visible ASCII, obs-text, space and tab (RFC 9110 §5.5); no CR, LF or NUL.
_FIELD_VALUE = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")
#: Origin-form targets only (RFC 9112 §3.2.1): an absolute path and an optional query.
_TARGET = re.compile(rb"/[\x21-\x7e]*")


class HttpError(Exception):
    """Raised for a request that is answered with ``status`` (4xx/5xx) and then closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Request:
    """One parsed request head; header names are lower case."""

    method: str
    target: str
    #: The percent-decoded path of the target.
    path: str
    #: Query parameters (the last value of a repeated name wins).
    query: dict[str, str]
    #: 10 for HTTP/1.0, 11 for HTTP/1.1.
    version: int
    headers: tuple[tuple[str, str], ...] = ()

    def header(self, name: str) -> str | None:
        """The value of header ``name`` (several lines joined with ", "), or None."""
        values = [v for n, v in self.headers if n == name]
        return ", ".join(values) if values else None

    @property
    def keep_alive(self) -> bool:
        """Whether the client allows the connection to stay open (RFC 9112 §9.3)."""
        options = {o.strip().lower() for o in (self.header("connection") or "").split(",")}
        if self.version >= 11:
            return "close" not in options
        return "keep-alive" in options


@dataclass(frozen=True, slots=True)
class Response:
    """A complete response; ``body`` is sent as it is (HEAD sends only the head)."""

    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = field(default=())


def parse_request_head(head: bytes) -> Request:
    """Parse a request head ending in CRLF CRLF (bare LF line ends are accepted too).

    Raises:
        HttpError: 400 malformed (or carrying a body), 405 a method other than GET and HEAD,
            431 too many header lines, 505 an HTTP version other than 1.0 and 1.1. (The size
            of the head is the caller's limit.)
    """
    lines = head.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if lines and lines[-1] in (b"", b"\r"):
        lines.pop()
    else:
        raise HttpError(400, "request head does not end with an empty line")
    lines = [line.removesuffix(b"\r") for line in lines]
    # RFC 9112 §2.2: a server SHOULD ignore at least one empty line before the request line.
    while lines and lines[0] == b"":
        lines.pop(0)
    if not lines:
        raise HttpError(400, "empty request")
    method, target, version = _request_line(lines[0])
    headers = _headers(lines[1:])
    request = _build(method, target, version, headers)
    if request.version >= 11 and request.header("host") is None:
        raise HttpError(400, "HTTP/1.1 request without Host (RFC 9112 §3.2)")
    if method not in METHODS:
        raise HttpError(405, f"method {method} is not allowed; use GET or HEAD")
    if any(n == "transfer-encoding" for n, _ in headers):
        raise HttpError(400, "request bodies are not accepted (Transfer-Encoding given)")
    lengths = {v.strip() for n, v in headers if n == "content-length"}
    if lengths - {"0"}:
        raise HttpError(400, "request bodies are not accepted (Content-Length above 0)")
    return request


def _request_line(line: bytes) -> tuple[str, bytes, int]:
    parts = line.split(b" ")
    if len(parts) != 3:
        raise HttpError(400, "malformed request line")
    method, target, version = parts
    if not _TOKEN.fullmatch(method):
        raise HttpError(400, "malformed method")
    if version == b"HTTP/1.1":
        number = 11
    elif version == b"HTTP/1.0":
        number = 10
    elif re.fullmatch(rb"HTTP/[0-9]\.[0-9]", version):
        raise HttpError(505, f"HTTP version {version.decode()} is not supported")
    else:
        raise HttpError(400, "malformed HTTP version")
    if not _TARGET.fullmatch(target):
        raise HttpError(400, "request target must be an absolute path (origin form)")
    return method.decode("ascii"), target, number


def _headers(lines: list[bytes]) -> tuple[tuple[str, str], ...]:
    if len(lines) > MAX_HEADERS:
        raise HttpError(431, f"more than {MAX_HEADERS} header lines")
    out: list[tuple[str, str]] = []
    for line in lines:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
            # Also refuses obsolete line folding (a line starting with white space).
            raise HttpError(400, "malformed header line")
        value = value.strip(b" \t")
        if not _FIELD_VALUE.fullmatch(value):
            raise HttpError(400, "invalid character in a header value")
        out.append((name.decode("ascii").lower(), value.decode("latin-1")))
    return tuple(out)


def _build(
    method: str, target: bytes, version: int, headers: tuple[tuple[str, str], ...]
) -> Request:
    text = target.decode("ascii")
    raw_path, _, raw_query = text.partition("?")
    try:
        path = unquote(raw_path, errors="strict")
        query = dict(parse_qsl(raw_query, keep_blank_values=True, errors="strict"))
    except UnicodeDecodeError:
        raise HttpError(400, "percent-encoded target is not UTF-8") from None
    return Request(method, text, path, query, version, headers)


def reason_phrase(status: int) -> str:
    """The standard reason phrase of ``status`` (empty for unknown codes)."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def response_head(
    response: Response, *, date: str, keep_alive: bool, extra: tuple[tuple[str, str], ...] = ()
) -> bytes:
    """The status line and headers of ``response`` (Content-Length is sent except on a 304)."""
    lines = [
        f"HTTP/1.1 {response.status} {reason_phrase(response.status)}",
        f"Date: {date}",
        "Server: rtr-serve",
    ]
    if response.status != 304:
        # RFC 9110 §8.6: a 304 carries no Content-Length other than the full representation's.
        lines.append(f"Content-Type: {response.content_type}")
        lines.append(f"Content-Length: {len(response.body)}")
    lines.append("X-Content-Type-Options: nosniff")
    lines.extend(f"{name}: {value}" for name, value in (*response.headers, *extra))
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def error_response(error: HttpError) -> Response:
    """The plain-text response for ``error``."""
    headers: tuple[tuple[str, str], ...] = ()
    if error.status == 405:
        headers = (("Allow", ", ".join(METHODS)),)
    return Response(error.status, (error.message + "\n").encode(), headers=headers)
