"""What an HTTP source may request: the URL rule, secret headers, user agent (no I/O).

`parse_http_url` refuses a URL that can never work before any network; `SecretHeaders` holds
extra request headers (an auth token) whose values never appear in logs, errors or ``repr``.
"""

from __future__ import annotations

import ipaddress
import re
import ssl
from collections.abc import Mapping
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from typing import Final

import httpx

from upstream.hostname import is_hostname

__all__ = [
    "DEFAULT_PORTS",
    "RESERVED_HEADERS",
    "SecretHeaders",
    "default_ssl_context",
    "origin_of",
    "parse_http_url",
    "redacted",
    "user_agent",
]

#: Headers the source sets itself; ``headers`` may not override them.
RESERVED_HEADERS: Final = frozenset(
    {
        "host",
        "if-none-match",
        "if-modified-since",
        "accept-encoding",
        "content-length",
        "transfer-encoding",
        "connection",
        "range",
    }
)
DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")


@cache
def user_agent() -> str:
    """``rtr-serve/<version>`` (``unknown`` when the distribution metadata is not installed)."""
    try:
        release = version("rtr-serve")
    except PackageNotFoundError:
        release = "unknown"
    return f"rtr-serve/{release}"


@cache
def default_ssl_context() -> ssl.SSLContext:
    """Httpx's own default context, built once and shared."""
    # httpx's own default (certifi, or SSL_CERT_FILE / SSL_CERT_DIR); built once, shared.
    return httpx.create_ssl_context()


def redacted(url: str) -> str:
    return _USERINFO.sub(r"\1***@", url)


def parse_http_url(url: str) -> httpx.URL:
    """Check a source URL without any I/O.

    Raises:
        ValueError: not ``http``/``https``, no host, a bad port, user info (credentials belong
            in ``headers``, which are never logged), blanks or control characters.
    """
    if not url or any(c.isspace() or not c.isprintable() for c in url):
        raise ValueError(f"bad source URL {redacted(url)!r}: blanks or control characters")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ValueError(f"bad source URL {redacted(url)!r}: {exc}") from None
    if parsed.scheme not in DEFAULT_PORTS:
        raise ValueError(
            f"bad source URL {redacted(url)!r}: scheme must be http or https, not {parsed.scheme!r}"
        )
    if parsed.userinfo:
        raise ValueError(
            f"bad source URL {redacted(url)!r}: credentials in the URL would be logged; "
            "pass them as a header instead"
        )
    host = parsed.host
    if not host:
        raise ValueError(f"bad source URL {redacted(url)!r}: no host")
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"bad source URL {url!r}: bad IPv6 address {host!r}") from None
    elif not is_hostname(parsed.raw_host.decode("ascii", "replace")):
        raise ValueError(f"bad source URL {url!r}: bad host name {host!r}")
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        raise ValueError(f"bad source URL {url!r}: port {parsed.port} is not in 1-65535")
    return parsed


def origin_of(url: httpx.URL) -> tuple[str, str, int]:
    """(scheme, host, port) of ``url``: where secret headers may go."""
    return url.scheme, url.host, url.port or DEFAULT_PORTS.get(url.scheme, 0)


class SecretHeaders:
    """Extra request headers whose values must never be shown (repr included)."""

    __slots__ = ("items",)

    def __init__(self, headers: Mapping[str, str] | None) -> None:
        """Check ``headers`` (names, values, none the source sets itself)."""
        items: list[tuple[str, str]] = []
        for name, value in (headers or {}).items():
            if not isinstance(name, str) or not _TOKEN.fullmatch(name):
                raise ValueError(f"bad header name {name!r}")
            if name.lower() in RESERVED_HEADERS:
                raise ValueError(f"header {name!r} is set by the source itself")
            # The value is never quoted back: it may be the very secret. (h11 would refuse it
            # later, with the value in its message.)
            if (
                not isinstance(value, str)
                or not all(" " <= c <= "~" or c == "\t" for c in value)
                or value != value.strip(" \t")
            ):
                raise ValueError(
                    f"header {name!r}: the value must be printable ASCII without blanks at "
                    "either end"
                )
            items.append((name, value))
        self.items: tuple[tuple[str, str], ...] = tuple(items)

    def scrub(self, text: str) -> str:
        """``text`` without the header values (a server may echo a token back in a body).

        Whole values go, and so do their longer words (the token of ``Bearer <token>``).
        """
        for _, value in self.items:
            for secret in (value, *value.split()):
                if len(secret) >= 8:
                    text = text.replace(secret, "***")
        return text

    def __repr__(self) -> str:
        return f"<{len(self.items)} secret header(s)>"
