"""`Publishing`: a snapshot becomes what routers are served (publisher, server, publish log).

The publisher's rule (serial, net delta, diff log; `snapshot.publisher.Publisher`) runs in a
worker thread, since the delta of a large table takes a fraction of a second; the new state is
swapped into the server in one assignment (`PublishTarget.publish`), recorded in the bounded
publish log and logged in one line. An unchanged snapshot publishes nothing.
"""

from __future__ import annotations

import logging
import secrets
from typing import Protocol

import anyio

from rtr_server.publish_log import PublishLog, log_publish
from snapshot.publisher import PublishedState, Publisher, SessionIds
from snapshot.snapshot import Snapshot

__all__ = ["PublishClock", "PublishTarget", "Publishing"]

log = logging.getLogger(__name__)


class PublishTarget(Protocol):
    """Where published states go (the RTR server)."""

    @property
    def state(self) -> PublishedState | None:
        """What routers are served now (None before the first publish)."""

    def publish(self, state: PublishedState) -> None:
        """Make ``state`` what routers are served."""


class PublishClock(Protocol):
    """The two clocks a publish is stamped and timed with."""

    def wall(self) -> float:
        """UTC seconds."""

    def monotonic(self) -> float:
        """Seconds of a clock that never moves back."""


class Publishing:
    """Publishes snapshots to ``target`` through ``publisher``; counts and logs each publish."""

    def __init__(self, target: PublishTarget, publisher: Publisher, clock: PublishClock) -> None:
        """Publish nothing yet."""
        self.target = target
        self.publisher = publisher
        self.clock = clock
        #: Publishes so far (an unchanged snapshot is none).
        self.published = 0
        #: The most recent publishes (for /status and the dashboard).
        self.publishes = PublishLog()

    @property
    def current(self) -> PublishedState | None:
        """What routers are served now (None before the first publish)."""
        return self.target.state

    async def publish(self, snapshot: Snapshot) -> None:
        """Publish ``snapshot`` unless it equals what is served."""
        started = self.clock.monotonic()
        state = await anyio.to_thread.run_sync(self.publisher.publish, snapshot)
        if state is None:
            log.debug("rebuilt snapshot is unchanged; serial stays")
            return
        self.target.publish(state)
        self.published += 1
        self.publishes.record(
            state, wall=self.clock.wall(), duration=self.clock.monotonic() - started
        )
        log_publish(state, self.clock.monotonic() - started)

    def avoid_session_ids(self, previous: tuple[int, int, int]) -> None:
        """Routers must see a new session after recovery: redraw on a (rare) collision."""
        ids = self.publisher.session_ids
        while {ids.v0, ids.v1, ids.v2} & set(previous):
            ids = SessionIds.from_random(secrets.token_bytes(2))
        self.publisher.session_ids = ids
