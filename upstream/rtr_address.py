"""``rtr://HOST[:PORT]`` source locations: checked without any I/O (no DNS)."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from upstream.hostname import is_hostname

__all__ = ["DEFAULT_PORT", "parse_rtr_url"]

#: IANA port of rpki-rtr over plain TCP (bis §9), used when the URL names none.
DEFAULT_PORT = 323


def parse_rtr_url(url: str) -> tuple[str, int]:
    """``rtr://HOST[:PORT]`` → ``(host, port)``; port 323 when absent. No I/O (no DNS).

    HOST is a DNS name, an IPv4 address or a bracketed IPv6 address.

    Raises:
        ValueError: for another scheme, a missing or malformed host, a port outside 1..65535,
            or a user, path, query or fragment part.
    """
    parts = urlsplit(url)
    if parts.scheme != "rtr":
        raise ValueError(f"{url!r} is not an rtr:// URL")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"{url!r}: rtr:// URLs take no user or password")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"{url!r}: rtr:// URLs are rtr://HOST[:PORT], without path or query")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{url!r}: the port must be a number in 1..65535") from None
    if port is None:
        if parts.netloc.endswith(":"):
            raise ValueError(f"{url!r}: empty port")
        port = DEFAULT_PORT
    if not 1 <= port <= 65535:
        raise ValueError(f"{url!r}: the port must be in 1..65535")
    host = parts.hostname or ""
    bracketed = parts.netloc.startswith("[")
    if bracketed or ":" in host:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"{url!r}: {host!r} is not an IPv6 address") from None
        if not bracketed or address.version != 6:
            raise ValueError(f"{url!r}: write IPv6 addresses as rtr://[ADDR]:PORT")
        return address.compressed, port
    if not host.isascii():
        try:  # an internationalised name: its ASCII form, as httpx does for HTTP(S) URLs
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise ValueError(f"{url!r}: {host!r} is not a host name or address") from None
    if not is_hostname(host):
        raise ValueError(f"{url!r}: {host!r} is not a host name or address")
    return host, port
