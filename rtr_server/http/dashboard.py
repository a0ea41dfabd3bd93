"""The dashboard page (``dashboard.html`` beside this module): inline CSS and JS, no external asset.

The page fetches ``status`` (relative, so it also works behind a path prefix) every 5 seconds
(``/?refresh=N`` changes that) and renders it with DOM calls only (``textContent``, never
``innerHTML``), so source names and error texts cannot inject markup. The Content-Security-Policy
sent with it forbids every external load. The History charts are inline SVG drawn by the
page's script from ``/status`` (``publishes``: records per kind and delta sizes over the last
serials; ``router_history``: connected routers by version and their serial lag).
"""

from __future__ import annotations

import functools
from importlib import resources

#: Only the page's own inline script and style may run; it may fetch from its own origin.
DASHBOARD_CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)


@functools.cache
def dashboard_html() -> bytes:
    """The page's bytes (read once)."""
    return resources.files("rtr_server.http").joinpath("dashboard.html").read_bytes()
