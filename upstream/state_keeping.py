"""`StateKeeping`: the client's state (`ClientConfig.state` or ``backend``): open, recover, commit.

The backend is the one the client builds from its `StateLocation` (it gets the configured
`Limits`, and a changed value from its next transaction on, P-08) or one the host injected
(any synchronous `PersistenceBackend`: it keeps its own limits, never overridden); either runs
in a `ThreadedBackend`, on the client's own worker thread.

`Client.__aenter__` runs `open` in this order: owner lock and schema check
(`ThreadedBackend.open`; a refusal ends the start with the file untouched and the store closed),
read with digest checks (a damaged state is not served and the first commit replaces it), time
check and rebuild (`recovery.plan_recovery`): the sources are seeded and the recovered snapshot
is kept for the host to publish before any network. Afterwards every snapshot the client
delivers is converted (in a worker thread) and offered to the `Persister` under the next
`StateId` of this process's epoch, and `Handover` notes what was offered; `close` closes the
store and keeps why that failed, so that a later `close` retries it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from importlib import metadata
from typing import Protocol

import anyio

from persistence.backend import ThreadedBackend
from persistence.errors import DamagedStateError
from persistence.limits import Limits
from persistence.location import StateLocation
from persistence.persister import Persister
from persistence.protocol import PersistenceBackend
from persistence.state import StateHeader, StateId
from snapshot.kinds import PayloadKind
from snapshot.slurm import SlurmPolicy
from upstream.closing import Handover, Offered, Publication, close_store
from upstream.events import ClientSnapshot
from upstream.merge import SourceInput
from upstream.recovery import (
    NOTHING_CONFIGURED,
    Configured,
    RecoveryPlan,
    SourceIdentity,
    build_state,
    plan_recovery,
)
from upstream.source_entry import Recovered

__all__ = ["PACKAGE_VERSION", "Seedable", "StateKeeping"]

log = logging.getLogger(__name__)


def _package_version() -> str:
    try:
        return metadata.version("rtr-serve")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "0+unknown"


#: The version stored with every state (``package_version``).
PACKAGE_VERSION = _package_version()


class Seedable(Protocol):
    """What recovery needs of the client it recovers into (narrow: no import of the client)."""

    @property
    def clock_tolerance(self) -> float:
        """Wall-clock drift tolerated before a state's time is distrusted."""
        ...

    def configured(self) -> Sequence[SourceIdentity]:
        """The configured sources' identities."""
        ...

    async def policy(self) -> SlurmPolicy | None:
        """The SLURM policy every published snapshot gets (the files read once)."""
        ...

    def observe(self, wall: float) -> None:
        """A UTC time the state shows was reached (the effective time never goes below it)."""
        ...

    def seed(self, name: str, recovered: Recovered) -> None:
        """Give source ``name`` a payload restored from the state."""
        ...


class Keeper(Protocol):
    """The client's effective UTC clock (never moving back)."""

    def now(self) -> float:
        """The effective UTC time."""
        ...


