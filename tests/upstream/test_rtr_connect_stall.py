"""`RtrSource` against a stalled name lookup, a listener that never accepts, a silent cache."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import anyio
import pytest

from tests.upstream.helpers import wait_for
from tests.upstream.http_server import (
    RawServer,
    full_backlog,
    never_answer,
    open_fds,
    stalled_name_lookups,
)
from tests.upstream.rtr_source_helpers import quick, running_source
from upstream.rtr_source import RtrSource

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("error::ResourceWarning")]


@pytest.fixture
def stalled_dns(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    with stalled_name_lookups(monkeypatch) as release:
        yield release


async def test_a_stalled_name_lookup_keeps_the_connect_deadline(
    stalled_dns: threading.Event,
) -> None:
    try:
        source = quick(RtrSource("rtr://stalled.example.test:8282", connect_timeout=0.3))
        before = open_fds()
        started = time.monotonic()
        async with running_source(source):
            await wait_for(lambda: source.status.errors.get("connect", 0) >= 1, limit=2)
        assert time.monotonic() - started < 2
        assert "timeout" in (source.status.last_error or "")
        assert source.connections == 0
        assert not stalled_dns.is_set()
        assert open_fds() <= before
    finally:
        stalled_dns.set()  # the lookup threads end now, not at the loop's shutdown


async def test_a_connect_that_never_completes_keeps_its_deadline_and_leaves_no_socket() -> None:
    with full_backlog() as port:
        source = quick(RtrSource(f"rtr://127.0.0.1:{port}", connect_timeout=0.3))
        before = open_fds()
        started = time.monotonic()
        async with running_source(source):
            await wait_for(lambda: source.status.errors.get("connect", 0) >= 1, limit=2)
        assert time.monotonic() - started < 2
        assert source.connections == 0
        assert open_fds() <= before


async def test_cancel_during_connect_leaves_no_socket() -> None:
    with full_backlog() as port:
        source = RtrSource(f"rtr://127.0.0.1:{port}", connect_timeout=30.0)
        before = open_fds()
        with anyio.fail_after(5):
            async with running_source(source):
                await anyio.sleep(0.3)
        assert source.status.errors == {}
        assert open_fds() <= before


async def test_cancel_wakes_a_reader_blocked_on_a_silent_cache() -> None:
    """The source waits for the Reset Query's answer; cancelling it wakes and closes it."""
    srv = RawServer(never_answer)
    try:
        source = RtrSource(f"rtr://127.0.0.1:{srv.port}")
        before = open_fds()
        with anyio.fail_after(5):
            async with running_source(source):
                await wait_for(lambda: source.connected)
        assert not source.connected
        await wait_for(lambda: srv.peer_closed == 1)
        assert open_fds() <= before
    finally:
        srv.close()
