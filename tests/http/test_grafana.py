"""contrib/grafana/rtr-serve.json: every metric it queries exists in a real /metrics output."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from persistence.location import StateLocation
from tests.http.helpers import http_app_config, http_settings, running_http_app
from tests.server.helpers import base_export, wait_until, write_export
from tests.server.rtr_client import TIMEOUT, RtrClient
from tests.upstream.rtr_source_helpers import free_port

pytestmark = pytest.mark.anyio

DASHBOARD = Path(__file__).resolve().parents[2] / "contrib" / "grafana" / "rtr-serve.json"
#: Our metric names (labels and PromQL words never start like this).
METRIC = re.compile(r"\b(?:rpki|rtr)_[a-z0-9_]+\b")
#: The areas the issue asks the dashboard to cover, as metric families it must query.
REQUIRED = {
    "rpki_vrps",  # data counts
    "rpki_aspas",
    "rpki_router_keys",
    "rtr_publishes_total",  # publishes
    "rpki_source_state",  # source states and errors
    "rpki_source_errors_total",
    "rtr_clients",  # routers by version
    "rtr_sent_bytes_total",  # bytes
    "rtr_errors_sent_total",  # errors sent
    "rtr_persistence_commits_total",  # persistence
    "rtr_persistence_failures_total",
}


def _expressions(node: Any) -> list[str]:
    """Every PromQL text in the dashboard: panel targets and template queries."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition", "query") and isinstance(value, str):
                found.append(value)
            else:
                found.extend(_expressions(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(_expressions(item))
    return found


def queried_metrics() -> set[str]:
    """The metric names the dashboard queries."""
    doc = json.loads(DASHBOARD.read_text())
    return {name for expr in _expressions(doc) for name in METRIC.findall(expr)}


def test_dashboard_is_importable_json() -> None:
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] == "rtr-serve"
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for panel in doc["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}"
        assert panel["targets"], panel["title"]
    assert queried_metrics() >= REQUIRED


async def test_every_queried_metric_is_exported(tmp_path: Path) -> None:
    source = tmp_path / "export.json"
    write_export(source, base_export())
    # An RTR source nobody listens on: its connection gauge and connect errors have series.
    refused = f"rtr://127.0.0.1:{free_port()}"
    config = dataclasses.replace(
        http_app_config(source, http=http_settings(router_lag=True)),
        sources=(source, refused),
        state=StateLocation("sqlite", tmp_path / "state.db"),
    )
    async with running_http_app(config) as running:
        persister = running.app.persister
        assert persister is not None
        with anyio.fail_after(TIMEOUT):
            await persister.flush()
        # A PDU of an unknown type: an Error Report sent and a disconnect counted.
        stream = await anyio.connect_tcp("127.0.0.1", running.rtr_port)
        async with stream:
            await stream.send(bytes([2, 99, 0, 0, 0, 0, 0, 8]))
            with anyio.fail_after(TIMEOUT):
                assert await stream.receive()
        async with await RtrClient.connect(running.rtr_port) as router:
            await router.reset(2)  # a router on v2: rtr_clients and the lag gauge have series
            await wait_until(
                lambda: bool(running.app.sources[1].status.errors), what="a refused connect"
            )
            metrics = await running.metrics()
    exported = set(metrics.samples) | set(metrics.families)
    missing = {
        name
        for name in queried_metrics()
        if name not in exported and name.removesuffix("_total") not in metrics.families
    }
    assert not missing, f"the dashboard queries metrics rtr-serve does not export: {missing}"
    assert "rtr_router_serial_lag" in metrics.samples
