"""/healthz on a running app with a wall clock the test moves: each reason for a 503, and back."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clock import FakeClock
from tests.http.helpers import http_app_config, http_settings, running_http_app
from tests.server.helpers import export, publish_and_wait, roa, wait_until, write_export

pytestmark = pytest.mark.anyio

#: The fake wall clock's start (2027-01-15); entries below expire relative to it.
T0 = 1_800_000_000.0


async def test_healthz_flips_to_503_when_data_expires(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    expires = int(T0) + 100
    write_export(path, export([roa("192.0.2.0/24", 24, 64496, expires)]))
    clock = FakeClock(wall=T0, monotonic="real")
    async with running_http_app(http_app_config(path), clock=clock) as run:
        ok = await run.get("/healthz")
        assert ok.status_code == 200, ok.text
        assert ok.json()["reason"] == "ok"
        assert (await run.metrics()).get("rtr_healthy", reason="ok") == 1

        # Past the entry's expiry: the served set holds an expired entry until the rebuild.
        clock.set_wall(T0 + 200)
        expired = await run.get("/healthz")
        assert expired.status_code == 503
        assert expired.json()["reason"] == "expired"
        assert expired.json()["healthy"] is False
        assert (await run.metrics()).get("rtr_healthy", reason="expired") == 0
        assert (await run.metrics()).get("rpki_next_expiry_seconds") == -100

        # A new export whose entries are expired as well: the rebuild publishes the empty set.
        serial = await publish_and_wait(
            run.app, path, export([roa("198.51.100.0/24", 24, 64497, expires)])
        )
        assert run.app.state is not None
        assert run.app.state.snapshot.is_empty()
        empty = await run.get("/healthz")
        assert empty.status_code == 503
        assert empty.json()["reason"] == "empty"
        assert f"serial {serial}" in empty.json()["detail"]

        # Fresh data again: healthy.
        await publish_and_wait(
            run.app, path, export([roa("198.51.100.0/24", 24, 64497, int(T0) + 10_000)])
        )
        assert (await run.get("/healthz")).status_code == 200


async def test_no_data_yet(tmp_path: Path) -> None:
    config = http_app_config(tmp_path / "later.json")
    async with running_http_app(config, wait_for_data=False) as run:
        await wait_until(
            lambda: all(s.status.attempted for s in run.app.sources), what="the first attempt"
        )
        response = await run.get("/healthz")
        assert response.status_code == 503
        assert response.json()["reason"] == "no_data"
        for path in ("/json", "/api/v1/validity/AS1/192.0.2.0/24", "/api/v1/aspa?path=AS1"):
            assert (await run.get(path)).status_code == 503, path
        status = (await run.get("/status")).json()
        assert status["snapshot"] is None
        assert status["sources"][0]["state"] == "waiting"
        m = await run.metrics()
        assert m.get("rtr_healthy", reason="no_data") == 0
        assert m.value("rtr_serial") is None


async def test_all_sources_failing_beyond_the_staleness_bound(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    write_export(path, export([roa("192.0.2.0/24", 24, 64496, int(T0) + 100_000)]))
    clock = FakeClock(wall=T0, monotonic="real")
    config = http_app_config(path, http=http_settings(stale_after=600))
    async with running_http_app(config, clock=clock) as run:
        source = run.app.sources[0]
        write_export(path, "{ not json")
        await wait_until(lambda: source.status.state.value == "error", what="the bad update")
        # Failing, but the last good load is recent: still healthy (the old data serves).
        clock.set_wall(T0 + 500)
        assert (await run.get("/healthz")).status_code == 200
        clock.set_wall(T0 + 700)
        failing = await run.get("/healthz")
        assert failing.status_code == 503
        body = failing.json()
        assert body["reason"] == "sources_failing"
        assert "700 s ago" in body["detail"]
        assert "bound 600 s" in body["detail"]
        # The source recovers: healthy again.
        write_export(path, export([roa("192.0.2.0/24", 24, 64496, int(T0) + 100_000)]))
        await wait_until(lambda: source.status.state.value == "ok", what="the recovery")
        assert (await run.get("/healthz")).status_code == 200
