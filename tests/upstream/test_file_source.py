"""`FileSource` polling real temporary files, on asyncio and trio."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from snapshot.snapshot import Snapshot
from tests.upstream.helpers import (
    dumps,
    export,
    touch,
    vrp,
    wait_for,
    write_atomically,
)
from upstream.file_source import FileSource
from upstream.payload import SourcePayload
from upstream.source import Delivery, DeliverySink
from upstream.status import SourceState

pytestmark = pytest.mark.anyio

POLL = 0.05
V1 = [("192.0.2.0/24", 24, 64496)]
V2 = [("192.0.2.0/24", 24, 64496), ("2001:db8::/32", 48, 64497)]
V3 = [("198.51.100.0/24", 24, 64498)]
BROKEN = dumps({"roas": [{"prefix": "10.0.0.1/8", "asn": 64496}]})


def snap_of(vrps: list[tuple[str, int, int]]) -> Snapshot:
    return Snapshot.build(vrp(*v) for v in vrps)


def state(source: FileSource) -> SourceState:
    """The current state (a call, so that mypy does not narrow it across awaits)."""
    return source.status.state


class CountingSource(FileSource):
    """A FileSource that counts its polls, so a test can wait for "n more polls" exactly."""

    polls = 0

    async def check(self, sink: DeliverySink) -> bool:
        try:
            return await super().check(sink)
        finally:
            self.polls += 1

    async def wait_polls(self, n: int) -> None:
        target = self.polls + n
        await wait_for(lambda: self.polls >= target)


@dataclass
class Running:
    source: CountingSource
    received: MemoryObjectReceiveStream[tuple[str, SourcePayload]]

    async def next_payload(self) -> SourcePayload:
        with anyio.fail_after(5):
            name, payload = await self.received.receive()
        assert name == self.source.name
        return payload

    def assert_nothing_emitted(self) -> None:
        with pytest.raises(anyio.WouldBlock):
            self.received.receive_nowait()


@asynccontextmanager
async def running(path: Path) -> AsyncIterator[Running]:
    send: MemoryObjectSendStream[tuple[str, SourcePayload]]
    send, receive = anyio.create_memory_object_stream[tuple[str, SourcePayload]](100)
    source = CountingSource(path, name="test", poll_interval=POLL)

    def sink(delivery: Delivery) -> None:
        send.send_nowait((source.name, delivery.payload))

    tg: TaskGroup
    with send, receive:
        async with anyio.create_task_group() as tg:
            tg.start_soon(source.run, sink)
            yield Running(source, receive)
            tg.cancel_scope.cancel()


async def test_missing_file_waits_then_loads(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    async with running(path) as run:
        await run.source.wait_polls(3)
        assert run.source.status.state is SourceState.WAITING
        assert run.source.status.attempted
        assert run.source.status.errors == {}
        run.assert_nothing_emitted()

        write_atomically(path, export(V1))
        payload = await run.next_payload()
        assert payload.snapshot_at(0) == snap_of(V1)
        status = run.source.status
        assert status.state is SourceState.OK
        assert status.records == {"vrp_v4": 1, "vrp_v6": 0, "router_key": 0, "aspa": 0}
        assert status.last_success_wall is not None
        assert status.bytes_read == len(export(V1))


async def test_change_emits_again_touch_does_not(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    write_atomically(path, export(V1))
    async with running(path) as run:
        assert (await run.next_payload()).snapshot_at(0) == snap_of(V1)

        write_atomically(path, export(V2))
        assert (await run.next_payload()).snapshot_at(0) == snap_of(V2)

        # Same bytes, new mtime: the file is read again (bytes_read grows) but nothing is emitted.
        read_before = run.source.status.bytes_read
        touch(path)
        await wait_for(lambda: run.source.status.bytes_read != read_before)
        await run.source.wait_polls(3)
        run.assert_nothing_emitted()
        assert run.source.status.state is SourceState.OK

        # Same content written anew (new inode) is not emitted either.
        write_atomically(path, export(V2))
        await run.source.wait_polls(3)
        run.assert_nothing_emitted()


async def test_invalid_content_is_rejected_once_and_old_data_stays(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    write_atomically(path, export(V1))
    async with running(path) as run:
        first = await run.next_payload()
        assert first.snapshot_at(0) == snap_of(V1)

        write_atomically(path, BROKEN)
        await wait_for(lambda: run.source.status.state is SourceState.ERROR)
        status = run.source.status
        assert status.last_error is not None
        assert "roas[0]" in status.last_error
        assert "10.0.0.1/8" in status.last_error
        assert status.last_error_wall is not None
        assert status.errors == {"format": 1}
        # The previous payload stays the last emitted one; the broken bytes are not re-parsed.
        await run.source.wait_polls(5)
        run.assert_nothing_emitted()
        assert status.errors == {"format": 1}
        assert status.records == {"vrp_v4": 1, "vrp_v6": 0, "router_key": 0, "aspa": 0}

        write_atomically(path, export(V3))
        assert (await run.next_payload()).snapshot_at(0) == snap_of(V3)
        assert status.state is SourceState.OK
        assert status.errors == {"format": 1}


async def test_deleted_file_waits_and_new_content_loads(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    write_atomically(path, export(V1))
    async with running(path) as run:
        await run.next_payload()
        path.unlink()
        await wait_for(lambda: run.source.status.state is SourceState.WAITING)
        run.assert_nothing_emitted()
        write_atomically(path, export(V2))
        assert (await run.next_payload()).snapshot_at(0) == snap_of(V2)


async def test_compressed_file(tmp_path: Path) -> None:
    path = tmp_path / "export.json.gz"
    write_atomically(path, gzip.compress(export(V2)))
    async with running(path) as run:
        assert (await run.next_payload()).snapshot_at(0) == snap_of(V2)


async def test_corrupt_gzip_is_a_format_error_not_a_crash(tmp_path: Path) -> None:
    """BUG: a damaged deflate stream raises ``zlib.error`` out of `check` (and so out of `run`,
    taking the aggregator's task group and the server down) instead of a rejected update."""
    path = tmp_path / "export.json.gz"
    packed = gzip.compress(export(V2 * 20))
    write_atomically(path, packed[:20] + bytes(b ^ 0xFF for b in packed[20:60]) + packed[60:])
    emitted: list[SourcePayload] = []
    source = FileSource(path, poll_interval=POLL)
    assert not await source.check(lambda d: emitted.append(d.payload))
    assert source.status.state is SourceState.ERROR
    assert source.status.errors == {"format": 1}
    assert emitted == []


async def test_decompression_bomb_is_rejected_by_the_size_cap(tmp_path: Path) -> None:
    path = tmp_path / "export.json.gz"
    document = export(V2) + b" " * 200_000  # valid JSON, large once decompressed
    write_atomically(path, gzip.compress(document))
    emitted: list[SourcePayload] = []
    source = FileSource(path, poll_interval=POLL, max_bytes=100_000)
    assert not await source.check(lambda d: emitted.append(d.payload))
    assert source.status.state is SourceState.ERROR
    assert "exceeds the limit of 100000 bytes" in (source.status.last_error or "")
    assert emitted == []
    # The same content within a larger cap loads.
    roomy = FileSource(path, poll_interval=POLL, max_bytes=1_000_000)
    assert await roomy.check(lambda d: emitted.append(d.payload))
    assert emitted[0].snapshot_at(0) == snap_of(V2)


@pytest.mark.parametrize("interruption", ["broken", "missing"])
async def test_state_recovers_when_the_previous_content_returns(
    tmp_path: Path, interruption: str
) -> None:
    """BUG: after an error (or a missing file) the same valid content as before is recognised as
    unchanged, so nothing is emitted (right) but the status stays ERROR / WAITING for ever."""
    path = tmp_path / "export.json"
    emitted: list[SourcePayload] = []

    def sink(delivery: Delivery) -> None:
        emitted.append(delivery.payload)

    source = FileSource(path, poll_interval=POLL)
    write_atomically(path, export(V1))
    assert await source.check(sink)
    if interruption == "broken":
        write_atomically(path, BROKEN)
        assert not await source.check(sink)
        assert state(source) is SourceState.ERROR
    else:
        path.unlink()
        assert not await source.check(sink)
        assert state(source) is SourceState.WAITING
    write_atomically(path, export(V1))
    assert not await source.check(sink)  # unchanged content: not emitted again
    assert len(emitted) == 1
    assert state(source) is SourceState.OK


async def test_unreadable_path_is_an_environment_error(tmp_path: Path) -> None:
    path = tmp_path / "a-directory"
    path.mkdir()
    source = FileSource(path, poll_interval=POLL)
    assert not await source.check(lambda _d: None)
    assert source.status.state is SourceState.ERROR
    assert source.status.attempted
    assert source.status.errors == {"environment": 1}


def test_poll_interval_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="poll_interval"):
        FileSource(tmp_path / "x.json", poll_interval=0)
    source = FileSource(tmp_path / "x.json")
    assert source.status.state is SourceState.STARTING
    assert not source.status.attempted
    assert source.name == str(tmp_path / "x.json")
