"""/status and /metrics of an app that persists its state to a real SQLite file."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import anyio
import pytest

from persistence.location import StateLocation
from tests.http.helpers import http_app_config, running_http_app
from tests.server.helpers import base_export, updated_export, wait_until, write_export
from tests.server.rtr_client import TIMEOUT

pytestmark = pytest.mark.anyio


async def test_status_and_metrics_show_the_last_persisted_state(tmp_path: Path) -> None:
    source = tmp_path / "export.json"
    write_export(source, base_export())
    state = StateLocation("sqlite", tmp_path / "state.db")
    config = dataclasses.replace(http_app_config(source), state=state)
    async with running_http_app(config) as running:
        persister = running.app.persister
        assert persister is not None
        with anyio.fail_after(TIMEOUT):
            first = await persister.flush()
        document = (await running.get("/status")).json()["persistence"]
        assert document["backend"] == "sqlite"
        assert document["path"] == str(state.path)
        assert document["last_persisted_id"] == str(first.snapshot_id) == "1.1"
        assert document["failures"] == 0
        write_export(source, updated_export())
        await wait_until(lambda: persister.status.commits >= 2, what="the second commit")
        metrics = await running.metrics()
        assert metrics.get("rtr_persistence_commits_total") == persister.status.commits
        assert metrics.get("rtr_persistence_failures_total") == 0
        info = metrics.samples["rtr_persistence_info"][0][0]
        assert info["last_persisted_id"] == persister.status.last_persisted_id


async def test_a_duckdb_state_is_read_through_the_service(tmp_path: Path) -> None:
    """P-81: DuckDB has one owner and no second reader; others read its data through the
    service. The owner recovers the file with its source gone and serves it on /json."""
    source = tmp_path / "export.json"
    write_export(source, base_export())
    state = StateLocation("duckdb", tmp_path / "state.duckdb")
    config = dataclasses.replace(http_app_config(source), state=state)
    async with running_http_app(config) as running:
        persister = running.app.persister
        assert persister is not None
        with anyio.fail_after(TIMEOUT):
            await persister.flush()
        served = (await running.get("/json")).json()["roas"]
    source.unlink()  # only the DuckDB file holds the data now
    async with running_http_app(config) as running:
        recovery = running.app.recovery
        assert recovery is not None
        assert recovery.snapshot is not None
        document = (await running.get("/json")).json()
        assert document["roas"] == served
        assert len(served) == recovery.snapshot.vrp_count > 0
        assert (await running.get("/status")).json()["persistence"]["backend"] == "duckdb"
