"""RtrSource against hostile RTR caches on loopback TCP: budgets, errors, backoff, data kept."""

from __future__ import annotations

import logging

import anyio
import pytest

from rtr_server.protocol import CacheReset, Pdu, ResetQuery, SerialNotify, SerialQuery, encode
from tests.server.helpers import wait_until
from tests.upstream.rtr_source_helpers import CacheConnection, ScriptedCache, running_source
from tests.upstream.test_rtr_source import LOGGER, SID, VRP_A, reply
from upstream.json_format import SourcePayload
from upstream.rtr_source import RtrSource
from upstream.status import SourceState

pytestmark = pytest.mark.anyio


def warnings_about(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER and r.levelno >= logging.WARNING and text in r.getMessage()
    ]


def vrp_counts(payloads: list[SourcePayload]) -> list[int]:
    return [p.counts()["vrp_v4"] for p in payloads]


# ------------------------------------------------------------------------------ item 14


async def test_cache_answering_every_query_with_cache_reset_gets_few_queries(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Cache Reset to our Reset Query: one warning, backoff, the earlier data stays."""
    queries: list[Pdu] = []

    async def refuse_all(conn: CacheConnection) -> None:
        while (query := await conn.receive()) is not None:
            queries.append(query)
            await conn.send(encode(CacheReset(2)))

    async def first(conn: CacheConnection) -> None:
        assert await conn.receive() == ResetQuery(2)
        await conn.send(reply(2, VRP_A, serial=1))
        await conn.send(encode(SerialNotify(2, SID, 2)))  # then it loses its data
        await refuse_all(conn)

    async with ScriptedCache([first, refuse_all]).serving() as cache:
        source = RtrSource(f"rtr://127.0.0.1:{cache.port}", retry_initial=0.5, retry_max=2.0)
        async with running_source(source) as sink:
            await wait_until(lambda: bool(queries), what="the first refused query")
            await anyio.sleep(3.0)
            seen = len(queries)
            connections = len(cache.connections)
        print(f"\nCache-Reset cache: {seen} queries on {connections} connections in 3 s")
        # Each connection: Serial Query -> Cache Reset -> Reset Query -> Cache Reset -> close;
        # backoffs of 0.25..0.5, 0.5..1, 1..2 s leave room for at most 4 connections.
        assert 2 <= connections <= 5
        assert seen <= 2 * connections
        assert queries[:2] == [SerialQuery(2, SID, 1), ResetQuery(2)]
        # The data of the good sync stays: handed over once, never withdrawn.
        assert vrp_counts(sink.payloads) == [1]
        snapshot = source.session.snapshot
        assert snapshot is not None
        assert snapshot.vrp_count == 1
        status = source.status
        assert status.state is SourceState.ERROR
        assert status.last_error_class == "protocol"
        assert "Cache Reset" in (status.last_error or "")
        assert status.errors.get("protocol", 0) >= 2
        assert len(warnings_about(caplog, "Cache Reset")) == 1
