"""Read-only follower of another process's SQLite state (``--state-reader``).

Polls the owner's header every ``poll`` seconds in a short read transaction; when the state id
changes it reads the whole state (digests checked) and publishes it through the app's own
publisher (own session ids, own serials). Entries expire on the follower as on the owner,
even when the owner is gone. Errors are logged once per kind and retried at the next poll;
the last good state keeps being served until it expires.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

from persistence.backend import PersistenceBackend
from persistence.errors import PersistenceError
from persistence.state import StateId
from rtr_server.recovery import ServedState, serve_at, served_state
from snapshot.slurm import EMPTY_POLICY, SlurmPolicy
from snapshot.snapshot import Snapshot
from upstream.clock import Clock

log = logging.getLogger(__name__)


@dataclass(slots=True)
class FollowerStatus:
    """Where the follower stands."""

    opened: bool = False
    state_id: StateId | None = None
    reads: int = 0
    errors: int = 0
    last_error: str | None = None


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
    ) -> None:
        """``backend`` is opened by `run` but owned (closed) by the caller.

        ``policy`` gives the SLURM policy in force (None: not valid yet, nothing is published).
        """
        self.backend = backend
        self.clock = clock
        self.publish = publish
        self.poll = poll
        self.status = FollowerStatus()
        #: The last state read, converted for serving.
        self._served: ServedState | None = None
        self._next_expiry: float | None = None
        self.policy = policy
        self._policy_changed = False

    def policy_changed(self) -> None:
        """Rebuild at the next poll (the SLURM policy changed)."""
        self._policy_changed = True

    async def run(self) -> None:
        """Follow until cancelled."""
        while True:
            changed = await self._look() or self._policy_changed
            due = self._next_expiry is not None and self.clock.wall() >= self._next_expiry
            policy = self.policy()
            served = self._served
            if served is not None and policy is not None and (changed or due):
                self._policy_changed = False
                wall = self.clock.wall()
                snapshot, self._next_expiry = await anyio.to_thread.run_sync(
                    functools.partial(serve_at, served, wall=wall, policy=policy)
                )
                await self.publish(snapshot)
            await anyio.sleep(self.poll)

    async def _look(self) -> bool:
        """Read the header (and the state when it moved); True if a new state was read."""
        try:
            if not self.status.opened:
                await self.backend.open()
                self.status.opened = True
                log.info("following state %s read-only", self.backend.store_id)
            header = await self.backend.read_header()
            if header is None or header.state_id == self.status.state_id:
                return False
            stored = await self.backend.read_state()
        except PersistenceError as exc:
            self.status.errors += 1
            if str(exc) != self.status.last_error:
                log.warning("state follower: %s (retrying every %.1f s)", exc, self.poll)
            self.status.last_error = str(exc)
            return False
        if stored is None:
            return False
        self._served = await anyio.to_thread.run_sync(served_state, *stored)
        self.status.state_id = stored[0].state_id
        self.status.reads += 1
        self.status.last_error = None
        log.info(
            "state follower: read state %s (owner serial %d, %d VRPs)",
            stored[0].state_id,
            stored[0].serial,
            stored[1].vrp_count(),
        )
        return True
