"""The dashboard in headless Chromium: it renders, shows the live serial, routers and publishes.

Chromium comes from the Debian package ``chromium`` (``.ci/chromium-setup.sh``, run by ``make
test-deps``). The screenshot goes to ``build/dashboard.png`` (ignored by git).
"""

from __future__ import annotations

import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import anyio
import pytest

from rtr_server.http.dashboard import dashboard_html
from tests.http.helpers import Running, http_app_config, running_http_app
from tests.server.helpers import (
    base_export,
    publish_and_wait,
    updated_export,
    wait_until,
    write_export,
)
from tests.server.rtr_client import RtrClient

pytestmark = pytest.mark.anyio

CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (Debian package; `make test-deps` runs "
    ".ci/chromium-setup.sh, which installs it)",
)
BUILD = Path(__file__).resolve().parents[2] / "build"
SCREENSHOT = BUILD / "dashboard.png"
#: Virtual time Chromium gives the page's scripts (the first /status fetch is immediate).
BUDGET_MS = 3000


async def chromium(*args: str) -> str:
    """Run headless Chromium with ``args``; returns its stdout."""
    assert CHROMIUM is not None
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        f"--virtual-time-budget={BUDGET_MS}",
        *args,
    ]
    with anyio.fail_after(45):
        result = await anyio.run_process(command, check=False)
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]
    return result.stdout.decode()


class _Texts(HTMLParser):
    """Text content by element id, and attributes of <body>."""

    def __init__(self) -> None:
        super().__init__()
        self.by_id: dict[str, str] = {}
        self.body: dict[str, str | None] = {}
        self._open: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "body":
            self.body = values
        if tag in ("meta", "link", "br", "img", "input"):
            return
        element_id = values.get("id")
        self._open.append(element_id)
        if element_id:
            self.by_id.setdefault(element_id, "")

    def handle_endtag(self, tag: str) -> None:
        if tag not in ("meta", "link", "br", "img", "input") and self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        for element_id in self._open:
            if element_id:
                self.by_id[element_id] += data


def parse_dom(html: str) -> _Texts:
    parser = _Texts()
    parser.feed(html)
    return parser


def test_page_is_self_contained() -> None:
    html = dashboard_html().decode()
    assert "<script src" not in html
    assert '<link rel="stylesheet"' not in html
    assert not re.search(r"(?:src|href)=\"(?!data:)", html), "the page loads nothing external"
    assert not re.search(r"https?://", html)
    assert "innerHTML" not in html


async def test_dashboard_headers(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    write_export(path, base_export())
    async with running_http_app(http_app_config(path)) as run:
        response = await run.get("/")
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/html; charset=utf-8"
        assert "default-src 'none'" in response.headers["content-security-policy"]
        assert response.content == dashboard_html()


async def live_dashboard(run: Running) -> _Texts:
    html = await chromium("--dump-dom", run.base + "/")
    return parse_dom(html)


@needs_chromium
async def test_dashboard_in_chromium(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    write_export(path, base_export())
    async with running_http_app(http_app_config(path)) as run:
        assert run.app.http is not None
        history = run.app.http.router_history
        history.interval = 0.05
        serial = await publish_and_wait(run.app, path, updated_export())
        async with await RtrClient.connect(run.rtr_port) as router:
            await router.reset(2)
            await wait_until(
                lambda: all(c.session.last_serial for c in run.app.server.connections),
                what="the router's reply",
            )
            seen = len(history)
            await wait_until(lambda: len(history) >= seen + 3, what="router samples")
            html = await chromium("--dump-dom", run.base + "/")
            dom = parse_dom(html)
            assert dom.body.get("data-loaded") == "true", "the page's script did not run"
            assert dom.by_id["serial"].strip() == str(serial)
            assert dom.body.get("data-serial") == str(serial)
            assert dom.by_id["health"].strip() == "healthy"
            assert "VRP IPv4" in dom.by_id["counts"]
            assert "default" in dom.by_id["groups"]
            assert str(path) in dom.by_id["sources"]
            assert "ok" in dom.by_id["sources"]
            routers = dom.by_id["routers"]
            assert "127.0.0.1:" in routers, routers
            publishes = dom.by_id["publishes"]
            assert "first state" in publishes
            assert "VRP +3/−3" in publishes  # updated_export: 3 VRPs in, 3 out
            assert dom.by_id["fetch-error"] == ""
            # The History charts: inline SVG drawn from /status.
            assert dom.by_id["history-serials"] == "2"
            records = dom.by_id["chart-records"]
            assert "serial 0" in records
            assert f"serial {serial}" in records
            assert "VRP IPv4" in dom.by_id["legend-records"]
            assert "no data yet" not in dom.by_id["chart-deltas"]
            assert "no data yet" not in dom.by_id["chart-routers"]
            assert "v2" in dom.by_id["legend-routers"]
            charts = {m: html.count(f'<svg id="chart-{m}"') for m in ("records", "deltas")}
            assert charts == {"records": 1, "deltas": 1}
            assert html.count("<polyline") >= 4 + 2  # records per kind, routers all + v2
            assert html.count("<rect") >= 2  # the second serial's delta: announced, withdrawn

            BUILD.mkdir(exist_ok=True)
            await anyio.Path(SCREENSHOT).unlink(missing_ok=True)
            await chromium(f"--screenshot={SCREENSHOT}", "--window-size=1280,1100", run.base + "/")
            png = await anyio.Path(SCREENSHOT).read_bytes()
            assert png.startswith(b"\x89PNG\r\n\x1a\n")
            assert len(png) > 10_000