class StateKeeping:
    """The backend, persister and state ids of one client's state file."""

    def __init__(
        self,
        location: StateLocation | None,
        wall: Callable[[], float],
        limits: Limits | None = None,
        *,
        injected: PersistenceBackend | None = None,
    ) -> None:
        """Hold no store yet; exactly one of ``location`` and ``injected`` is given.

        `open` builds a backend at ``location`` (bounded by ``limits``) or opens the host's
        ``injected`` one (its own limits stay).
        """
        if (location is None) == (injected is None):
            raise ValueError("give a state location or an injected backend (exactly one)")
        self.location = location
        self.injected = injected
        self.wall = wall
        self.limits = limits
        #: The persistence backend (owned: closed by `close`); None before `open`.
        self.backend: ThreadedBackend | None = None
        self.persister: Persister | None = None
        #: What the start-up recovered (None before `open` or when the file was empty).
        self.recovery: RecoveryPlan | None = None
        #: The header of the state recovered from (None: none was).
        self.recovered_header: StateHeader | None = None
        #: The configuration revision the file held when it was opened (None: no state).
        self.stored_revision: int | None = None
        #: Why closing the store failed (also in /status); None: it closed, or not yet.
        self.close_error: str | None = None
        #: What the client delivered last and what it handed to the persister.
        self.handover: Handover[ClientSnapshot] = Handover()
        self._epoch = 0
        self._generation = 0
        #: Offers take their generation and reach the persister in one order (`offer`).
        self._offering: anyio.Lock | None = None

    @classmethod
    def configured(
        cls,
        location: StateLocation | None,
        injected: PersistenceBackend | None,
        wall: Callable[[], float],
        limits: Limits | None,
    ) -> StateKeeping | None:
        """The keeping of a client configured with ``location`` or ``injected`` (None: memory)."""
        if location is None and injected is None:
            return None
        return cls(location, wall, limits, injected=injected)

    async def open(self, client: Seedable, monotonic: Callable[[], float]) -> None:
        """Open the store (lock, schema), read and check it, seed ``client``.

        On any failure the store is closed again before the error propagates (the file is
        left as it was); a refusal (another owner, an unknown schema) raises here.
        """
        if self.injected is not None:
            backend = self.backend = ThreadedBackend(self.injected)
        else:
            assert self.location is not None
            backend = self.location.make_backend(wall=self.wall, limits=self.limits)
            self.backend = backend
        try:
            await backend.open()
            await self._recover(backend, client, monotonic)
        except BaseException:
            await self.close()
            raise

    async def _recover(
        self, backend: ThreadedBackend, client: Seedable, monotonic: Callable[[], float]
    ) -> None:
        location = self.where
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
            self.stored_revision = header.config_revision
            self._epoch = header.state_id.epoch + 1
            tolerance = client.clock_tolerance
            configured = client.configured()
            policy = await client.policy()
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
                client.observe(header.written_at / 1e6)
            for note in plan.notes:
                log.info("recovery from %s: %s", location, note)
            for name, recovered in plan.recovered.items():
                client.seed(name, recovered)
            if plan.snapshot is not None:
                self.recovered_header = header
                log.info(
                    "recovered state %s (serial %d, written %s) in %.2f s: serving %d VRPs",
                    header.state_id,
                    header.serial,
                    datetime.fromtimestamp(header.written_at / 1e6, UTC).isoformat(),
                    monotonic() - started,
                    plan.snapshot.vrp_count,
                )
        path = "" if self.location is None else str(self.location.path)
        self.persister = Persister(backend, path=path, persisted=persisted, wall=self.wall)

    async def offer(
        self,
        current: ClientSnapshot,
        published: Publication,
        keeper: Keeper,
        configured: Configured = NOTHING_CONFIGURED,
    ) -> None:
        """Offer ``current`` (delivered as ``published``) as the next state, and note it.

        The ``configured`` sources without a payload in it are stored as placeholders, with
        every configured group and the configuration's identity; its SLURM policy is stored
        when ``current`` was judged under it (the same policy id).
        """
        async with self._lock():
            state_id = await self._offer(
                config_revision=current.config_revision,
                serial=published.serial,
                session_ids=published.session_ids,
                keeper=keeper,
                inputs=current.inputs,
                evaluated_at=current.evaluated_at,
                configured=configured,
                active=current.active,
                policy_id=current.policy_id,
            )
            assert self.persister is not None
            self.handover.note(current, state_id, published, self.persister.persisted)

    async def offer_without_data(
        self,
        config_revision: int,
        keeper: Keeper,
        configured: Configured,
        *,
        unless: Callable[[], bool],
    ) -> StateId | None:
        """Offer the data-less state of configuration ``config_revision`` (P-57).

        Every ``configured`` source (taken with the revision: never another configuration's)
        is a placeholder: a configuration change is stored (its
        revision, the sources it removed gone, the ones it added present) also while no
        source has data. Nothing is handed to the host for it and nothing is noted as
        served; the next snapshot with data follows under a later id. Skipped (None) when
        ``unless()`` holds once it is this offer's turn: a snapshot with data was published
        meanwhile, and no data-less state may follow it.
        """
        async with self._lock():
            if unless():
                return None
            state_id = await self._offer(
                config_revision=config_revision,
                serial=0,
                session_ids=(0, 0, 0),
                keeper=keeper,
                inputs=(),
                evaluated_at=keeper.now(),
                configured=configured,
            )
            # The close waits for it as for any offer (it was served as nothing: serial 0).
            offer = Offered(state_id, serial=0, vrps=0)
            self.handover.last = offer
            self.handover.offers[state_id] = offer
            return state_id

    def _lock(self) -> anyio.Lock:
        if self._offering is None:
            self._offering = anyio.Lock()
        return self._offering

    async def _offer(
        self,
        *,
        config_revision: int,
        serial: int,
        session_ids: tuple[int, int, int],
        keeper: Keeper,
        inputs: Sequence[SourceInput],
        evaluated_at: float,
        configured: Configured,
        active: Mapping[PayloadKind, str | None] | None = None,
        policy_id: str | None = None,
    ) -> StateId:
        """Build the next state under the next id (off the loop) and offer it; its id."""
        assert self.persister is not None
        assert self.backend is not None
        self._generation += 1
        state_id = StateId(self._epoch, self._generation)
        store_id = self.backend.store_id or ""
        policy_json = configured.policy_json if configured.policy_id == policy_id else None
        # The values are taken now; only the conversion of the payloads runs in the thread.
        state = await anyio.to_thread.run_sync(
            functools.partial(
                build_state,
                store_id=store_id,
                state_id=state_id,
                config_revision=config_revision,
                serial=serial,
                session_ids=session_ids,
                published_wall=keeper.now(),
                package_version=PACKAGE_VERSION,
                inputs=inputs,
                observed_wall=max(keeper.now(), evaluated_at),
                evaluated_wall=evaluated_at,
                recovered_from=(
                    None if self.recovered_header is None else self.recovered_header.state_id
                ),
                placeholders=configured.placeholders,
                active=active,
                policy_id=policy_id,
                policy_json=policy_json,
                groups=configured.groups,
                config_store_id=store_id,
                config_epoch=self._epoch,
                config_identity=configured.identity,
            )
        )
        self.persister.offer(state)
        return state_id

    @property
    def where(self) -> str:
        """The state as the log names it: its location, or the injected backend's name."""
        if self.location is not None:
            return str(self.location)
        assert self.injected is not None
        return f"{self.injected.capabilities.backend_name} (host-injected backend)"

    async def set_limits(self, limits: Limits | None) -> None:
        """New bounds for the store's reads, from its next transaction on (P-08, P-58).

        Only a backend the client built gets them: an injected one keeps its own. Lowered
        bounds are refused (`ValueError`, the old ones stay) while the commit running now or
        an unconfirmed one is over them (`Persister.check_limits`): checked before they are
        queued, and again once the backend took them (a commit that started in between),
        when the old ones are put back.
        """
        backend, persister = self.backend, self.persister
        if self.injected is not None or backend is None or not backend.is_open:
            self.limits = limits
            return
        new = Limits() if limits is None else limits
        old = backend.limits
        if persister is not None and (reason := persister.check_limits(new)) is not None:
            raise ValueError(f"limits: refused, {reason}; the old limits stay")
        await backend.set_limits(new)
        if persister is not None and (reason := persister.check_limits(new)) is not None:
            if old is not None:
                await backend.set_limits(old)
            raise ValueError(f"limits: refused, {reason}; the old limits stay")
        self.limits = limits

    async def close(self, wait: float | None = None) -> None:
        """Close the store; a failed close is kept and the next call retries it.

        A call still running after ``wait`` s is interrupted.
        """
        if self.backend is not None:
            self.close_error = await close_store(self.backend, self.close_error, wait)

    @property
    def epoch(self) -> int:
        """This process's epoch of the file: one above the stored state's (known after `open`)."""
        return self._epoch

    @property
    def persisted_revision(self) -> int | None:
        """The configuration revision of the state the file holds, as far as is confirmed."""
        receipt = None if self.persister is None else self.persister.last_receipt
        return self.stored_revision if receipt is None else receipt.config_revision

    @property
    def closed(self) -> bool:
        """The store was closed (or never opened)."""
        return self.backend is None or self.backend.closed
