"""Sans-IO HTTP/1.1 for a GET/HEAD-only server: request heads read by h11, response heads encoded.

`RequestReader` splits what a connection receives into requests: h11 frames and parses each
head, and the rules of this server are applied on top (origin-form targets, HTTP/1.0 and 1.1
only, no request bodies, no obsolete line folding, at most `MAX_HEADERS` header lines and
``max_head_bytes`` octets per head). A refused request raises `HttpError` carrying the status
to answer with; nothing else is raised. `parse_request_head` does the same for one complete
head. Responses are encoded here (`response_head`), not by h11, so HTTP/1.0 keep-alive is
kept. Nothing here reads a socket or a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qsl, unquote

import h11

#: Methods served; anything else is 405 (RFC 9110 §15.5.6, with an Allow header).
METHODS = ("GET", "HEAD")
#: Header lines accepted in one request head.
MAX_HEADERS = 100


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


#: The HTTP versions served (another HTTP/x.y is 505); h11 gives the version as b"1.1".
_VERSIONS = {b"1.1": 11, b"1.0": 10}
#: Control characters refused in a header value (h11 refuses NUL, CR and LF; RFC 9110 §5.5
#: lets a recipient refuse the others, and this server always has).
_CONTROLS = bytes([*range(0x09), *range(0x0A, 0x20), 0x7F])


class RequestReader:
    """The requests of one connection: feed it the bytes received, take requests out in order.

    `next_request` returns the next `Request`, None while its head is incomplete, or raises
    `HttpError`, after which the connection is answered and closed (the reader is not used
    again). A head, from its first octet (an empty line ignored before the request line,
    RFC 9112 §2.2, included) to its final empty line, is at most ``max_head_bytes`` (else
    431). Bytes after a head are the next request's (pipelining). Each request gets a fresh
    h11 connection seeded with those bytes: h11 starts its next cycle only once the response
    has gone through it, and responses are encoded by `response_head` instead.
    """

    def __init__(self, max_head_bytes: int) -> None:
        """Read heads of at most ``max_head_bytes`` octets."""
        self.max_head_bytes = max_head_bytes
        #: What has arrived of the next request (and of any pipelined after it).
        self._data = bytearray()
        #: The length of the empty line ignored before the request line (0: none yet).
        self._skip = 0
        self._h11: h11.Connection | None = None

    @property
    def pending(self) -> int:
        """Octets received that are not part of a request returned yet."""
        return len(self._data)

    def receive_data(self, data: bytes) -> None:
        """Add received bytes."""
        self._data += data
        if self._h11 is not None and data:  # (h11 takes b"" as the end of the stream)
            self._h11.receive_data(data)

    def next_request(self) -> Request | None:
        """The next complete request, or None until more bytes arrive.

        Raises:
            HttpError: 400 malformed (or carrying a body), 405 a method other than GET and HEAD,
                431 a head too large or with too many header lines, 505 an HTTP version other
                than 1.0 and 1.1.
        """
        parser = self._h11 or self._begin()
        request = None if parser is None else self._parse(parser)
        if request is None and len(self._data) >= self.max_head_bytes:
            raise HttpError(431, "request head too large")
        return request

    def _begin(self) -> h11.Connection | None:
        """An h11 connection once the request line has begun; None while only an empty line came."""
        data = self._data
        if not self._skip:
            if not data or data == b"\r":  # (wait: CR may begin an empty line)
                return None
            self._skip = 2 if data.startswith(b"\r\n") else 1 if data.startswith(b"\n") else 0
        if len(data) == self._skip:
            return None
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=self.max_head_bytes)
        self._h11.receive_data(bytes(data[self._skip :]))
        return self._h11

    def _parse(self, parser: h11.Connection) -> Request | None:
        """The request h11 reads next, None if it needs more bytes; ends the cycle on a request."""
        try:
            event = parser.next_event()
        except h11.RemoteProtocolError as exc:
            if exc.error_status_hint == 431:
                raise HttpError(431, "request head too large") from None
            if _header_lines(self._head(parser)) > MAX_HEADERS:
                raise HttpError(431, f"more than {MAX_HEADERS} header lines") from None
            raise HttpError(400, f"malformed request: {exc}") from None
        if not isinstance(event, h11.Request):
            return None  # NEED_DATA: the head is not complete yet
        head = self._head(parser)
        end = self._skip + len(head)
        self._data, self._skip, self._h11 = self._data[end:], 0, None
        if end > self.max_head_bytes:
            raise HttpError(431, "request head too large")
        return _request(event, head)

    def _head(self, parser: h11.Connection) -> bytes:
        """The octets ``parser`` has consumed: the head it has read (or failed on)."""
        unread = len(parser.trailing_data[0])
        return bytes(self._data[self._skip : len(self._data) - unread])


def parse_request_head(head: bytes) -> Request:
    """Parse exactly one request head ending in its empty line (bare LF line ends are accepted).

    Raises:
        HttpError: as `RequestReader.next_request`, and 400 for an incomplete head or bytes
            after it. (The size of the head is the caller's limit.)
    """
    reader = RequestReader(len(head) + 1)
    reader.receive_data(head)
    request = reader.next_request()
    if request is None:
        raise HttpError(400, "request head does not end with an empty line")
    if reader.pending:
        raise HttpError(400, "bytes after the request head")
    return request


def _header_lines(head: bytes) -> int:
    """The header lines of a head (its lines less the request line and the empty line)."""
    return head.count(b"\n") - 2


def _request(event: h11.Request, head: bytes) -> Request:
    """Apply this server's rules to a head h11 has accepted (syntax, Host, Content-Length)."""
    if _header_lines(head) > MAX_HEADERS:
        raise HttpError(431, f"more than {MAX_HEADERS} header lines")
    version = _VERSIONS.get(event.http_version)
    if version is None:
        shown = event.http_version.decode("ascii")
        raise HttpError(505, f"HTTP version HTTP/{shown} is not supported")
    if not event.target.startswith(b"/"):
        raise HttpError(400, "request target must be an absolute path (origin form)")
    if b"\n " in head or b"\n\t" in head:
        raise HttpError(400, "obsolete line folding is not accepted")
    if any(len(value.translate(None, _CONTROLS)) < len(value) for _, value in event.headers):
        raise HttpError(400, "invalid character in a header value")
    headers = tuple((n.decode("ascii"), v.decode("latin-1")) for n, v in event.headers)
    method = event.method.decode("ascii")
    request = _build(method, event.target, version, headers)
    if method not in METHODS:
        raise HttpError(405, f"method {method} is not allowed; use GET or HEAD")
    if any(n == "transfer-encoding" for n, _ in headers):
        raise HttpError(400, "request bodies are not accepted (Transfer-Encoding given)")
    if {v for n, v in headers if n == "content-length"} - {"0"}:
        raise HttpError(400, "request bodies are not accepted (Content-Length above 0)")
    return request


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
