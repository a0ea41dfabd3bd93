"""The client's subscriptions (contract L-69, L-70, L-73, L-22, L-39): initial, independent
bounded queues, a terminal resync, a normal end at close, connection changes as status."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from anyio.abc import SocketStream

from tests.upstream.helpers import A, B, config, export, snapshot_event, wait_for, write_atomically
from upstream.client import (
    Client,
    ClientState,
    Event,
    ResyncRequiredError,
    SnapshotEvent,
    StatusEvent,
    Watch,
    WatchClosed,
)
from upstream.config import ClientConfig, SourceConfig
from upstream.events import EventId

pytestmark = pytest.mark.anyio


async def test_initial_is_taken_at_registration_and_never_repeated(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_atomically(path, export(A))
    async with Client(config(path)) as client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.fail_after(5):
            ready = await client.wait_ready()
        with client.watch() as events:
            assert events.initial is ready
            assert events.initial_status.generation == ready.generation
            assert events.initial_status.state is ClientState.RUNNING
            write_atomically(path, export(B))
            event = await snapshot_event(events)
            assert event.before_id == ready.id  # the first event follows the initial one
            assert event.snapshot is not ready
        await client.aclose()


async def test_each_subscriber_has_its_own_queue(tmp_path: Path) -> None:
    """A subscriber that overflows gets a terminal resync; another one misses nothing."""
    path = tmp_path / "a.json"
    write_atomically(path, export(A))
    async with Client(config(path)) as client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.fail_after(5):
            ready = await client.wait_ready()
        with client.watch(max_queue=1) as small, client.watch() as large:
            for i in range(3):
                write_atomically(path, export(B if i % 2 == 0 else A))
                generation = ready.generation + i + 1
                await wait_for(lambda g=generation: client.generation >= g)  # type: ignore[misc]
            assert small.error is not None
            with pytest.raises(ResyncRequiredError, match="overflow"):
                await small.receive()
            with pytest.raises(ResyncRequiredError):
                await small.receive()  # terminal
            gens: list[int] = []
            with anyio.fail_after(5):
                while len(gens) < 3:
                    event = await large.receive()
                    if isinstance(event, SnapshotEvent):
                        gens.append(event.after_id.generation)
            assert gens == [ready.generation + 1, ready.generation + 2, ready.generation + 3]
        await client.aclose()


async def test_the_close_ends_a_watch_normally_and_drops_what_is_unread(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_atomically(path, export(A))
    async with Client(config(path)) as client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.fail_after(5):
            await client.wait_ready()
        with client.watch() as events:
            write_atomically(path, export(B))
            await wait_for(lambda: client.generation >= 2)
            seen: list[Event] = []

            async def consume() -> None:
                seen.extend([event async for event in events])  # ends without an exception

            await client.aclose()
            with anyio.fail_after(5):
                await consume()
            assert seen == []  # the unconsumed event was dropped by the close
            assert events.ended
            with pytest.raises(WatchClosed):
                await events.receive()
        with client.watch() as late:  # a watch on a closed client has ended already
            assert late.ended
            with pytest.raises(WatchClosed):
                await late.receive()


async def test_a_gap_before_the_close_is_still_a_resync(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_atomically(path, export(A))
    async with Client(config(path)) as client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.fail_after(5):
            await client.wait_ready()
        with client.watch(max_queue=1) as events:
            for i in range(2):
                write_atomically(path, export(B if i == 0 else A))
                await wait_for(lambda g=2 + i: client.generation >= g)  # type: ignore[misc]
            await client.aclose()
            with pytest.raises(ResyncRequiredError, match="overflow"):
                async for _ in events:
                    pass


async def test_a_resync_wakes_a_waiting_receiver() -> None:
    """The resync is its own flag and wake-up: a receiver waiting on an empty queue is woken
    by an event of another publish epoch, and no event is queued for it."""
    watch = Watch(lambda _: None, 0, 1, None, None)  # type: ignore[arg-type]
    errors: list[BaseException] = []

    async def wait() -> None:
        try:
            await watch.receive()
        except ResyncRequiredError as exc:
            errors.append(exc)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.sleep(0.05)
            other_epoch = StatusEvent(EventId(1, 1), None, None)  # type: ignore[arg-type]
            watch.offer(other_epoch)  # the waiting receiver wakes: the group can end
    assert "epoch" in str(errors[0])
    watch.offer(StatusEvent(EventId(0, 2), None, None))  # type: ignore[arg-type]
    with pytest.raises(ResyncRequiredError, match="epoch"):
        await watch.receive()  # terminal: nothing later is delivered


async def test_a_connection_change_alone_is_a_status_event(tmp_path: Path) -> None:
    """L-22/L-39: an RTR source connecting (its state unchanged) gives a StatusEvent with its
    own sequence number and publishes no snapshot."""

    async def hold(stream: SocketStream) -> None:
        async with stream:
            await anyio.sleep(30)  # never answers the Reset Query

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    cfg = ClientConfig((SourceConfig("r", f"rtr://127.0.0.1:{port}"),), poll_interval=0.05)
    async with listener, anyio.create_task_group() as server:
        server.start_soon(listener.serve, hold)
        async with Client(cfg) as client, anyio.create_task_group() as tg:
            with client.watch() as events:
                await tg.start(client.run)
                with anyio.fail_after(10):
                    while True:
                        event = await events.receive()
                        assert not isinstance(event, SnapshotEvent)
                        changes = {(c.what, c.after) for c in event.source_changes}
                        if ("connected", "True") in changes:
                            break
                assert isinstance(event, StatusEvent)
                assert not any(c.what == "state" for c in event.source_changes)
                assert event.status_sequence >= 2  # the first status, then the connection
                assert event.event_id.sequence == client.events.sequence
                assert client.generation == 0
                assert event.observed_snapshot_id is None
            await client.aclose()
        server.cancel_scope.cancel()
