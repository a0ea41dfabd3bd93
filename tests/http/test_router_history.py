"""The router history behind the dashboard's charts: sampled on a real app, listed in /status."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtr_server.http.router_history import RouterHistory
from tests.http.helpers import http_app_config, running_http_app
from tests.server.helpers import (
    base_export,
    publish_and_wait,
    updated_export,
    wait_until,
    write_export,
)
from tests.server.rtr_client import RtrClient

pytestmark = pytest.mark.anyio


def test_bounds() -> None:
    with pytest.raises(ValueError, match="at least one"):
        RouterHistory(keep=0)
    with pytest.raises(ValueError, match="interval"):
        RouterHistory(interval=0)


async def test_samples_count_routers_by_version_and_their_lag(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    write_export(path, base_export())
    async with running_http_app(http_app_config(path)) as run:
        assert run.app.http is not None
        history = run.app.http.router_history
        history.interval = 0.05
        await wait_until(lambda: len(history) >= 1, what="the first sample")
        assert next(iter(history)).connected == 0
        async with await RtrClient.connect(run.rtr_port) as router:
            await router.reset(1)
            await wait_until(
                lambda: (last := list(history)[-1]).by_version["1"] == 1 and last.max_lag == 0,
                what="a sample with the v1 router in sync",
            )
            await publish_and_wait(run.app, path, updated_export())  # the router does not ask
            await wait_until(
                lambda: list(history)[-1].max_lag == 1 and list(history)[-1].lagging == 1,
                what="a sample with the router one serial behind",
            )
            doc = (await run.get("/status")).json()["router_history"]
        last = doc[-1]
        assert last["connected"] == 1
        assert last["by_version"] == {"0": 0, "1": 1, "2": 0, "none": 0}
        assert (last["max_lag"], last["lagging"]) == (1, 1)
        assert last["time"].endswith("Z")
        assert doc[0]["connected"] == 0
        assert doc[0]["max_lag"] is None
