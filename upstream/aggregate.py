"""Runs sources, merges their payloads (union) and hands each new complete snapshot to a callback.

The first snapshot is handed over once every source has made its first attempt (loaded, found
missing, or failed), so a router is never served a half-loaded union at start. After that every
new payload, and every moment an entry reaches its ``expires``, produces a fresh snapshot; the
callback decides whether it differs from what is published. Building runs in a worker thread.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import anyio
from anyio.abc import TaskStatus

from snapshot.snapshot import Snapshot, SnapshotBuilder
from upstream.clock import Clock, SystemClock
from upstream.json_format import SourcePayload
from upstream.status import SourceStatus

log = logging.getLogger(__name__)

#: Do not rebuild more often than this when entries expire one after another.
MIN_EXPIRY_WAKE = 1.0
#: How often readiness is re-checked while sources have not reported their first attempt.
READY_POLL = 0.2


class Source(Protocol):
    """What the aggregator needs from a source."""

    name: str
    status: SourceStatus

    async def run(self, sink: Callable[[str, SourcePayload], None]) -> None:
        """Run until cancelled, calling ``sink`` with each new complete payload."""
        ...


def merge_at(payloads: Sequence[SourcePayload], now: int) -> Snapshot:
    """The union of the entries of ``payloads`` that are valid at ``now``."""
    snapshots = [p.snapshot_at(now) for p in payloads]
    if len(snapshots) == 1:
        return snapshots[0]
    builder = SnapshotBuilder()
    for snap in snapshots:
        builder.update(snap)
    return builder.build()


class Aggregator:
    """Owns the source tasks; calls ``on_snapshot`` with each rebuilt snapshot."""

    def __init__(
        self,
        sources: Sequence[Source],
        on_snapshot: Callable[[Snapshot], Awaitable[None]],
        *,
        clock: Clock | None = None,
    ) -> None:
        """Configure; nothing runs until `run`."""
        names = [s.name for s in sources]
        if len(set(names)) != len(names):
            raise ValueError(f"source names must be unique: {names}")
        self.sources = list(sources)
        self.on_snapshot = on_snapshot
        self.clock = clock or SystemClock()
        self.payloads: dict[str, SourcePayload] = {}
        self._changed = anyio.Event()
        self.builds = 0

    def _accept(self, name: str, payload: SourcePayload) -> None:
        self.payloads[name] = payload
        self._changed.set()

    def _ready(self) -> bool:
        return all(s.status.attempted for s in self.sources)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the sources and the merge loop until cancelled."""
        async with anyio.create_task_group() as tg:
            for source in self.sources:
                tg.start_soon(source.run, self._accept, name=f"source {source.name}")
            task_status.started()
            await self._merge_loop()

    async def _merge_loop(self) -> None:
        announced_wait = False
        delay = math.inf
        while True:
            with anyio.move_on_after(delay):
                await self._changed.wait()
            self._changed = anyio.Event()
            if not self._ready():
                if not announced_wait:
                    pending = [s.name for s in self.sources if not s.status.attempted]
                    log.info("waiting for the first attempt of: %s", ", ".join(pending))
                    announced_wait = True
                # A source reports an attempt without emitting (a missing file): re-check soon.
                delay = READY_POLL
                continue
            if not self.payloads:
                log.warning("no source has data yet; routers get No Data Available")
                delay = math.inf  # a source's first payload sets the event
                continue
            now = int(self.clock.wall())
            payloads = list(self.payloads.values())
            snapshot = await anyio.to_thread.run_sync(merge_at, payloads, now)
            self.builds += 1
            expiries = [e for p in payloads if (e := p.earliest_expiry_after(now)) is not None]
            next_expiry = min(expiries, default=None)
            delay = (
                math.inf
                if next_expiry is None
                else max(MIN_EXPIRY_WAKE, next_expiry - self.clock.wall())
            )
            await self.on_snapshot(snapshot)
