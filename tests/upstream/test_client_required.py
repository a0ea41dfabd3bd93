"""`ClientConfig.required`: the default readiness of a `Client` (`wait_ready`, `ClientStatus.ready`)
without any effect on the data; an explicit `wait_ready(required=…)` constrains only that wait
(lifecycle contract L-61). The source is an RTR cache spoken to at version 1 (no ASPA), so the
ASPA kind never gets an active group."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from snapshot.kinds import PayloadKind
from tests.server.helpers import app_config, base_export, write_export
from tests.upstream.rtr_source_helpers import running_core
from upstream import Client, ClientConfig, SourceConfig

pytestmark = pytest.mark.anyio

BOTH = frozenset({PayloadKind.VRP, PayloadKind.ASPA})


def v1_client(port: int, **kw: object) -> Client:
    source = SourceConfig("core", f"rtr://127.0.0.1:{port}", max_version=1)
    return Client(ClientConfig((source,), poll_interval=0.05, **kw))  # type: ignore[arg-type]


async def test_required_sets_the_default_readiness_only(tmp_path: Path) -> None:
    path = tmp_path / "core.json"
    write_export(path, base_export())
    async with running_core(app_config(path)) as core:
        client = v1_client(core.port, required=BOTH)
        async with client, anyio.create_task_group() as tg:
            await tg.start(client.run)
            with anyio.fail_after(10):
                vrp_ready = await client.wait_ready(required={PayloadKind.VRP})
            assert vrp_ready.active[PayloadKind.VRP] is not None
            assert vrp_ready.active[PayloadKind.ASPA] is None
            assert vrp_ready.snapshot.vrp_count > 0  # the data is served all the same
            status = client.get_status()
            assert not status.ready
            with anyio.move_on_after(0.5) as waited:
                await client.wait_ready()  # the configured default: VRP and ASPA
            assert waited.cancelled_caught
            with pytest.raises(ValueError, match="at least one"):
                await client.wait_ready(required=())
            await client.aclose()

        default = v1_client(core.port)
        async with default, anyio.create_task_group() as tg:
            await tg.start(default.run)
            with anyio.fail_after(10):
                await default.wait_ready()
            assert default.get_status().ready
            await default.aclose()


def test_required_must_name_a_kind() -> None:
    with pytest.raises(ValueError, match="required"):
        ClientConfig((SourceConfig("a", "/tmp/a.json"),), required=frozenset())
