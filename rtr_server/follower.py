"""``--state-reader``: serving another process's SQLite state through the public shared reader.

All the reading rules (polling, per-source time anchors, expiry on its own timer, the clock
tolerance, read failures, ordered re-judgings, the reader's own SLURM policy, waiting for the
file) are `persistence.shared.SharedSnapshotClient`'s; see `persistence.shared.client` and
`persistence.shared.judging`. This adapter only publishes what the reader judges through the
app's own publisher (own session ids, own serials):

* each view of the reader's watch, in order, one publish at a time (the watch gives them newest
  last; a watch that must resynchronise is replaced, its first event is the current view);
* a refused state's empty view withdraws what was served; an empty view before anything was
  served is not published (nothing to withdraw);
* with the SLURM policy in force (`SharedReaderConfig.policy`; None from the call: not valid
  yet, nothing is published), told of a change by `policy_changed`; without one, the owner's
  policy stored with each state.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import TaskStatus

from persistence.clock import Clock
from persistence.shared import (
    DEFAULT_CLOCK_TOLERANCE,
    ReaderState,
    ResyncRequiredError,
    SharedReaderConfig,
    SharedSnapshot,
    SharedSnapshotClient,
)
from persistence.state import StateId
from snapshot.slurm import SlurmPolicy
from snapshot.snapshot import Snapshot

__all__ = ["DEFAULT_CLOCK_TOLERANCE", "FollowerStatus", "StateFollower"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FollowerStatus:
    """Where the follower stands (a sample of the shared reader's status and the publishes)."""

    opened: bool = False
    state_id: StateId | None = None
    reads: int = 0
    errors: int = 0
    last_error: str | None = None
    #: False while the state read is refused (wall clock too far behind its write time).
    trusted: bool = True
    #: Views handed to the publish callback (the empty set of a withdrawal included).
    published: int = 0


class StateFollower:
    """Publishes the owner's state, as the shared reader judges it, through ``publish``."""

    def __init__(
        self,
        path: str | Path,
        clock: Clock,
        publish: Callable[[Snapshot], Awaitable[None]],
        *,
        poll: float = 1.0,
        policy: Callable[[], SlurmPolicy | None] | None = None,
        clock_tolerance: float = DEFAULT_CLOCK_TOLERANCE,
        recheck: float = 1.0,
    ) -> None:
        """A reader of ``path`` (opened by `run`, which waits for the file to appear).

        ``policy`` gives the SLURM policy in force (None from it: not valid yet, nothing is
        published); without ``policy`` the owner's stored policy applies.
        ``clock_tolerance`` bounds how far the wall clock may be behind a state's write time;
        ``recheck`` is the longest the expiry timer sleeps between two looks at the clock.
        """
        self.reader = SharedSnapshotClient(
            SharedReaderConfig(
                path,
                poll_interval=poll,
                recheck=recheck,
                clock_tolerance=clock_tolerance,
                policy=policy,
                wait_for_file=True,
            ),
            _clock=clock,
        )
        self.publish = publish
        self._published = 0

    @property
    def status(self) -> FollowerStatus:
        """A sample of where the follower stands (no I/O)."""
        st = self.reader.get_status()
        return FollowerStatus(
            opened=st.state in {ReaderState.OPEN, ReaderState.RUNNING},
            state_id=None
            if st.epoch is None or st.generation is None
            else StateId(st.epoch, st.generation),
            reads=st.reads,
            errors=st.read_errors,
            last_error=st.persistence_error,
            trusted=st.trusted,
            published=self._published,
        )

    @property
    def close_error(self) -> str | None:
        """Why closing the reader's connection failed (None: it closed, or not yet)."""
        error = self.reader.close_error
        return None if error is None else f"{type(error).__name__}: {error}"

    def policy_changed(self) -> None:
        """Judge again now (the SLURM policy changed)."""
        self.reader.policy_changed()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Follow until cancelled: open (waiting for the file), read, publish; close at the end."""
        task_status.started()
        async with self.reader, anyio.create_task_group() as tg:
            log.info("following state %s read-only", self.reader.config.path)
            await tg.start(self.reader.run)
            await self._publish_views()
            tg.cancel_scope.cancel()

    async def _publish_views(self) -> None:
        """Publish every view of the reader's watch, in order, until the reader closes."""
        while True:
            try:
                async with self.reader.watch() as watch:
                    async for event in watch:
                        await self._publish(event.snapshot)
            except ResyncRequiredError as exc:
                log.info("state follower: %s", exc)
            else:
                return  # the reader closed

    async def _publish(self, view: SharedSnapshot) -> None:
        snapshot = view.snapshot
        if snapshot.is_empty() and self._published == 0:
            return  # nothing was served: nothing to withdraw
        self._published += 1
        await self.publish(snapshot)
