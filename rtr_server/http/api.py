"""`HttpApi`: the routes of the HTTP listener over a running `App`.

=====================================  =====================================================
``GET /``                              the dashboard (HTML, self-contained)
``GET /status``                        JSON: health, snapshot, groups, sources, sessions,
                                       recent publishes, router history, persistence
``GET /healthz``                       200 while fresh data is served, else 503; JSON with
                                       the reason (`rtr_server.http.observe.health`)
``GET /metrics``                       Prometheus text exposition
``GET /json``                          the served set as rpki-client JSON; ETag
                                       ``"<session>-<serial>"``, If-None-Match → 304, gzip
``GET /api/v1/validity/AS{asn}/{p}``   RFC 6811 origin validation of prefix ``p``
``GET /api/v1/validity?asn=&prefix=``  the same with query parameters
``GET /api/v1/aspa?path=...``          ASPA AS_PATH verification (``direction``, ``neighbor``)
=====================================  =====================================================

HEAD is answered like GET without the body. Queries run on the served snapshot; work that can
take long on a large table (the /json encoding, the first validity query building its index)
runs in worker threads, at most `WORKER_THREADS` at once.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskStatus
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from rtr_server.http import observe
from rtr_server.http.dashboard import DASHBOARD_CSP, dashboard_html
from rtr_server.http.export import ExportCache, gzip_etag, iso_time
from rtr_server.http.metrics import Families, FunctionCollector, NonEmpty, register_collectors
from rtr_server.http.queries import aspa_document, aspa_parameters, parse_asn, validity_document
from rtr_server.http.router_history import RouterHistory, sample_routers
from rtr_server.http.server import HttpServer
from rtr_server.http.settings import HttpSettings
from rtr_server.http.status import status_document
from rtr_server.http.view import AppView
from rtr_server.http.wire import Request, Response
from snapshot.queries import validate_origin

if TYPE_CHECKING:
    from snapshot.publisher import PublishedState

log = logging.getLogger(__name__)

#: Worker threads the HTTP side may use at once (export encoding, index builds).
WORKER_THREADS = 2
JSON_TYPE = "application/json"
NO_STORE = ("Cache-Control", "no-store")

VALIDITY_PREFIX = "/api/v1/validity/"

Route = Callable[[Request], Awaitable[Response]]


def json_response(status: int, document: object) -> Response:
    """``document`` as indented JSON, not to be cached."""
    body = json.dumps(document, indent=2).encode() + b"\n"
    return Response(status, body, JSON_TYPE, (NO_STORE,))


def error_document(status: int, message: str) -> Response:
    """A JSON error response."""
    return json_response(status, {"error": message})


def _accepts_gzip(header: str | None) -> bool:
    for part in (header or "").split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() not in ("gzip", "x-gzip"):
            continue
        q = params.strip().lower().removeprefix("q=")
        try:
            return not params.strip() or float(q) > 0
        except ValueError:
            return False
    return False


def _etag_matches(header: str | None, etag: str) -> bool:
    """Weak comparison of If-None-Match against ``etag`` (RFC 9110 §13.1.2)."""
    if header is None:
        return False
    bare = etag.removeprefix("W/")
    return any(t.strip().removeprefix("W/") in ("*", bare) for t in header.split(","))


class HttpApi:
    """Routes requests to the app's views; owns the `HttpServer`."""

    def __init__(self, app: AppView, settings: HttpSettings, registry: CollectorRegistry) -> None:
        """Register the metric collectors on ``registry``; nothing is bound until `serve`."""
        self.app = app
        self.settings = settings
        self.registry = registry
        self.limiter = anyio.CapacityLimiter(WORKER_THREADS)
        self.exports = ExportCache(self.limiter)
        self.requests: Counter[tuple[str, int]] = Counter()
        self.server = HttpServer(settings, self.handle)
        #: Samples of the connected routers for the dashboard's charts.
        self.router_history = RouterHistory()
        self._routes: dict[str, Route] = {
            "/": self.dashboard,
            "/status": self.status,
            "/healthz": self.healthz,
            "/metrics": self.metrics,
            "/json": self.export,
            "/api/v1/validity": self.validity,
            "/api/v1/aspa": self.aspa,
        }
        register_collectors(
            registry, app, router_lag=settings.router_lag, stale_after=settings.stale_after
        )
        registry.register(NonEmpty(FunctionCollector(self._http_families)))

    async def serve(
        self, *, task_status: TaskStatus[list[tuple[str, int]]] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve (and sample the routers for `router_history`) until cancelled.

        Reports the bound addresses once listening.
        """
        async with anyio.create_task_group() as tg:
            addresses = await tg.start(self.server.serve, name="HTTP listener")
            tg.start_soon(sample_routers, self.app, self.router_history, name="router samples")
            task_status.started(addresses)

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """The bound (host, port) pairs."""
        return self.server.addresses

    async def handle(self, request: Request) -> Response:
        """Answer one request."""
        path = request.path
        route: Route
        if path.startswith(VALIDITY_PREFIX):
            endpoint, route = "/api/v1/validity", self.validity
        elif path in self._routes:
            endpoint, route = path, self._routes[path]
        else:
            endpoint, route = "other", self.not_found
        response = await route(request)
        self.requests[(endpoint, response.status)] += 1
        log.debug("HTTP %s %s -> %d", request.method, request.target, response.status)
        return response

    # ------------------------------------------------------------------ pages

    async def not_found(self, request: Request) -> Response:
        """404 with the list of endpoints."""
        return error_document(
            404, f"no such endpoint: {request.path} (see / for the dashboard, /status, ...)"
        )

    async def dashboard(self, _request: Request) -> Response:
        """The self-refreshing HTML dashboard."""
        headers = (NO_STORE, ("Content-Security-Policy", DASHBOARD_CSP))
        return Response(200, dashboard_html(), "text/html; charset=utf-8", headers)

    async def status(self, _request: Request) -> Response:
        """The /status document."""
        return json_response(
            200, status_document(self.app, self.settings.stale_after, self.router_history)
        )

    async def healthz(self, _request: Request) -> Response:
        """200 while fresh data is served, 503 with the reason otherwise."""
        verdict = observe.health(self.app, self.app.clock.wall(), self.settings.stale_after)
        return json_response(200 if verdict.healthy else 503, asdict(verdict))

    async def metrics(self, _request: Request) -> Response:
        """Prometheus text exposition of the registry."""
        return Response(200, generate_latest(self.registry), CONTENT_TYPE_LATEST, (NO_STORE,))

    async def export(self, request: Request) -> Response:
        """The served set as rpki-client JSON, with ETag and conditional GET."""
        state = self.app.state
        if state is None:
            return error_document(503, "no data yet")
        gzip = _accepts_gzip(request.header("accept-encoding"))
        headers: list[tuple[str, str]] = [
            ("Cache-Control", "no-cache"),
            ("Vary", "Accept-Encoding"),
        ]
        etag = ExportCache.etag(state)
        if _etag_matches(request.header("if-none-match"), etag):
            headers.append(("ETag", gzip_etag(etag) if gzip else etag))
            return Response(304, b"", JSON_TYPE, tuple(headers))
        entry = await self.exports.get(state, buildtime=self._published_wall(state), gzip=gzip)
        headers.append(("ETag", entry.etag))
        if gzip:
            headers.append(("Content-Encoding", "gzip"))
        return Response(200, entry.body, JSON_TYPE, tuple(headers))

    def _published_wall(self, state: PublishedState) -> float:
        last = self.app.publishes.last
        if last is not None and last.serial == state.serial.value:
            return last.wall
        return self.app.clock.wall()

    # ------------------------------------------------------------------ queries

    async def validity(self, request: Request) -> Response:
        """RFC 6811 origin validation against the served VRPs."""
        if request.path.startswith(VALIDITY_PREFIX):
            asn_text, _, prefix = request.path[len(VALIDITY_PREFIX) :].partition("/")
        else:
            asn_text = request.query.get("asn", "")
            prefix = request.query.get("prefix", "")
        state = self.app.state
        if state is None:
            return error_document(503, "no data yet")
        if not prefix:
            return error_document(
                400, "prefix: missing (e.g. /api/v1/validity/AS64496/192.0.2.0/24)"
            )
        try:
            asn = parse_asn(asn_text)
            result = await anyio.to_thread.run_sync(
                validate_origin, state.snapshot, prefix, asn, limiter=self.limiter
            )
        except ValueError as exc:
            return error_document(400, str(exc))
        return json_response(
            200,
            {
                "validated_route": validity_document(result),
                "serial": state.serial.value,
                "generatedTime": iso_time(self.app.clock.wall()),
            },
        )

    async def aspa(self, request: Request) -> Response:
        """ASPA AS_PATH verification against the served ASPAs."""
        state = self.app.state
        if state is None:
            return error_document(503, "no data yet")
        try:
            path, direction, neighbor_as = aspa_parameters(request.query)
        except ValueError as exc:
            return error_document(400, str(exc))
        document = aspa_document(state.snapshot, path, direction, neighbor_as)
        document["serial"] = state.serial.value
        return json_response(200, document)

    # ------------------------------------------------------------------ own metrics

    def _http_families(self) -> Families:
        requests = CounterMetricFamily(
            "rtr_http_requests_total",
            "HTTP requests by endpoint and status",
            labels=["endpoint", "code"],
        )
        for (endpoint, status), count in sorted(self.requests.items()):
            requests.add_metric([endpoint, str(status)], count)
        for status, count in sorted(self.server.stats.refused.items()):
            requests.add_metric(["invalid", str(status)], count)
        connections = CounterMetricFamily("rtr_http_connections_total", "HTTP connections served")
        connections.add_metric([], self.server.stats.connections)
        rejected = CounterMetricFamily(
            "rtr_http_rejected_connections_total", "HTTP connections refused (limit reached)"
        )
        rejected.add_metric([], self.server.stats.rejected_connections)
        export_bytes = GaugeMetricFamily(
            "rtr_json_export_bytes", "Size of the cached /json export", labels=["encoding"]
        )
        export_seconds = GaugeMetricFamily(
            "rtr_json_export_seconds", "Time to encode the cached /json export", labels=["encoding"]
        )
        for encoding, entry in sorted(self.exports.cached.items()):
            export_bytes.add_metric([encoding], len(entry.body))
            export_seconds.add_metric([encoding], entry.seconds)
        return (requests, connections, rejected, export_bytes, export_seconds)
