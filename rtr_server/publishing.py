"""`Publishing`: a snapshot becomes what routers are served (publisher, server, publish log).

The publisher's rule (serial, net delta, diff log; `snapshot.publisher.Publisher`) runs in a
worker thread, since the delta of a large table takes a fraction of a second; the new state is
swapped into the server in one assignment (`PublishTarget.publish`), recorded in the bounded
publish log and logged in one line. An unchanged snapshot publishes nothing.
"""

from __future__ import annotations

import logging
from typing import Protocol

import anyio

from rtr_server.continuity import fresh_session_ids
from rtr_server.publish_log import PublishLog, log_publish
from snapshot.publisher import Continuation, PublishedState, Publisher
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
        offered = self.publisher.continuation
        state = await anyio.to_thread.run_sync(self.publisher.publish, snapshot)
        if state is None:
            log.debug("rebuilt snapshot is unchanged; serial stays")
            return
        if offered is not None:
            _log_continuation(offered, continued=self.publisher.continued)
        self.target.publish(state)
        self.published += 1
        self.publishes.record(
            state, wall=self.clock.wall(), duration=self.clock.monotonic() - started
        )
        log_publish(state, self.clock.monotonic() - started)

    def avoid_session_ids(self, previous: tuple[int, int, int]) -> None:
        """Routers must see a new session after recovery: redraw on a (rare) collision.

        The ids of a continuation (`snapshot.Continuation`) stay avoided as well.
        """
        ids = self.publisher.session_ids
        avoid = set(previous)
        if (continued := self.publisher.continuation) is not None:
            avoid |= set(continued.session_ids.values)
        if set(ids.values) & avoid:
            self.publisher.session_ids = fresh_session_ids(avoid)


def _log_continuation(offered: Continuation, *, continued: bool) -> None:
    ids = offered.session_ids
    named = f"session ids {ids.v0}/{ids.v1}/{ids.v2} (v0/v1/v2), serial {offered.serial}"
    if continued:
        log.info(
            "restart: the same content as the previous image served: continuing its %s; "
            "routers kept through the restart keep their data",
            named,
        )
    else:
        log.info(
            "restart: other content than the previous image served at its %s: new session ids",
            named,
        )
