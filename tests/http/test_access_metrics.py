"""/metrics and /status count connections refused by the allowed networks and show the limits."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import anyio
import pytest

from rtr_server.settings import ListenAddress
from tests.http.helpers import http_app_config, running_http_app
from tests.server.helpers import base_export, write_export
from tests.server.rtr_client import TIMEOUT, RtrClient, reset_query
from tests.server.test_access import nets

pytestmark = pytest.mark.anyio


async def test_denied_connections_and_limits_are_exported(tmp_path: Path) -> None:
    source = tmp_path / "export.json"
    write_export(source, base_export())
    config = http_app_config(source, max_connections=7, max_per_ip=3)
    listen = (ListenAddress("127.0.0.1", 0, allow=nets("127.0.0.2/32")),)
    config = dataclasses.replace(config, server=dataclasses.replace(config.server, listen=listen))
    async with running_http_app(config) as running:
        _, host, port = running.app.server.bound[0]
        with anyio.fail_after(TIMEOUT):
            stream = await anyio.connect_tcp("127.0.0.1", port, local_host="127.0.0.1")
        async with RtrClient(stream) as denied:
            await denied.send(reset_query(2))
            await denied.expect_closed()
        metrics = await running.metrics()
        assert metrics.get("rtr_rejected_connections_total", reason="not_allowed") == 1
        assert metrics.get("rtr_rejected_connections_total", reason="max_per_ip") == 0
        assert metrics.get("rtr_not_allowed_connections_total", listener=f"{host}:{port}") == 1
        assert metrics.get("rtr_limit", name="max_connections") == 7
        assert metrics.get("rtr_limit", name="max_per_ip") == 3
        sessions = (await running.get("/status")).json()["sessions"]
        assert sessions["rejected"]["not_allowed"] == 1
        assert sessions["limits"]["max_per_ip"] == 3
