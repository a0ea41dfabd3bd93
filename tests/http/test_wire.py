"""The sans-IO request parser and response head: accepted forms, refusals, and a fuzz invariant."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rtr_server.http.wire import (
    HttpError,
    Request,
    Response,
    error_response,
    parse_request_head,
    response_head,
)


def head(*lines: str) -> bytes:
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def parse_or_status(data: bytes) -> tuple[Request | None, int]:
    """``(request, 0)`` when ``data`` parses, else ``(None, status of the HttpError)``."""
    try:
        return parse_request_head(data), 0
    except HttpError as exc:
        return None, exc.status


def test_get_with_query_and_headers() -> None:
    request = parse_request_head(
        head(
            "GET /api/v1/aspa?path=AS1,%7BAS2%20AS3%7D&direction=upstream HTTP/1.1",
            "Host: 127.0.0.1:8080",
            "Accept-Encoding: gzip",
            "X-Twice: a",
            "x-twice: b",
        )
    )
    assert request.method == "GET"
    assert request.path == "/api/v1/aspa"
    assert request.query == {"path": "AS1,{AS2 AS3}", "direction": "upstream"}
    assert request.version == 11
    assert request.header("host") == "127.0.0.1:8080"
    assert request.header("x-twice") == "a, b"
    assert request.header("absent") is None
    assert request.keep_alive


def test_percent_decoded_path_keeps_slashes_of_a_prefix() -> None:
    request = parse_request_head(
        head("GET /api/v1/validity/AS1/2001%3Adb8%3A%3A/32 HTTP/1.1", "Host: x")
    )
    assert request.path == "/api/v1/validity/AS1/2001:db8::/32"


@pytest.mark.parametrize(
    ("version", "connection", "keep"),
    [
        ("HTTP/1.1", None, True),
        ("HTTP/1.1", "close", False),
        ("HTTP/1.1", "Keep-Alive, Close", False),
        ("HTTP/1.0", None, False),
        ("HTTP/1.0", "keep-alive", True),
    ],
)
def test_keep_alive_rules(version: str, connection: str | None, keep: bool) -> None:
    lines = [f"HEAD / {version}", "Host: x"]
    if connection is not None:
        lines.append(f"Connection: {connection}")
    assert parse_request_head(head(*lines)).keep_alive is keep


def test_http_10_needs_no_host_and_bare_lf_is_accepted() -> None:
    request = parse_request_head(b"GET /status HTTP/1.0\n\n")
    assert request.version == 10
    assert request.path == "/status"


def test_leading_empty_line_is_ignored() -> None:
    assert parse_request_head(b"\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n").path == "/"


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (head("POST /status HTTP/1.1", "Host: x"), 405),
        (head("DELETE / HTTP/1.1", "Host: x"), 405),
        (head("GET / HTTP/1.1"), 400),  # no Host
        (head("GET / HTTP/2.0", "Host: x"), 505),
        (head("GET / HTTPS/1.1", "Host: x"), 400),
        (head("GET http://example.net/ HTTP/1.1", "Host: x"), 400),
        (head("GET * HTTP/1.1", "Host: x"), 400),
        (head("GET  / HTTP/1.1", "Host: x"), 400),
        (head("GET / HTTP/1.1", "Host: x", "Content-Length: 5"), 400),
        (head("GET / HTTP/1.1", "Host: x", "Transfer-Encoding: chunked"), 400),
        (head("GET / HTTP/1.1", "Host: x", " folded"), 400),
        (head("GET / HTTP/1.1", "Host x"), 400),
        (head("GET / HTTP/1.1", "Bad Name: x"), 400),
        (head("GET /%ff HTTP/1.1", "Host: x"), 400),
        (head("GET / HTTP/1.1", *[f"X-{i}: y" for i in range(101)]), 431),
        (b"GET / HTTP/1.1\r\nHost: x\r\n", 400),  # no empty line
        (b"\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\x00b\r\n\r\n", 400),
    ],
)
def test_refusals(data: bytes, status: int) -> None:
    with pytest.raises(HttpError) as info:
        parse_request_head(data)
    assert info.value.status == status


def test_content_length_zero_is_fine() -> None:
    assert parse_request_head(head("GET / HTTP/1.1", "Host: x", "Content-Length: 0")).path == "/"


@given(st.binary(max_size=300))
def test_parser_raises_only_http_errors(data: bytes) -> None:
    """Any input parses or raises HttpError with a 4xx/5xx status; nothing else escapes."""
    request, status = parse_or_status(data)
    if request is not None:
        assert request.method in ("GET", "HEAD")
    assert status == 0 or 400 <= status < 600


@given(
    st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=40),
    st.text(max_size=40),
)
def test_parser_on_request_shaped_input(target: str, value: str) -> None:
    data = f"GET /{target} HTTP/1.1\r\nHost: x\r\nX: {value}\r\n\r\n".encode(errors="replace")
    request, status = parse_or_status(data)
    if request is not None:
        assert request.target == "/" + target
    assert status in (0, 400)


def test_response_head() -> None:
    response = Response(200, b"hello", "text/plain", (("ETag", '"1-2"'),))
    text = response_head(response, date="D", keep_alive=False).decode()
    lines = text.split("\r\n")
    assert lines[0] == "HTTP/1.1 200 OK"
    assert "Content-Length: 5" in lines
    assert 'ETag: "1-2"' in lines
    assert "Connection: close" in lines
    assert text.endswith("\r\n\r\n")


def test_304_has_no_content_length() -> None:
    text = response_head(Response(304), date="D", keep_alive=True).decode()
    assert text.startswith("HTTP/1.1 304 Not Modified\r\n")
    assert "Content-Length" not in text
    assert "Connection: close" not in text


def test_405_names_the_allowed_methods() -> None:
    response = error_response(HttpError(405, "no"))
    assert ("Allow", "GET, HEAD") in response.headers
