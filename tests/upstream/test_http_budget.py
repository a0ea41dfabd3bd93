"""The byte budget HTTP sources share (L-14): real loopback servers, asyncio and trio."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from tests.upstream.helpers import export, wait_for
from tests.upstream.http_server import Reply, ScriptedServer
from tests.upstream.test_http_source import Recorder, source_for
from upstream.client import Client
from upstream.config import ClientConfig, SourceConfig
from upstream.http_budget import BudgetExhaustedError, ByteBudget, ByteQuota
from upstream.http_source import HttpSource

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("error::ResourceWarning")]

#: Each body is exactly the budget: two of them never fit at once.
SIZE = 30_000


def body(asn: int) -> bytes:
    """A valid export padded with blanks to `SIZE` bytes."""
    doc = export([("192.0.2.0/24", 24, asn)])
    return doc + b" " * (SIZE - len(doc))


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def servers() -> Iterator[tuple[ScriptedServer, ScriptedServer]]:
    first, second = ScriptedServer(), ScriptedServer()
    try:
        yield first, second
    finally:
        first.close()
        second.close()


class Poll:
    """One `HttpSource.check` run in a task, its outcome kept."""

    def __init__(self, source: HttpSource) -> None:
        self.source = source
        self.sink = Recorder()
        self.emitted: bool | None = None

    async def __call__(self) -> None:
        self.emitted = await self.source.check(self.sink)


async def test_a_poll_that_holds_nothing_waits_for_the_shared_budget(
    servers: tuple[ScriptedServer, ScriptedServer],
) -> None:
    """The first poll holds all but one byte of the budget; the second waits, then gets it all."""
    slow, quick = servers
    slow.script(Reply(200, body(64496), piece=SIZE - 1, pause=0.5))
    quick.script(Reply(200, body(64497), piece=SIZE - 1, pause=0.01))
    budget = ByteBudget(SIZE)
    first = Poll(source_for(slow.url(), max_bytes=SIZE, budget=budget))
    second = Poll(source_for(quick.url(), max_bytes=SIZE, budget=budget))
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            await wait_for(lambda: first.source.quota.held == SIZE - 1)
            tg.start_soon(second)
            await wait_for(lambda: budget.waiting == 1)
            # Its chunk came and is not counted yet (the server thread counts a piece after
            # its write returned, so the counter may trail the client by a moment).
            await wait_for(lambda: quick.body_bytes_sent > 0)
            assert second.source.quota.held == 0
            assert budget.held == SIZE - 1
    assert first.emitted
    assert second.emitted
    assert len(first.sink.payloads) == len(second.sink.payloads) == 1
    assert second.source.status.errors == {}
    assert budget.peak <= SIZE
    assert budget.held == 0
    assert budget.waiting == 0


async def test_a_poll_that_holds_part_fails_clearly_instead_of_waiting(
    servers: tuple[ScriptedServer, ScriptedServer],
) -> None:
    """Both hold part of the budget: the one that needs more fails at once (no deadlock)."""
    slow, quick = servers
    piece = SIZE * 2 // 5
    slow.script(Reply(200, body(64496), piece=piece, pause=1.0))
    quick.script(Reply(200, body(64497), piece=piece, pause=0.05))
    budget = ByteBudget(SIZE)
    first = Poll(source_for(slow.url(), max_bytes=SIZE, budget=budget))
    second = Poll(source_for(quick.url(), max_bytes=SIZE, budget=budget))
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            await wait_for(lambda: first.source.quota.held == piece)
            tg.start_soon(second)
    assert second.emitted is False
    assert second.source.status.errors == {"environment": 1}
    assert "shared byte budget of 30000 bytes is held by other polls" in (
        second.source.status.last_error or ""
    )
    assert second.sink.payloads == []
    assert first.emitted
    assert len(first.sink.payloads) == 1
    assert budget.peak <= SIZE
    assert budget.held == 0


async def test_the_budget_is_held_until_the_parse_ended(
    servers: tuple[ScriptedServer, ScriptedServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the worker thread parses the body, its bytes still count."""
    import upstream.http_body
    import upstream.http_source

    server, _ = servers
    server.script(Reply(200, body(64496)))
    budget = ByteBudget(SIZE)
    source = source_for(server.url(), max_bytes=SIZE, budget=budget)
    seen: list[int] = []
    real = upstream.http_body.digest_and_parse

    def parse(*args: object) -> object:
        seen.append(budget.held)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(upstream.http_source, "digest_and_parse", parse)
    with anyio.fail_after(5):
        assert await source.check(Recorder())
    assert seen == [SIZE]
    assert budget.held == 0


async def test_a_chunk_that_never_fits_and_a_full_budget() -> None:
    budget = ByteBudget(10)
    one, other = budget.quota(), ByteQuota(budget)
    with pytest.raises(BudgetExhaustedError) as never:
        await one.take(11)
    assert never.value.never_fits
    await one.take(6)
    await other.take(4)
    with pytest.raises(BudgetExhaustedError) as full:
        await other.take(1)
    assert not full.value.never_fits
    assert budget.held == 10
    with anyio.fail_after(2):
        async with anyio.create_task_group() as tg:
            third = budget.quota()
            tg.start_soon(third.take, 5)
            await wait_for(lambda: budget.waiting == 1)
            one.release()
    assert (budget.held, one.held, third.held, budget.peak) == (9, 0, 5, 10)


async def test_the_client_shares_one_budget_among_its_http_sources() -> None:
    config = ClientConfig(
        sources=(
            SourceConfig("a", "http://127.0.0.1:9/a.json", max_bytes=1 << 30),
            SourceConfig("b", "https://127.0.0.1:9/b.json"),
            SourceConfig("c", "rtr://127.0.0.1:9"),
        )
    )
    client = Client(config)
    http = [s for s in client.sources if isinstance(s, HttpSource)]
    assert len(http) == 2
    assert all(s.quota.budget is client.byte_budget for s in http)
    assert client.byte_budget.limit == 1 << 30  # grown to the largest max_bytes
