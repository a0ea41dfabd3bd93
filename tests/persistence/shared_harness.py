"""Helpers of the shared reader tests: a fast configuration, an owner, bounded waits."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio

from persistence.backend import ThreadedBackend
from persistence.shared import (
    SharedEvent,
    SharedReaderConfig,
    SharedReaderLimits,
    SharedSnapshot,
    SharedSnapshotClient,
    SharedWatch,
)
from persistence.sqlite_backend import SQLiteBackend

TIMEOUT = 10.0


def config(
    path: Path, wall: Callable[[], float] = time.time, *, slots: int = 2
) -> SharedReaderConfig:
    """A fast-polling reader configuration for ``path`` with ``slots`` build slots."""
    return SharedReaderConfig(
        path=path,
        poll_interval=0.02,
        recheck=0.02,
        wall=wall,
        limits=SharedReaderLimits(max_concurrent_builds=slots),
    )


async def eventually(predicate: Callable[[], bool]) -> None:
    """Wait (bounded) until ``predicate`` holds: the reader's faces are samples, polled."""
    with anyio.fail_after(TIMEOUT):
        while not predicate():  # noqa: ASYNC110 - sampling get_status / get_snapshot
            await anyio.sleep(0.01)


@asynccontextmanager
async def owner(path: Path) -> AsyncIterator[ThreadedBackend]:
    """An open owner backend on ``path`` (real wall clock)."""
    backend = ThreadedBackend(SQLiteBackend(path))
    await backend.open()
    try:
        yield backend
    finally:
        assert await backend.close()


async def until_generation(reader: SharedSnapshotClient, generation: int) -> SharedSnapshot:
    """Wait until the reader's snapshot is at ``generation``."""
    await eventually(
        lambda: (snap := reader.get_snapshot()) is not None and snap.generation == generation
    )
    snap = reader.get_snapshot()
    assert snap is not None
    return snap


async def next_event(watch: SharedWatch) -> SharedEvent:
    """The next event of ``watch``, bounded."""
    with anyio.fail_after(TIMEOUT):
        return await watch.__anext__()
