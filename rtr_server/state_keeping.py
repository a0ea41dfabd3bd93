"""`StateKeeping`: this process's own state file (``--state``): open and recover, commit, close.

Start-up runs in this order: owner lock and schema check (`ThreadedBackend.open`; a refusal ends
the start with the file untouched), read with digest checks (a damaged state is not served and
the first commit replaces it), time check, rebuild and publish (`recovery.plan_recovery`),
and only then does the caller start the network. Afterwards every published client snapshot is
converted (in a worker thread) and offered to the `Persister` under the next `StateId` of this
process's epoch, and `Handover` notes what was offered; `close` closes the store once and keeps
why that failed.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import anyio

from persistence.backend import ThreadedBackend
from persistence.errors import DamagedStateError
from persistence.location import StateLocation
from persistence.persister import Persister
from persistence.state import StateId
from rtr_server import __version__
from rtr_server.recovery import RecoveryPlan, SourceIdentity, build_state, plan_recovery
from rtr_server.shutdown import Handover, close_store
from snapshot.publisher import PublishedState
from snapshot.snapshot import Snapshot
from upstream.client import Client, ClientSnapshot

__all__ = ["StateKeeping"]

log = logging.getLogger(__name__)


class StateKeeping:
    """The backend, persister and state ids of one process's state file (memory-only: unused)."""

    def __init__(self, wall: Callable[[], float]) -> None:
        """Hold no store yet (`recover` or `open_reader` opens one)."""
        self.wall = wall
        #: The persistence backend (owned: closed by `close`); None when memory-only.
        self.backend: ThreadedBackend | None = None
        self.persister: Persister | None = None
        #: What the start-up recovered (None without ``--state`` or when the file was empty).
        self.recovery: RecoveryPlan | None = None
        #: Why closing the store failed (also in /status); None: it closed, or not yet.
        self.close_error: str | None = None
        #: What the app took from the client last and what it handed to the persister.
        self.handover: Handover[ClientSnapshot] = Handover()
        self._epoch = 0
        self._generation = 0

    def open_reader(self, location: StateLocation) -> ThreadedBackend:
        """The read-only backend of a follower (``--state-reader``); closed by `close`."""
        self.backend = location.make_backend(read_only=True, wall=self.wall)
        return self.backend

    async def recover(
        self,
        location: StateLocation,
        client: Client,
        publish: Callable[[Snapshot], Awaitable[None]],
        avoid_session_ids: Callable[[tuple[int, int, int]], None],
        monotonic: Callable[[], float],
    ) -> None:
        """Open the store (lock, schema), read and check it, seed ``client``, ``publish``.

        The caller closes the store (`close`) whatever happens; a refusal raises here.
        """
        backend = self.backend = location.make_backend(wall=self.wall)
        await backend.open()
        started = monotonic()
        damaged = None
        try:
            stored = await backend.read_state()  # any other read failure ends the start too
        except DamagedStateError as exc:
            # Rows that fail a check in a sound file: not served; the first commit replaces them.
            stored, damaged = None, await backend.read_header()
            log.error(
                "state %s holds a damaged state (%s): it is not used; starting from the network, "
                "and the first commit replaces it",
                location,
                exc,
            )
        persisted: StateId | None = None
        if stored is None:
            if damaged is None:
                log.info("state %s is empty: starting from the network", location)
            persisted = None if damaged is None else damaged.state_id
            self._epoch = 1 if damaged is None else damaged.state_id.epoch + 1
        else:
            header, state = stored
            persisted = header.state_id
            self._epoch = header.state_id.epoch + 1
            tolerance = client.config.clock_tolerance
            configured = [
                SourceIdentity(s.name, s.status.kind, s.status.location) for s in client.sources
            ]
            await client.slurm.check()  # the policy every published snapshot gets
            policy = client.slurm.policy
            plan = await anyio.to_thread.run_sync(
                lambda: plan_recovery(
                    header,
                    state,
                    configured,
                    wall=self.wall(),
                    clock_tolerance=tolerance,
                    policy=policy,
                )
            )
            self.recovery = plan
            if plan.trusted:
                # A time the state shows was reached: the effective time never goes below it.
                client.keeper.observe(header.written_at / 1e6)
            for note in plan.notes:
                log.info("recovery from %s: %s", location, note)
            for name, recovered in plan.recovered.items():
                client.seed(name, recovered)
            if plan.snapshot is not None:
                avoid_session_ids(header.session_ids)
                await publish(plan.snapshot)
                log.info(
                    "recovered state %s (serial %d, written %s) in %.2f s: serving %d VRPs "
                    "under a new session",
                    header.state_id,
                    header.serial,
                    datetime.fromtimestamp(header.written_at / 1e6, UTC).isoformat(),
                    monotonic() - started,
                    plan.snapshot.vrp_count,
                )
        self.persister = Persister(
            backend, path=str(location.path), persisted=persisted, wall=self.wall
        )

    async def offer(
        self, current: ClientSnapshot, published: PublishedState, client: Client
    ) -> None:
        """Offer ``current`` (served as ``published``) as the next state, and note it."""
        assert self.persister is not None
        assert self.backend is not None
        self._generation += 1
        state_id = StateId(self._epoch, self._generation)
        ids = published.session_ids
        keeper = client.keeper
        # The values are taken now; only the conversion of the payloads runs in the thread.
        state = await anyio.to_thread.run_sync(
            functools.partial(
                build_state,
                store_id=self.backend.store_id or "",
                state_id=state_id,
                config_revision=current.config_revision,
                serial=published.serial.value,
                session_ids=(ids.v0, ids.v1, ids.v2),
                published_wall=keeper.now(),
                package_version=__version__,
                inputs=current.inputs,
                observed_wall=max(keeper.now(), current.evaluated_at),
                evaluated_wall=current.evaluated_at,
            )
        )
        self.persister.offer(state)
        self.handover.note(current, state_id, published, self.persister.persisted)

    async def close(self, wait: float | None = None) -> None:
        """Close the store (idempotent); a call still running after ``wait`` s is interrupted."""
        if self.backend is not None:
            self.close_error = await close_store(self.backend, self.close_error, wait)
