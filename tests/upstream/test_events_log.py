"""The client's bounded event log (contract L-38, L-70): written with the step that wakes the
watches; a watch resumes after an event id within it, and a lost window is a resync."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from snapshot.model import Vrp
from snapshot.queries import ResyncRequiredError
from tests.upstream.helpers import A, B, config, export, wait_for, write_atomically
from upstream.client import Client, Event, SnapshotEvent, StatusEvent, Watch
from upstream.event_log import EventLog
from upstream.events import EventId


async def until_generation(events: Watch, generation: int, seen: list[Event]) -> None:
    with anyio.fail_after(5):
        while True:
            event = await events.receive()
            seen.append(event)
            if isinstance(event, SnapshotEvent) and event.after_id.generation >= generation:
                return


@pytest.mark.anyio
async def test_a_watch_resumes_after_an_event_it_saw(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_atomically(path, export(A))
    async with Client(config(path)) as client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.fail_after(5):
            ready = await client.wait_ready()
        seen: list[Event] = []
        with client.watch() as events:
            write_atomically(path, export(B))
            await until_generation(events, ready.generation + 1, seen)
        last = seen[-1].event_id
        write_atomically(path, export(A + B))
        await wait_for(lambda: client.generation >= ready.generation + 2)
        logged = client.events.log.after(EventId(client.epoch, 0))
        by_id = {e.event_id: e for e in logged}
        assert all(by_id[e.event_id] is e for e in seen)  # the very events the watch got
        with client.watch(after=last) as resumed:
            missed: list[Event] = []
            await until_generation(resumed, ready.generation + 2, missed)
        assert missed[0].event_id.sequence == last.sequence + 1
        assert [e.event_id.sequence for e in missed] == list(
            range(last.sequence + 1, last.sequence + 1 + len(missed))
        )
        assert isinstance(missed[-1], SnapshotEvent)
        assert missed[-1].before_id == ready.id._replace(generation=ready.generation + 1)
        # Built while no watch was open, the logged event still has its complete diff.
        assert missed[-1].vrps_added == (Vrp.parse(*A[0]),)
        assert missed[-1].requires_full_revalidation == frozenset()
        await client.aclose()


@pytest.mark.anyio
async def test_a_lost_window_or_another_epoch_is_a_resync(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_atomically(path, export(A))
    async with Client(config(path)) as client, anyio.create_task_group() as tg:
        client.events.log_size = 2
        await tg.start(client.run)
        with anyio.fail_after(5):
            ready = await client.wait_ready()
        early = EventId(client.epoch, client.events.sequence)
        for i in range(3):
            write_atomically(path, export(B if i % 2 == 0 else A))
            await wait_for(lambda g=ready.generation + i + 1: client.generation >= g)  # type: ignore[misc]
        assert len(client.events.log) == 2
        with client.watch(after=early) as events:
            assert events.initial is client.get_snapshot()  # the new start point
            with pytest.raises(ResyncRequiredError, match="window"):
                await events.receive()
        with (
            client.watch(after=EventId(client.epoch + 1, 1)) as events,
            pytest.raises(ResyncRequiredError, match="epoch"),
        ):
            await events.receive()
        with client.watch(after=EventId(client.epoch, client.events.sequence)) as events:
            assert events.error is None  # nothing missed
        await client.aclose()


def test_the_log_keeps_the_last_events_of_one_epoch() -> None:
    log = EventLog(0, limit=3)
    events = [StatusEvent(EventId(0, n), None, None) for n in range(1, 6)]  # type: ignore[arg-type]
    assert log.after(EventId(0, 0)) == ()
    for event in events:
        log.append(event)
    assert log.first_sequence == 3
    assert log.after(EventId(0, 2)) == tuple(events[2:])
    assert log.after(EventId(0, 5)) == ()
    with pytest.raises(ResyncRequiredError, match="window"):
        log.after(EventId(0, 1))
    with pytest.raises(ResyncRequiredError, match="never"):
        log.after(EventId(0, 6))
    with pytest.raises(ValueError, match="increase"):
        log.append(events[0])
    with pytest.raises(ValueError, match="epoch"):
        log.append(StatusEvent(EventId(1, 9), None, None))  # type: ignore[arg-type]
