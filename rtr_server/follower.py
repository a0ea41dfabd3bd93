"""Read-only follower of another process's SQLite state (``--state-reader``).

Contract (persistence contract, "SQLite 共享"; lifecycle contract, "时间与到期"):

* The poll task looks at the owner's header every ``poll`` seconds (a short read transaction on
  the backend's worker thread); when the state id changes it reads the whole state (digests
  checked) and rebuilds. It is published through the app's own publisher (own session ids,
  own serials). Read errors are logged once per kind and retried at the next poll.
* Entries are judged at the follower's own effective time (`TimeKeeper.now`): never earlier
  than any time it has seen, nor than the write and observed times of a state it trusts,
  carried forward on its monotonic clock. A wall clock set back revives nothing; after a
  forward jump is undone, what expired stays expired.
* Each source also has its own anchor: its stored ``evaluated_at``, pinned to the monotonic
  clock when its representation was first read (`TimeKeeper.pin`); the same representation in
  a later state keeps it (a later ``evaluated_at`` raises it, none moves it back), a source
  that leaves the state loses it (the floor above stays). A source is judged at the larger of
  the effective time and its own anchor, never at another source's, and its next change point
  (the first expiry among the kinds it is selected for) is taken against that same time.
* Expiry runs on its own timer task, not in the poll: it wakes at the next expiry (effective
  time) and at least every ``recheck`` seconds (a wall clock jumped forward is acted upon within
  that), so neither a slow or blocked SQL read nor a writer that is gone delays it. A read
  failure keeps the last view only until its entries expire.
* Trust: a state whose write time is ahead of the raw wall clock by more than the clock
  tolerance is refused: nothing of it is served (what was served is withdrawn: the empty set is
  published), with one warning. It is trusted again once the wall clock is within the tolerance
  or a newer state passes the check. A refused state does not raise the time floor.
* Rebuilds (header, timer, SLURM policy) may overlap; each takes a sequence number when it
  starts (with the state, policy and time it judges), and only a view newer than the last one
  published is published. The publish callback is called one at a time.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import anyio
from anyio.abc import TaskStatus

from persistence.backend import PersistenceBackend
from persistence.errors import PersistenceError
from persistence.state import StateId
from snapshot.slurm import EMPTY_POLICY, SlurmPolicy
from snapshot.snapshot import EMPTY, Snapshot
from upstream.clock import Clock
from upstream.config import ClientConfig
from upstream.recovery import ServedState, serve_at, served_state
from upstream.timekeeper import Pinned, TimeKeeper

__all__ = ["DEFAULT_CLOCK_TOLERANCE", "FollowerStatus", "StateFollower"]

log = logging.getLogger(__name__)


def _client_clock_tolerance() -> float:
    for f in dataclasses.fields(ClientConfig):
        if f.name == "clock_tolerance" and isinstance(f.default, float):
            return f.default
    raise AssertionError("ClientConfig has no float default for clock_tolerance")


#: The upstream client's default ``clock_tolerance``: an owner and its followers use the same.
DEFAULT_CLOCK_TOLERANCE = _client_clock_tolerance()


@dataclass(slots=True)
class FollowerStatus:
    """Where the follower stands."""

    opened: bool = False
    state_id: StateId | None = None
    reads: int = 0
    errors: int = 0
    last_error: str | None = None
    #: False while the state read is refused (wall clock too far behind its write time).
    trusted: bool = True
    #: Views handed to the publish callback (the empty set of a withdrawal included).
    published: int = 0


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


class StateFollower:
    """Publishes the owner's state as it changes and as its entries expire."""

    def __init__(
        self,
        backend: PersistenceBackend,
        clock: Clock,
        publish: Callable[[Snapshot], Awaitable[None]],
        *,
        poll: float = 1.0,
        policy: Callable[[], SlurmPolicy | None] = lambda: EMPTY_POLICY,
        clock_tolerance: float = DEFAULT_CLOCK_TOLERANCE,
        recheck: float = 1.0,
    ) -> None:
        """``backend`` is opened by `run` but owned (closed) by the caller.

        ``policy`` gives the SLURM policy in force (None: not valid yet, nothing is published).
        ``clock_tolerance`` bounds how far the wall clock may be behind a state's write time;
        ``recheck`` is the longest the expiry timer sleeps between two looks at the clock.
        """
        if not recheck > 0:
            raise ValueError("recheck must be positive")
        self.backend = backend
        self.clock = clock
        #: The follower's effective time: its own floor, raised by each trusted write time.
        self.keeper = TimeKeeper(clock, tolerance=clock_tolerance)
        self.publish = publish
        self.poll = poll
        self.recheck = recheck
        self.status = FollowerStatus()
        self.policy = policy
        #: The last state read, converted for serving.
        self._served: ServedState | None = None
        self._policy_changed = False
        self._wake: anyio.Event | None = None
        #: Rebuilds started / the sequence number of the last view published.
        self._started = 0
        self._published_seq = 0
        self._published_any = False
        self._publish_lock: anyio.Lock | None = None
        #: The view published last: its state, whether that state was refused, and each
        #: source's next change point on its own time (a source absent: nothing expires).
        self._view_served: ServedState | None = None
        self._view_refused = False
        self._changes: dict[str, float] = {}
        #: Each source's representation and own anchor (see the module docstring).
        self._anchors: dict[str, tuple[bytes, Pinned]] = {}

    def policy_changed(self) -> None:
        """Rebuild now (the SLURM policy changed)."""
        self._policy_changed = True
        if self._wake is not None:
            self._wake.set()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Follow until cancelled: the poll and the expiry timer, in a task group owned here."""
        self._wake = anyio.Event()
        self._publish_lock = anyio.Lock()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._expire, name="state follower expiry")
            task_status.started()
            await self._poll()

    # ------------------------------------------------------------------ the two tasks
    async def _poll(self) -> None:
        while True:
            if await self._look():
                await self._rebuild()
            await anyio.sleep(self.poll)

    async def _expire(self) -> None:
        while True:
            if self._due():
                await self._rebuild()
                continue
            assert self._wake is not None
            with anyio.move_on_after(self._delay()):
                await self._wake.wait()
            self._wake = anyio.Event()

    def _refused(self, served: ServedState) -> bool:
        return self.keeper.behind(served.written) > self.keeper.tolerance

    def _due(self) -> bool:
        """Whether the view published last is out of date (the poll rebuilds new states)."""
        served = self._served
        if served is None or self.policy() is None:
            return False
        if self._policy_changed:
            return True
        if served is not self._view_served:
            return False  # the poll task is building this state's first view
        if self._refused(served) != self._view_refused:
            return True
        return any(self._at(name) >= at for name, at in self._changes.items())

    def _delay(self) -> float:
        if not self._changes or self._view_refused:
            return self.recheck
        ahead = min(at - self._at(name) for name, at in self._changes.items())
        return min(self.recheck, max(0.0, ahead))

    def _at(self, name: str) -> float:
        """The time source ``name`` is judged at now (its own anchor or the effective time)."""
        kept = self._anchors.get(name)
        return self.keeper.at(None if kept is None else kept[1])

    def _anchor(self, served: ServedState) -> dict[str, float]:
        """Pin each source of ``served`` (see the module docstring); their times now."""
        anchors: dict[str, tuple[bytes, Pinned]] = {}
        for source in served.sources:
            kept = self._anchors.get(source.name)
            same = kept[1] if kept is not None and kept[0] == source.content else None
            anchors[source.name] = (source.content, self.keeper.pin(source.evaluated, same))
        self._anchors = anchors
        return {name: self.keeper.at(pinned) for name, (_, pinned) in anchors.items()}

    # ------------------------------------------------------------------ rebuild and publish
    async def _rebuild(self) -> None:
        """Judge the current state at the current time; publish it unless a newer view was."""
        served = self._served
        policy = self.policy()
        if served is None or policy is None:
            return
        self._policy_changed = False
        self._started += 1
        seq = self._started
        wall = self.keeper.wall()
        refused = self._refused(served)
        snapshot: Snapshot | None = None
        changes: dict[str, float] = {}
        if not refused:
            self.keeper.observe(served.floor)
            own = self._anchor(served)
            now = self.keeper.now()
            snapshot, changes = await anyio.to_thread.run_sync(
                functools.partial(serve_at, served, now=now, policy=policy, own=own)
            )
        assert self._publish_lock is not None
        async with self._publish_lock:
            if seq <= self._published_seq:
                return  # a rebuild that started later (newer state or time) was published
            self._published_seq = seq
            was_refused = self._view_refused
            logged = was_refused and self._view_served is served
            self._view_served = served
            self._view_refused = refused
            self._changes = changes
            self.status.trusted = not refused
            if refused and not logged:
                self._log_refusal(served, wall)
            elif was_refused and not refused:
                log.info(
                    "state follower: the wall clock (%s) is within the %.0f s tolerance of the "
                    "write time (%s) of state %s: serving it",
                    _utc(wall),
                    self.keeper.tolerance,
                    _utc(served.written),
                    served.state_id,
                )
            if snapshot is None:
                snapshot = EMPTY  # refused: withdraw what was served
            if snapshot.is_empty() and not self._published_any:
                return  # nothing was served: nothing to withdraw
            self._published_any = True
            self.status.published += 1
            await self.publish(snapshot)

    def _log_refusal(self, served: ServedState, wall: float) -> None:
        log.warning(
            "state follower: the wall clock (%s) is %.0f s behind the write time (%s) of state "
            "%s, beyond the %.0f s clock tolerance: nothing of it is served%s until the clock is "
            "within the tolerance or a newer state passes",
            _utc(wall),
            served.written - wall,
            _utc(served.written),
            served.state_id,
            self.keeper.tolerance,
            ", what was served is withdrawn" if self._published_any else "",
        )

    # ------------------------------------------------------------------ reading
    def _recovered_from_error(self) -> None:
        """A successful read clears the error shown in the status (and says so once)."""
        if self.status.last_error is not None:
            log.info("state follower: reading %s again", self.backend.store_id)
            self.status.last_error = None

    async def _look(self) -> bool:
        """Read the header (and the state when it moved); True if a new state was read."""
        try:
            if not self.status.opened:
                await self.backend.open()
                self.status.opened = True
                log.info("following state %s read-only", self.backend.store_id)
            header = await self.backend.read_header()
            if header is None or header.state_id == self.status.state_id:
                self._recovered_from_error()
                return False
            stored = await self.backend.read_state()
        except PersistenceError as exc:
            self.status.errors += 1
            if str(exc) != self.status.last_error:
                log.warning(
                    "state follower: %s (retrying every %.1f s; the last view serves only "
                    "until its entries expire)",
                    exc,
                    self.poll,
                )
            self.status.last_error = str(exc)
            return False
        if stored is None:
            return False
        served = await anyio.to_thread.run_sync(served_state, *stored)
        self._served = served
        self.status.state_id = stored[0].state_id
        self.status.reads += 1
        self.status.last_error = None
        log.info(
            "state follower: read state %s (owner serial %d, %d VRPs, written %s)",
            stored[0].state_id,
            stored[0].serial,
            stored[1].vrp_count(),
            _utc(served.written),
        )
        return True
