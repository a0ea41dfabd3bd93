"""Failover end to end with real sources: an RTR cache (an rtr-serve core) and an HTTP server.

Group "primary" follows rtr://core, group "backup" polls an HTTP export. Start-up timeout and
fail-back delay are short real times; the cache's Retry interval is passed by moving both
clocks. Each switch is timed, and `SWITCH_TIMES` collects them (printed with ``pytest -s``).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from rtr_server.app_config import AppConfig
from rtr_server.settings import ListenAddress
from snapshot.snapshot import Snapshot
from tests.clock import FakeClock
from tests.server.helpers import TIMERS, settings
from tests.upstream.helpers import A, B, export, wait_for
from tests.upstream.http_server import Reply, ScriptedServer
from tests.upstream.rtr_source_helpers import free_port, quick, running_core
from upstream.client import Client
from upstream.config import ClientConfig, GroupConfig, SourceConfig
from upstream.rtr_source import RtrSource
from upstream.selection import PayloadKind

pytestmark = pytest.mark.anyio

STARTUP = 0.5
FAILBACK = 1.0
SWITCH_TIMES: dict[str, float] = {}


def vrps(snapshot: Snapshot | None) -> set[tuple[str, int, int]]:
    if snapshot is None:
        return set()
    return {(str(v.prefix), v.max_length, v.asn) for v in snapshot.vrps()}


async def until(client: Client, check: Callable[[], bool], within: float = 15.0) -> float:
    """Seconds until ``check()`` holds (polled on every client change)."""
    started = time.monotonic()
    await wait_for(check, within)
    return time.monotonic() - started


@asynccontextmanager
async def web_export(vrp_list: list[tuple[str, int, int]]) -> AsyncIterator[ScriptedServer]:
    server = ScriptedServer()
    server.script(Reply(200, export(vrp_list), {"Content-Type": "application/json"}))
    try:
        yield server
    finally:
        server.close()


def serving(client: Client, group: str, expected: list[tuple[str, int, int]]) -> bool:
    snap = client.get_snapshot()
    return (
        snap is not None
        and snap.active[PayloadKind.VRP] == group
        and vrps(snap.snapshot) == set(expected)
    )


async def test_rtr_primary_http_backup_startup_failback_and_expiry(tmp_path: Path) -> None:
    core_json = tmp_path / "core.json"
    core_json.write_bytes(export(A))
    port = free_port()
    clock = FakeClock(wall="real", monotonic="real")
    async with web_export(B) as web:
        config = ClientConfig(
            (
                SourceConfig("core", f"rtr://127.0.0.1:{port}", "primary"),
                SourceConfig("web", web.url(), "backup", poll_interval=0.1),
            ),
            (
                GroupConfig("primary", 10, startup_timeout=STARTUP, failback_delay=FAILBACK),
                GroupConfig("backup", 20, startup_timeout=STARTUP, failback_delay=FAILBACK),
            ),
        )
        async with Client(config, _clock=clock) as client, anyio.create_task_group() as tg:
            (rtr,) = [s for s in client.sources if isinstance(s, RtrSource)]
            quick(rtr)
            await tg.start(client.run)
            # 1. The primary cache refuses connections at start: it failed at once, so the
            # backup starts without waiting out the start-up window (issue 12, item 7).
            took = await until(client, lambda: serving(client, "backup", B))
            assert took < STARTUP
            SWITCH_TIMES["primary down at start -> backup serving"] = took
            # 2. The cache comes up: fail-back only after the primary was ready FAILBACK s.
            core_config = AppConfig(
                sources=(core_json,),
                server=settings(listen=(ListenAddress("127.0.0.1", port),)),
                poll_interval=0.05,
            )
            async with running_core(core_config):
                await until(client, lambda: rtr.has_data)
                ready_at = time.monotonic()
                assert serving(client, "backup", B)  # not yet: the delay runs
                await until(client, lambda: serving(client, "primary", A))
                waited = time.monotonic() - ready_at
                assert waited >= FAILBACK * 0.9
                SWITCH_TIMES["primary back -> fail-back (after the delay)"] = waited
            # 3. The cache is gone: its data serves while the cache's Retry interval runs (it
            # may come back), then the ready backup takes over, long before Expire (item 6).
            await anyio.sleep(0.3)
            assert serving(client, "primary", A)
            clock.advance(TIMERS.retry + 1)  # time passes: wall and monotonic alike
            took = await until(client, lambda: serving(client, "backup", B))
            SWITCH_TIMES["primary lost for Retry -> backup serving"] = took
            assert TIMERS.retry + 1 < TIMERS.expire
            await client.aclose()
    print("\nfailover switch times:", {k: round(v, 3) for k, v in SWITCH_TIMES.items()})


async def test_backup_takes_over_within_retry_when_a_real_stayrtr_primary_is_killed(
    tmp_path: Path,
) -> None:
    """Issue 12, item 6, in real time: StayRTR 0.5 (Retry 10 s, Expire 600 s) is the primary,
    an export file the backup. StayRTR is killed: its data keeps serving while the Retry
    interval runs (it may come back), then the ready backup serves, within Retry plus a sync,
    not after Expire."""
    from tests.upstream.rtr_source_helpers import stayrtr_process
    from tests.upstream.test_rtr_source import stayrtr_doc

    doc = stayrtr_doc()
    cache_file = tmp_path / "stayrtr.json"
    cache_file.write_text(json.dumps(doc))
    backup = tmp_path / "backup.json"
    backup.write_bytes(export(B))
    retry = 10
    async with stayrtr_process(cache_file, tmp_path / "stayrtr.log", retry=retry) as (port, proc):
        config = ClientConfig(
            (
                SourceConfig("stayrtr", f"rtr://127.0.0.1:{port}", "primary"),
                SourceConfig("file", str(backup), "backup", poll_interval=0.1),
            ),
            (
                GroupConfig("primary", 10, startup_timeout=5, failback_delay=300),
                GroupConfig("backup", 20, startup_timeout=5, failback_delay=300),
            ),
        )
        roas = cast(list[dict[str, Any]], doc["roas"])
        primary_set = sorted((r["prefix"], r["maxLength"], r["asn"]) for r in roas)
        async with Client(config) as client, anyio.create_task_group() as tg:
            (rtr,) = [s for s in client.sources if isinstance(s, RtrSource)]
            quick(rtr)
            await tg.start(client.run)
            await until(client, lambda: serving(client, "primary", primary_set), 20)
            assert rtr.session.timers.retry == retry
            killed = time.monotonic()
            proc.kill()
            await proc.wait()
            await anyio.sleep(retry / 2)
            assert serving(client, "primary", primary_set)  # within Retry: it stays
            await until(client, lambda: serving(client, "backup", B), retry + 10)
            took = time.monotonic() - killed
            SWITCH_TIMES["StayRTR killed -> backup serving"] = took
            assert retry * 0.9 <= took <= retry + 5, took
            await client.aclose()
    print("\nStayRTR failover:", {k: round(v, 3) for k, v in SWITCH_TIMES.items()})
