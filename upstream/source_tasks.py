"""`SourceTasks`: starts each source's task once, knows which still run, cancels them on close.

A source's task belongs to the aggregator's task group; its cancel scope exists before the task
runs (on `SourceEntry.scope`), so a retire or a close that comes first still counts. A task is
counted from the moment it is started until it has ended, cancellation included: the last round
of a close waits for that count to reach zero, since a source may still report a revocation
while it stops.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

import anyio
from anyio.abc import TaskGroup

from upstream.source import Delivery
from upstream.source_entry import SourceEntry

__all__ = ["SourceTasks"]


class SourceTasks:
    """The running source tasks of one aggregator."""

    def __init__(self, on_ended: Callable[[], None]) -> None:
        """``on_ended`` is called after a task ended once `stop` was called."""
        self._on_ended = on_ended
        self._running: Counter[str] = Counter()
        self.stopping = False

    def start(
        self,
        tg: TaskGroup,
        entry: SourceEntry,
        sink: Callable[[SourceEntry, Delivery], None],
    ) -> None:
        """Start the task of ``entry``'s source in ``tg`` unless it has one."""
        if entry.scope is not None:
            return
        entry.scope = anyio.CancelScope()
        self._running[entry.name] += 1  # counted from now: a close before it runs waits for it
        tg.start_soon(self._run, entry, entry.scope, sink, name=f"source {entry.name}")

    def stop(self, entries: Iterable[SourceEntry]) -> None:
        """Cancel every task; none starts a source's run any more."""
        self.stopping = True
        for entry in entries:
            if entry.scope is not None:
                entry.scope.cancel()

    def running(self) -> list[str]:
        """Names of the sources whose task has not ended."""
        return sorted(+self._running)

    def __bool__(self) -> bool:
        """True while some task has not ended."""
        return any(self._running.values())

    async def _run(
        self,
        entry: SourceEntry,
        scope: anyio.CancelScope,
        sink: Callable[[SourceEntry, Delivery], None],
    ) -> None:
        try:
            with scope:
                if not entry.current or self.stopping:
                    return
                await entry.source.run(lambda delivery: sink(entry, delivery))
        finally:
            self._running[entry.name] -= 1
            if self.stopping:
                self._on_ended()
