"""Run an `App` with its HTTP listener on 127.0.0.1 port 0, talk to it with httpx, read metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
from prometheus_client.parser import text_string_to_metric_families

from rtr_server.app import App
from rtr_server.app_config import AppConfig, make_clock
from rtr_server.http.settings import HttpSettings
from rtr_server.settings import ListenAddress
from tests.server.helpers import settings, wait_until
from tests.server.rtr_client import TIMEOUT
from upstream.clock import Clock

LOOPBACK = ListenAddress("127.0.0.1", 0)


def http_settings(**overrides: Any) -> HttpSettings:
    """HTTP settings for tests: 127.0.0.1 port 0."""
    return HttpSettings(LOOPBACK, **overrides)


def http_app_config(
    *paths: Path,
    reference_time: float | None = None,
    http: HttpSettings | None = None,
    **server: Any,
) -> AppConfig:
    """An `AppConfig` polling ``paths`` every 50 ms, with the HTTP listener on."""
    return AppConfig(
        sources=paths,
        server=settings(**server),
        poll_interval=0.05,
        reference_time=reference_time,
        http=http or http_settings(),
    )


@dataclass(slots=True)
class Running:
    """A running app, its HTTP base URL and an httpx client bound to it."""

    app: App
    client: httpx.AsyncClient
    base: str

    @property
    def rtr_port(self) -> int:
        """The RTR listener's port."""
        return self.app.server.addresses[0][1]

    async def get(self, path: str, **kwargs: Any) -> httpx.Response:
        """GET ``path``, bounded by the test timeout."""
        with anyio.fail_after(TIMEOUT):
            return await self.client.get(path, **kwargs)

    async def metrics(self) -> Metrics:
        """Scrape /metrics."""
        response = await self.get("/metrics")
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/plain")
        return Metrics(response.text)


@asynccontextmanager
async def running_http_app(
    config: AppConfig, *, clock: Clock | None = None, wait_for_data: bool = True
) -> AsyncIterator[Running]:
    """Run the app (RTR and HTTP on loopback); by default wait for its first serial."""
    async with anyio.create_task_group() as tg:
        app = App(config, clock or make_clock(config.reference_time))
        with anyio.fail_after(TIMEOUT):
            await tg.start(app.run)
        assert app.http is not None
        host, port = app.http.addresses[0]
        assert host == "127.0.0.1"
        base = f"http://127.0.0.1:{port}"
        if wait_for_data:
            await wait_until(lambda: app.state is not None, what="the first publish")
        try:
            async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as client:
                yield Running(app, client, base)
        finally:
            tg.cancel_scope.cancel()


class Metrics:
    """A parsed Prometheus text exposition."""

    def __init__(self, text: str) -> None:
        """Parse ``text``."""
        self.text = text
        self.samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        self.families: dict[str, str] = {}
        for family in text_string_to_metric_families(text):
            self.families[family.name] = family.type
            for sample in family.samples:
                self.samples.setdefault(sample.name, []).append((sample.labels, sample.value))

    def value(self, metric: str, /, **labels: str) -> float | None:
        """The value of the one sample ``metric`` whose labels include ``labels``; None if none."""
        found = [v for ls, v in self.samples.get(metric, []) if labels.items() <= ls.items()]
        assert len(found) <= 1, f"{metric}{labels} matches {len(found)} samples"
        return found[0] if found else None

    def get(self, metric: str, /, **labels: str) -> float:
        """Like `value`, but the sample must exist."""
        value = self.value(metric, **labels)
        assert value is not None, f"no sample {metric}{labels} in:\n{self.text}"
        return value
