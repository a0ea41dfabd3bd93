"""A file source woken by its directory's change events (inotify), real files, asyncio and trio.

Every source here polls only once a minute: a change seen within the test's few seconds was
seen through the watch. The same setups with ``watch=False`` see nothing, so each test can fail.
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import watchfiles

from snapshot.snapshot import Snapshot
from tests.upstream.helpers import export, vrp, wait_for, write_atomically
from upstream.file_source import FileSource
from upstream.payload import SourcePayload
from upstream.source import Delivery

pytestmark = pytest.mark.anyio

#: Far longer than any test: only the watch can make a source look in time.
SLOW_POLL = 60.0
V1 = [("192.0.2.0/24", 24, 64496)]
V2 = [("192.0.2.0/24", 24, 64496), ("198.51.100.0/24", 24, 64497)]


class Seen:
    """The payloads a running source delivered."""

    def __init__(self, source: FileSource) -> None:
        self.source = source
        self.payloads: list[SourcePayload] = []

    def sink(self, delivery: Delivery) -> None:
        self.payloads.append(delivery.payload)

    async def count(self, n: int, limit: float = 5.0) -> None:
        await wait_for(lambda: len(self.payloads) >= n, limit)


@asynccontextmanager
async def running(path: Path, *, watch: bool = True) -> AsyncIterator[Seen]:
    source = FileSource(path, name="watched", poll_interval=SLOW_POLL, watch=watch)
    seen = Seen(source)
    async with anyio.create_task_group() as tg:
        tg.start_soon(source.run, seen.sink)
        yield seen
        tg.cancel_scope.cancel()


async def watching(seen: Seen) -> None:
    await wait_for(lambda: seen.source.status.watching is True)
    await anyio.sleep(0.2)  # the watch thread has registered its inotify watch by now


@asynccontextmanager
async def loaded_and_watched(path: Path) -> AsyncIterator[Seen]:
    """A watching source that has read `V1` from ``path`` and set up its watch."""
    write_atomically(path, export(V1))
    async with running(path) as seen:
        await seen.count(1)
        await watching(seen)
        yield seen


async def test_a_replaced_export_is_read_at_once(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    async with loaded_and_watched(path) as seen:
        started = time.monotonic()
        write_atomically(path, export(V2))
        await seen.count(2, limit=3.0)
        assert time.monotonic() - started < 3.0
        assert seen.payloads[1].snapshot_at(0) == Snapshot.build(vrp(*v) for v in V2)


async def test_an_export_written_in_place_is_read_once_the_writer_is_quiet(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    path.write_bytes(export(V1))
    async with running(path) as seen:
        await seen.count(1)
        await watching(seen)
        path.write_bytes(export(V2))
        await seen.count(2, limit=3.0)
        assert seen.source.status.errors == {}


async def test_an_export_that_appears_later_is_read_at_once(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    async with running(path) as seen:
        await watching(seen)
        write_atomically(path, export(V1))
        await seen.count(1, limit=3.0)


async def test_without_the_watch_only_the_poll_interval_looks(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    write_atomically(path, export(V1))
    async with running(path, watch=False) as seen:
        await seen.count(1)
        write_atomically(path, export(V2))
        await anyio.sleep(1.5)
        assert len(seen.payloads) == 1
        assert seen.source.status.watching is None


async def test_other_files_in_the_directory_are_not_read(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    async with loaded_and_watched(path) as seen:
        read = seen.source.status.bytes_read
        for i in range(5):
            (tmp_path / f"other-{i}.json").write_bytes(export(V2))
        await anyio.sleep(1.0)
        assert seen.source.status.bytes_read == read
        assert len(seen.payloads) == 1


async def test_a_missing_directory_is_watched_once_it_exists(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="upstream.file_watch")
    path = tmp_path / "later" / "export.json"
    source = FileSource(path, name="watched", poll_interval=0.2)
    seen = Seen(source)
    async with anyio.create_task_group() as tg:
        tg.start_soon(source.run, seen.sink)
        await wait_for(lambda: "does not exist; polling until it does" in caplog.text)
        assert source.status.watching is None
        path.parent.mkdir()
        await watching(seen)
        source.poll_interval = SLOW_POLL  # from now on only the watch can be in time
        await anyio.sleep(0.5)  # the poll loop is in its long wait
        write_atomically(path, export(V1))
        await seen.count(1, limit=3.0)
        tg.cancel_scope.cancel()
    assert caplog.text.count("does not exist; polling until it does") == 1


async def test_a_watch_that_cannot_be_set_up_leaves_polling_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class NoWatches:
        """What watchfiles gives when the kernel's inotify watch limit is reached."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def __aiter__(self) -> NoWatches:
            return self

        async def __anext__(self) -> set[Any]:
            raise OSError(errno.ENOSPC, "OS file watch limit reached")

        async def aclose(self) -> None:
            pass

    monkeypatch.setattr(watchfiles, "awatch", NoWatches)
    path = tmp_path / "export.json"
    write_atomically(path, export(V1))
    source = FileSource(path, name="watched", poll_interval=0.1)
    seen = Seen(source)
    async with anyio.create_task_group() as tg:
        tg.start_soon(source.run, seen.sink)
        await seen.count(1)
        await wait_for(lambda: source.status.watching is False)
        write_atomically(path, export(V2))
        await seen.count(2)  # the poll interval still looks
        tg.cancel_scope.cancel()
    assert "cannot watch" in caplog.text
    assert "polling only" in caplog.text


async def test_a_cancelled_source_stops_its_watch_at_once(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    with anyio.fail_after(5):
        async with loaded_and_watched(path):
            started = time.monotonic()
    # The watch thread is stopped by its flag, not by its 5 s timeout.
    assert time.monotonic() - started < 1.0
