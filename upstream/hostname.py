"""The host-name rule shared by every upstream URL (HTTP(S) and rtr://), checked without DNS."""

from __future__ import annotations

import re

__all__ = ["is_hostname"]

# Labels of letters, digits, hyphens and underscores (the last are common in container and
# internal names and resolve fine), 1-63 characters, neither starting nor ending with a hyphen;
# at most 253 characters in all, with an optional trailing dot. Dotted IPv4 addresses match.
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}\.?$){_LABEL}(?:\.{_LABEL})*\.?")


def is_hostname(host: str) -> bool:
    """True when ``host`` is a syntactically valid DNS name (or a dotted IPv4 address)."""
    return host.isascii() and _HOSTNAME.fullmatch(host) is not None
