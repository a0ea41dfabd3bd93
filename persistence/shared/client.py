"""`SharedSnapshotClient`: the read-only follower of an owner's SQLite state, as a library.

Contract (persistence contract, shared reading): the constructor does no I/O; entering the
context opens the file read-only (``mode=ro``, no schema created, no writer lock) and recovers
one complete state; ``await task_group.start(reader.run)`` polls the header (short read
transactions) and reloads on a new state id, and re-judges the held state on its own expiry
timer. One fixed owner thread serialises open, reads and close; snapshot builds (one header
candidate, one local-time calibration) run in the reader's own bounded build slots
(`BuildSlots`). `get_snapshot`, `get_status` and `get_metrics` run no SQL. `aclose` ends the
subscriptions, cancels polling, waits for the reads and builds, closes the connection on the
owner thread; beyond `CLOSE_DEADLINE` it reports ``cleanup_overdue`` and stays ``closing``
(another `aclose` retries).

What a snapshot holds: the writer's stored source payloads of the kinds each source was
selected for, judged at the reader's time. The store does not carry the owner's SLURM policy
(the owner re-applies its own on recovery), so the reader applies none: its snapshots are
the selected payloads before the owner's SLURM filters and assertions, never silently
"re-applied".
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Set as AbstractSet
from typing import Self

import anyio
from anyio.abc import TaskStatus

from persistence.errors import PersistenceError
from persistence.shared.build_slots import BuildPurpose, BuildSlots
from persistence.shared.convert import active_groups, floor_of
from persistence.shared.types import (
    ALL_AFIS,
    CLOSE_DEADLINE,
    Afi,
    ReaderState,
    SharedEvent,
    SharedMetrics,
    SharedReaderConfig,
    SharedSnapshot,
    SharedStatus,
    SharedWatch,
)
from persistence.sqlite_backend import SQLiteStore
from persistence.state import PersistedState, StateHeader, seconds_to_us
from persistence.worker_thread import WorkerThread
from snapshot.kinds import PayloadKind
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE, difference
from snapshot.queries import ResyncRequiredError

__all__ = ["SharedSnapshotClient"]

log = logging.getLogger(__name__)
#: The kinds `wait_ready` may ask for.
READY_KINDS = frozenset({PayloadKind.VRP, PayloadKind.ASPA})


def _diff(old: SharedSnapshot, new: SharedSnapshot) -> tuple[int, int]:
    added = removed = 0
    for a, b, width in (
        (old.snapshot.v4, new.snapshot.v4, V4_KEY_SIZE),
        (old.snapshot.v6, new.snapshot.v6, V6_KEY_SIZE),
    ):
        plus, minus = difference(a, b, width)
        added += len(plus) // width
        removed += len(minus) // width
    for was, now in (
        (set(old.snapshot.router_keys), set(new.snapshot.router_keys)),
        (set(old.snapshot.aspas), set(new.snapshot.aspas)),
    ):
        added += len(now - was)
        removed += len(was - now)
    return added, removed


def _ready(
    current: SharedSnapshot, wanted: frozenset[PayloadKind], families: frozenset[Afi], now: float
) -> bool:
    if PayloadKind.VRP in wanted and not current.usable(PayloadKind.VRP, now):
        return False
    return PayloadKind.ASPA not in wanted or all(current.aspa_usable(f, now) for f in families)


class SharedSnapshotClient:
    """Follows another process's SQLite state read-only and hands out immutable snapshots."""

    def __init__(self, config: SharedReaderConfig) -> None:
        """Remember ``config``; nothing is opened here."""
        self.config = config
        self._store = SQLiteStore(config.path, read_only=True)
        self._worker = WorkerThread("sqlite-shared-reader")
        self._state = ReaderState.CREATED
        self._held: tuple[StateHeader, PersistedState] | None = None
        self._current: SharedSnapshot | None = None
        self._error: str | None = None
        self._effective = 0.0
        self._watches: set[SharedWatch] = set()
        self._changed = anyio.Event()
        self._run_scope: anyio.CancelScope | None = None
        self._run_done: anyio.Event | None = None
        self._overdue = False
        self._closing: threading.Event | None = None
        #: Why closing the connection failed (kept for the next `aclose`).
        self.close_error: Exception | None = None
        self._builds = BuildSlots(config.limits.max_concurrent_builds)
        #: How long `aclose` waits for the polling task and for the owner thread (P-72).
        self._close_deadline = CLOSE_DEADLINE
        self._local_generation = 0
        self._counts = dict.fromkeys(
            ("polls", "poll_failures", "states_read", "header_builds", "calibrations", "stale"), 0
        )
        self._last_poll_at: float | None = None

    # ------------------------------------------------------------------ time
    def now(self) -> float:
        """The reader's effective time: the wall clock, never below any time it saw."""
        self._effective = max(self._effective, self.config.wall())
        return self._effective

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> Self:
        """Open read-only and recover one complete state (raises `PersistenceError`)."""
        if self._state is not ReaderState.CREATED:
            raise RuntimeError("a shared reader is entered once")
        try:
            await self._worker.run(
                self._store.call, self._store.open_sync, seconds_to_us(self.config.wall())
            )
            self._state = ReaderState.OPEN
            stored = await self._worker.run(self._store.call, self._store.read_state_sync)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.aclose()
            raise
        if stored is not None:
            await self._adopt(stored)
        return self

    async def __aexit__(self, *exc: object) -> None:
        """`aclose`; a close failure does not replace the body's own exception."""
        try:
            await self.aclose()
        except PersistenceError:
            if exc[0] is None:
                raise
            log.exception("shared reader: closing failed after another error")

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Poll the header and run the expiry timer until cancelled or closed."""
        if self._state is not ReaderState.OPEN:
            raise RuntimeError(f"run() needs an open reader (it is {self._state.value})")
        self._state = ReaderState.RUNNING
        self._run_done = anyio.Event()
        try:
            with anyio.CancelScope() as scope:
                self._run_scope = scope
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._expire, name="shared reader expiry")
                    task_status.started()
                    await self._poll()
        finally:
            self._run_done.set()
            if self._state is ReaderState.RUNNING:
                self._state = ReaderState.OPEN

    async def aclose(self) -> None:
        """End subscriptions, stop polling, close the connection on the owner thread.

        Waits at most `CLOSE_DEADLINE` for the polling task (and a build thread it waits for)
        and for the owner thread: beyond it the status reports ``cleanup_overdue`` and the
        reader stays ``closing`` (call again to wait on). A failed
        close raises it (`PersistenceError`) and keeps the owner thread and the connection for
        another `aclose`; the reader is ``closed`` only once the connection really is.
        """
        if self._state is ReaderState.CLOSED:
            return
        self._state = ReaderState.CLOSING
        for watch in list(self._watches):
            watch.close()
        self._signal()
        with anyio.CancelScope(shield=True):
            deadline = self._close_deadline
            if self._run_scope is not None and self._run_done is not None:
                self._run_scope.cancel()
                with anyio.move_on_after(deadline):
                    await self._run_done.wait()
                if not self._run_done.is_set():
                    self._overdue = True
                    log.error(
                        "shared reader: polling has not ended %g s later (a build still runs "
                        "in its thread, holding its slot); still closing",
                        deadline,
                    )
                    return
            if self._closing is None:
                self._closing = threading.Event()
                self.close_error = None
                self._worker.submit(functools.partial(self._close_sync, self._closing))
            if not await anyio.to_thread.run_sync(self._closing.wait, deadline):
                self._overdue = True
                log.error(
                    "shared reader: the connection is not closed %g s later (a read still "
                    "runs on the owner thread); still closing",
                    deadline,
                )
                return
            self._closing = None
            if self.close_error is not None:
                raise self.close_error
            self._overdue = not await self._worker.stop(deadline)
            if self._overdue:
                return
        self._state = ReaderState.CLOSED

    def _close_sync(self, done: threading.Event) -> None:
        """On the owner thread: close the connection; record a failure for `aclose`."""
        try:
            self._store.call(self._store.close_sync)
        except PersistenceError as exc:
            self.close_error = exc
        finally:
            done.set()

    # ------------------------------------------------------------------ faces
    def get_snapshot(self) -> SharedSnapshot | None:
        """The current immutable snapshot (None before any state was read); no SQL."""
        return self._current

    def get_status(self) -> SharedStatus:
        """An I/O-free sample: the writer followed, the last read failure, availability.

        ``ready`` means VRPs are usable; ``aspa_ready`` names each usable ASPA family.
        """
        current = self._current
        now = self.now()
        if current is None:
            return SharedStatus(
                state=self._state,
                store_id=None,
                epoch=None,
                generation=None,
                config_revision=None,
                persistence_error=self._error,
                available=False,
                ready_kinds=frozenset(),
                cleanup_overdue=self._overdue,
            )
        available = self._error is None or (
            current.usable_until is None or now < current.usable_until
        )
        return SharedStatus(
            state=self._state,
            store_id=current.store_id,
            epoch=current.epoch,
            generation=current.generation,
            config_revision=current.config_revision,
            persistence_error=self._error,
            available=available,
            ready_kinds=frozenset(k for k in PayloadKind if current.usable(k, now)),
            cleanup_overdue=self._overdue,
            upstream_id=current.upstream_id,
            ready=current.usable(PayloadKind.VRP, now),
            aspa_ready=frozenset(afi for afi in Afi if current.aspa_usable(afi, now)),
            usable_until_by_kind=dict(current.usable_until_by_kind),
            aspa_usable_until_by_afi=current.aspa_usable_until_by_afi,
            active_groups=dict(current.active_groups),
            local_generation=current.local_generation,
        )

    def get_metrics(self) -> SharedMetrics:
        """An I/O-free sample of the counters, the build slots and the held snapshot's size."""
        current, counts = self._current, self._counts
        return SharedMetrics(
            state=self._state,
            local_generation=self._local_generation,
            upstream_generation=None if current is None else current.generation,
            polls=counts["polls"],
            poll_failures=counts["poll_failures"],
            states_read=counts["states_read"],
            header_builds=counts["header_builds"],
            calibrations=counts["calibrations"],
            stale_calibrations=counts["stale"],
            max_concurrent_builds=self._builds.total,
            builds_running=self._builds.running,
            builds_waiting=self._builds.waiting,
            last_poll_at=self._last_poll_at,
            vrps=0 if current is None else current.snapshot.vrp_count,
            router_keys=0 if current is None else len(current.snapshot.router_keys),
            aspas=0 if current is None else len(current.snapshot.aspas),
            watchers=len(self._watches),
        )

    async def wait_ready(
        self, required: AbstractSet[PayloadKind], aspa_afi: Afi | None = None
    ) -> SharedSnapshot:
        """Wait until every kind in ``required`` (VRP, ASPA; explicit, non-empty) is usable.

        ASPA needs both families ready, each judged on its own, unless ``aspa_afi`` picks one.

        Raises:
            ValueError: ``required`` is empty or names another kind, or ``aspa_afi`` is no `Afi`.
        """
        wanted = frozenset(required)
        if not wanted or not wanted <= READY_KINDS:
            raise ValueError("required must be a non-empty set of PayloadKind.VRP / ASPA")
        if aspa_afi is not None and not isinstance(aspa_afi, Afi):
            raise ValueError("aspa_afi must be Afi.IPV4, Afi.IPV6 or None")
        families = ALL_AFIS if aspa_afi is None else frozenset({aspa_afi})
        while True:  # the caller bounds the wait (anyio.fail_after)
            if self._state in {ReaderState.CLOSING, ReaderState.CLOSED}:
                raise RuntimeError("the shared reader is closed")
            current, now = self._current, self.now()
            if current is not None and _ready(current, wanted, families, now):
                return current
            changed = self._changed
            with anyio.move_on_after(self.config.recheck):
                await changed.wait()

    def watch(self) -> SharedWatch:
        """A subscription whose first event is an atomic ``initial`` (if a state was read)."""
        if self._state in {ReaderState.CLOSING, ReaderState.CLOSED}:
            raise RuntimeError("the shared reader is closed")
        watch = SharedWatch.create(self._watches.discard, self.config.queue_size)
        if self._current is not None:
            watch.offer(SharedEvent("initial", self._current, None, self._current.version))
        self._watches.add(watch)
        return watch

    # ------------------------------------------------------------------ polling and expiry
    async def _poll(self) -> None:
        while True:
            await anyio.sleep(self.config.poll_interval)
            self._counts["polls"] += 1
            try:
                header = await self._worker.run(self._store.call, self._store.read_header_sync)
                held = self._held
                if header is None or (held is not None and header.state_id == held[0].state_id):
                    self._looked()
                    continue
                stored = await self._worker.run(self._store.call, self._store.read_state_sync)
            except PersistenceError as exc:
                self._counts["poll_failures"] += 1
                if str(exc) != self._error:
                    log.warning("shared reader: %s (retrying at the next poll)", exc)
                self._error = str(exc)
                self._signal()
                continue
            self._looked()
            if stored is not None:
                await self._adopt(stored)

    def _looked(self) -> None:
        self._last_poll_at = self.now()
        if self._error is not None:
            log.info("shared reader: reading %s again", self._store.path)
            self._error = None
            self._signal()

    async def _expire(self) -> None:
        while True:
            current = self._current
            until = None if current is None else current.usable_until
            delay = self.config.recheck
            if until is not None:
                delay = min(delay, max(0.0, until - self.now()))
            await anyio.sleep(delay)
            current, held = self._current, self._held
            if current is None or held is None or self._error is not None:
                continue  # after a read failure the old view only runs out
            if current.usable_until is not None and self.now() >= current.usable_until:
                await self._publish(held, BuildPurpose.CALIBRATION)

    # ------------------------------------------------------------------ building
    def _signal(self) -> None:
        """Wake the `wait_ready` callers (each change gets a fresh event)."""
        self._changed.set()
        self._changed = anyio.Event()

    async def _adopt(self, stored: tuple[StateHeader, PersistedState]) -> None:
        header, state = stored
        self._counts["states_read"] += 1
        self._effective = max(self._effective, floor_of(header, state))
        await self._publish(stored, BuildPurpose.HEADER)

    async def _publish(
        self, stored: tuple[StateHeader, PersistedState], purpose: BuildPurpose
    ) -> None:
        """Build ``stored`` at the reader's time in a build slot and publish it.

        A calibration (a local re-evaluation of the held state) is dropped when a new header
        was published while it ran: the timer looks again at the new snapshot. A header build
        overtaken by a calibration judged at a later time is built again at the reader's time,
        so it never brings back what that calibration withdrew. Events always diff against
        the snapshot published last: an expiry already reported is not reported again.
        """
        before = self._held
        header, state = stored
        while True:
            now = self.now()
            snapshot, until = await self._builds.build(purpose, state, now)
            if self._state in {ReaderState.CLOSING, ReaderState.CLOSED}:
                return  # a build that ended while the reader closes publishes nothing
            if purpose is BuildPurpose.CALIBRATION and self._held is not before:
                self._counts["stale"] += 1
                return
            published = self._current
            if purpose is BuildPurpose.CALIBRATION or published is None:
                break
            if published.evaluated_at <= now:
                break
            # A calibration published a later time while this header was built: judge the new
            # header again at least that late, so no entry it withdrew comes back.
        self._held = stored
        self._local_generation += 1
        new = SharedSnapshot(
            snapshot=snapshot,
            store_id=state.store_id,
            epoch=header.state_id.epoch,
            generation=header.state_id.generation,
            config_revision=header.config_revision,
            usable_until_by_kind=until,
            evaluated_at=now,
            clock=self.now,
            active_groups=active_groups(state),
            local_generation=self._local_generation,
        )
        self._counts["header_builds" if purpose is BuildPurpose.HEADER else "calibrations"] += 1
        old = self._current
        self._current = new
        self._signal()
        self._notify(old, new, "changed" if purpose is BuildPurpose.HEADER else "expired")

    def _notify(self, old: SharedSnapshot | None, new: SharedSnapshot, why: str) -> None:
        if old is None:
            for watch in list(self._watches):
                watch.offer(SharedEvent("initial", new, None, new.version))
            return
        if (old.store_id, old.epoch) != (new.store_id, new.epoch):
            error = ResyncRequiredError(
                f"the writer's publish identity changed ({old.store_id} epoch {old.epoch} -> "
                f"{new.store_id} epoch {new.epoch}): resynchronise"
            )
            for watch in list(self._watches):
                watch.fail(error)
            return
        kind = why
        if why == "changed" and new.generation - old.generation > 1:
            kind = "coalesced"
        added, removed = _diff(old, new)
        event = SharedEvent(kind, new, old.version, new.version, added, removed)
        for watch in list(self._watches):
            watch.offer(event)
