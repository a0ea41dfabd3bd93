"""What an HTTP source makes of a reply that is not a body: a redirect's target, a failing status.

`redirect_target` follows a redirect only to an http(s) URL with a host, never from https to
plain http; `status_failure` classes an unexpected status (``environment`` for ``5xx``, ``408``
and ``429``, with the ``Retry-After`` it asks for; ``http`` for any other). No I/O.
"""

from __future__ import annotations

import email.utils
import logging
from typing import Final

import httpx

from upstream.http_body import PollError
from upstream.http_rules import DEFAULT_PORTS

__all__ = [
    "MAX_REDIRECTS",
    "REDIRECT_STATUSES",
    "RETRY_STATUSES",
    "redirect_target",
    "retry_after",
    "status_failure",
]

log = logging.getLogger("upstream.http_source")

#: Redirect hops followed before the poll fails (class ``http``).
MAX_REDIRECTS: Final = 5
#: Statuses that are the environment's fault, retried with backoff besides 5xx.
RETRY_STATUSES: Final = frozenset({408, 429})
REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})


def redirect_target(url: httpx.URL, response: httpx.Response, name: str) -> httpx.URL:
    """Where the redirect ``response`` to a request for ``url`` leads (source ``name``).

    Raises:
        PollError: class ``http`` for a missing, invalid or unsupported Location, and for a
            redirect from https to plain http.
    """
    code = response.status_code
    location = response.headers.get("location")
    if not location:
        raise PollError("http", f"HTTP {code} without a Location")
    try:
        target = url.join(location)
    except httpx.InvalidURL:
        raise PollError("http", f"HTTP {code} to an invalid Location") from None
    if target.scheme not in DEFAULT_PORTS or not target.host:
        raise PollError("http", f"HTTP {code} to an unsupported {target.scheme!r} URL")
    if url.scheme == "https" and target.scheme == "http":
        raise PollError("http", f"HTTP {code} from https to plain http refused")
    log.debug("source %s: HTTP %d redirect to %s", name, code, target.host)
    return target


def status_failure(response: httpx.Response, wall: float) -> PollError:
    """The failure of an unexpected status, at UTC time ``wall`` (for a dated Retry-After)."""
    code = response.status_code
    message = f"HTTP {code} {response.reason_phrase[:80]}".rstrip()
    if code >= 500 or code in RETRY_STATUSES:
        return PollError("environment", message, retry_after(response, wall))
    return PollError("http", message)


def retry_after(response: httpx.Response, wall: float) -> float | None:
    """The seconds ``Retry-After`` asks for (delay or date), None without a valid one."""
    value = response.headers.get("retry-after", "").strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - wall)
