"""Runs sources in prioritised groups, picks the active group per payload kind, merges, publishes.

Each payload kind (VRPs, ASPAs, router keys) comes from its own active group, chosen by
`upstream.selection.GroupSelector` (failover at once, fail-back after ``failback_delay``, lower
groups started lazily). Within a group the payloads of its synced sources are merged (union;
ASPA union per customer). A group counts as ready only once every one of its sources has made
its first attempt (loaded, found missing, or failed), so a router is never served a half-loaded
union at start. Every new payload, every group change and every moment an entry reaches its
``expires`` produces a fresh snapshot; the callback decides whether it differs from what is
published. Merging runs in a worker thread.

Sources tell what they can deliver with an optional ``capabilities`` attribute (default: every
kind; an RTR source at v1 has no ASPA) and whether their data is still valid with an optional
``has_data`` attribute (default: once they emitted a payload); see `Source`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import anyio
from anyio.abc import TaskGroup, TaskStatus

from snapshot.model import Aspa
from snapshot.slurm import EMPTY_POLICY, SlurmPolicy
from snapshot.slurm_apply import apply_policy
from snapshot.snapshot import Snapshot, SnapshotBuilder
from upstream.clock import Clock, SystemClock
from upstream.json_format import SourcePayload
from upstream.selection import ALL_KINDS, GroupSelector, GroupSpec, PayloadKind, SourceView
from upstream.status import SourceStatus

log = logging.getLogger(__name__)

#: Do not rebuild more often than this when entries expire one after another.
MIN_EXPIRY_WAKE = 1.0
#: How often readiness is re-checked while sources have not reported their first attempt.
READY_POLL = 0.2
#: Wall-clock drift against the monotonic clock tolerated before online sources are distrusted.
DEFAULT_CLOCK_TOLERANCE = 300.0
#: Source kinds whose data depends on a live upstream (distrusted after a clock jump).
ONLINE = frozenset({"http", "rtr"})
#: The group made for sources given without one (``--source`` on the command line).
IMPLICIT_GROUP = GroupSpec("default", priority=0, startup_timeout=0.0, failback_delay=0.0)


@dataclass(frozen=True, slots=True)
class SourceInput:
    """One source's payload as used for a build, with what persistence needs to restore it."""

    name: str
    group: str
    kind: str
    location: str
    capabilities: frozenset[PayloadKind]
    #: The payload kinds for which this source's group is active.
    selected: frozenset[PayloadKind]
    payload: SourcePayload
    #: Wall time the payload was accepted (for a recovered payload: when it was first accepted).
    accepted_wall: float
    #: Wall time after which none of this payload is valid (an RTR source's Expire interval).
    expires_wall: float | None = None
    rtr_session: int | None = None
    rtr_serial: int | None = None


@dataclass(frozen=True, slots=True)
class Recovered:
    """A payload restored from persisted state, seeded into a source before it runs."""

    payload: SourcePayload
    #: When the payload was first accepted (wall, Unix seconds).
    accepted_wall: float
    #: Never judge this payload at a wall time earlier than this (the state's write time).
    not_before_wall: float


class Source(Protocol):
    """What the aggregator needs from a source."""

    name: str
    status: SourceStatus

    async def run(self, sink: Callable[[str, SourcePayload], None]) -> None:
        """Run until cancelled, calling ``sink`` with each new complete payload."""
        ...


@dataclass(frozen=True, slots=True)
class Group:
    """A group spec with its sources."""

    spec: GroupSpec
    sources: tuple[Source, ...]


def merge_at(payloads: Sequence[SourcePayload], now: int) -> Snapshot:
    """The union of the entries of ``payloads`` that are valid at ``now``."""
    timed = [(p, now) for p in payloads]
    return merge_by_kind(dict.fromkeys(PayloadKind, timed))


Timed = tuple[SourcePayload, int]  # a payload and the time its entries are judged at


def merge_by_kind(payloads: dict[PayloadKind, list[Timed]]) -> Snapshot:
    """One snapshot whose VRPs, ASPAs and router keys each come from their own payloads."""
    merged: dict[PayloadKind, Snapshot] = {}
    by_id: dict[tuple[tuple[int, int], ...], Snapshot] = {}
    for kind, chosen in payloads.items():
        key = tuple((id(p), now) for p, now in chosen)
        if key not in by_id:
            snapshots = [p.snapshot_at(now) for p, now in chosen]
            if len(snapshots) == 1:
                by_id[key] = snapshots[0]
            else:
                builder = SnapshotBuilder()
                for snap in snapshots:
                    builder.update(snap)
                by_id[key] = builder.build()
        merged[kind] = by_id[key]
    vrps = merged[PayloadKind.VRP]
    aspas: tuple[Aspa, ...] = merged[PayloadKind.ASPA].aspas
    return Snapshot(vrps.v4, vrps.v6, merged[PayloadKind.ROUTER_KEY].router_keys, aspas)


def merge_and_apply(payloads: dict[PayloadKind, list[Timed]], policy: SlurmPolicy) -> Snapshot:
    """`merge_by_kind`, then the SLURM ``policy`` (filters, then assertions)."""
    return apply_policy(policy, merge_by_kind(payloads))


def _capabilities(source: Source) -> frozenset[PayloadKind]:
    caps = getattr(source, "capabilities", None)
    return ALL_KINDS if caps is None else frozenset(caps)


class Aggregator:
    """Owns the source tasks; calls ``on_snapshot`` with each rebuilt snapshot."""

    def __init__(
        self,
        sources: Sequence[Source],
        on_snapshot: Callable[[Snapshot], Awaitable[None]],
        *,
        clock: Clock | None = None,
        groups: Sequence[Group] | None = None,
        clock_tolerance: float = DEFAULT_CLOCK_TOLERANCE,
        slurm_policy: Callable[[], SlurmPolicy | None] | None = None,
    ) -> None:
        """Give either ``sources`` (one implicit group) or ``groups``; nothing runs until `run`.

        ``slurm_policy`` gives the SLURM policy in force for each build; while it gives None
        (SLURM files configured but not valid yet) nothing is built. Call `poke` when it changes.
        """
        if groups is None:
            groups = [Group(IMPLICIT_GROUP, tuple(sources))]
        elif sources:
            raise ValueError("give sources or groups, not both")
        self.groups = list(groups)
        self.sources = [s for g in self.groups for s in g.sources]
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise ValueError(f"source names must be unique: {names}")
        self._group_of = {s.name: g.spec.name for g in self.groups for s in g.sources}
        self.selector = GroupSelector(g.spec for g in self.groups)
        self.on_snapshot = on_snapshot
        self.clock = clock or SystemClock()
        self.payloads: dict[str, SourcePayload] = {}
        #: (wall, monotonic) time each source's current payload was accepted.
        self._anchors: dict[str, tuple[float, float]] = {}
        #: Sources distrusted after a clock jump, with their sync count at that moment.
        self._untrusted: dict[str, int] = {}
        self.clock_tolerance = clock_tolerance
        #: A clock frozen on purpose (--reference-time) has no drift to watch.
        self._frozen = bool(getattr(self.clock, "frozen", False))
        self._changed = anyio.Event()
        self._started: set[str] = set()
        #: Wall time at which the first served entry expires (None: none does).
        self.next_expiry_wall: float | None = None
        #: Called after every selection round (active groups or source states may have moved).
        self.on_status: Callable[[], None] | None = None
        self.active: dict[PayloadKind, str | None] = dict.fromkeys(PayloadKind)
        self.builds = 0
        self.slurm_policy = slurm_policy
        #: Sources holding a recovered payload (counted as having data) until they deliver.
        self._recovered: set[str] = set()
        self._accepted_wall: dict[str, float] = {}

    def seed(self, name: str, recovered: Recovered) -> None:
        """Give source ``name`` a recovered payload before `run` (used until it delivers).

        It is judged at the wall time, never earlier than ``not_before_wall`` plus the
        monotonic time elapsed since; its entries keep their own expiry.
        """
        if name not in self._group_of:
            raise ValueError(f"no source {name!r} to seed")
        self.payloads[name] = recovered.payload
        wall = max(self.clock.wall(), recovered.not_before_wall)
        self._anchors[name] = (wall, self.clock.monotonic())
        self._accepted_wall[name] = recovered.accepted_wall
        self._recovered.add(name)
        self._changed.set()

    def inputs(self) -> tuple[SourceInput, ...]:
        """The payloads of the sources whose group is active for some kind, as built now."""
        result = []
        for source in self.sources:
            name = source.name
            if name not in self.payloads or not self._has_data(source):
                continue
            group = self._group_of[name]
            caps = _capabilities(source)
            selected = frozenset(k for k in caps if self.active.get(k) == group)
            if not selected:
                continue
            info = getattr(source, "persist_info", None)
            expires, session, serial = info() if callable(info) else (None, None, None)
            result.append(
                SourceInput(
                    name=name,
                    group=group,
                    kind=source.status.kind,
                    location=source.status.location,
                    capabilities=caps,
                    selected=selected,
                    payload=self.payloads[name],
                    accepted_wall=self._accepted_wall.get(name, self._anchors[name][0]),
                    expires_wall=expires,
                    rtr_session=session,
                    rtr_serial=serial,
                )
            )
        return tuple(result)

    def started_groups(self) -> set[str]:
        """Names of the groups whose sources run."""
        return set(self._started)

    def hand_over(self, name: str, other: Aggregator) -> None:
        """Give ``other`` this aggregator's payload of source ``name`` and its acceptance time."""
        if name in self.payloads:
            other.payloads[name] = self.payloads[name]
            other._anchors[name] = self._anchors[name]
            if name in self._accepted_wall:
                other._accepted_wall[name] = self._accepted_wall[name]
            if name in self._recovered:
                other._recovered.add(name)

    def poke(self) -> None:
        """Re-evaluate now (e.g. after a test moved the clock, or a source changed state)."""
        self._changed.set()

    def _accept(self, name: str, payload: SourcePayload) -> None:
        self.payloads[name] = payload
        self._anchors[name] = (self.clock.wall(), self.clock.monotonic())
        self._accepted_wall.pop(name, None)
        self._recovered.discard(name)
        self._untrusted.pop(name, None)
        self._changed.set()

    def _has_data(self, source: Source) -> bool:
        distrusted_at = self._untrusted.get(source.name)
        if distrusted_at is not None:
            if source.status.syncs <= distrusted_at:
                return False
            # It reached its upstream again under the new clock (an unchanged answer counts):
            # from now on its data is judged against the clock as it is now.
            del self._untrusted[source.name]
            if source.name in self._anchors:
                self._anchors[source.name] = (self.clock.wall(), self.clock.monotonic())
            log.info("source %s synced again after the clock jump: trusted", source.name)
        if source.name in self._recovered:
            return True
        flag = getattr(source, "has_data", None)
        return source.name in self.payloads if flag is None else bool(flag)

    def _views(self) -> list[SourceView]:
        views: list[SourceView] = []
        for group in self.groups:
            # A recovered payload stands for a first attempt: serve it without waiting.
            all_attempted = all(
                s.status.attempted or s.name in self._recovered for s in group.sources
            )
            views.extend(
                SourceView(
                    s.name,
                    group.spec.name,
                    _capabilities(s),
                    all_attempted and self._has_data(s),
                )
                for s in group.sources
            )
        return views

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the groups' sources (as they are needed) and the merge loop until cancelled."""
        async with anyio.create_task_group() as tg:
            task_status.started()
            await self._merge_loop(tg)

    def _start_groups(self, tg: TaskGroup, names: Sequence[str]) -> None:
        for group in self.groups:
            if group.spec.name in names and group.spec.name not in self._started:
                self._started.add(group.spec.name)
                log.info(
                    "starting group %s (priority %d): %s",
                    group.spec.name,
                    group.spec.priority,
                    ", ".join(s.name for s in group.sources),
                )
                for source in group.sources:
                    tg.start_soon(source.run, self._accept, name=f"source {source.name}")

    async def _merge_loop(self, tg: TaskGroup) -> None:
        announced_wait = False
        delay = 0.0
        while True:
            with anyio.move_on_after(delay):
                await self._changed.wait()
            self._changed = anyio.Event()
            self._check_clock()
            decision = self.selector.update(self.clock.monotonic(), self._views())
            self._start_groups(tg, decision.started)
            for line in decision.changes:
                log.info("%s", line)
            self.active = decision.active
            if self.on_status is not None:
                self.on_status()
            # Sources report some changes (first attempts, syncs after a clock jump) without a
            # payload: look again soon while any is pending.
            waits = [READY_POLL if self._starting() or self._untrusted else math.inf]
            if decision.next_wake is not None:
                waits.append(max(0.0, decision.next_wake - self.clock.monotonic()))
            if self.builds == 0 and all(group is None for group in decision.active.values()):
                # Nothing was ever published: routers keep getting No Data Available. (Once
                # something was, losing every group publishes the empty set: data is withdrawn.)
                if not announced_wait and not self._starting():
                    log.warning("no group has data yet; routers get No Data Available")
                    announced_wait = True
                delay = min(waits)
                continue
            policy = EMPTY_POLICY if self.slurm_policy is None else self.slurm_policy()
            if policy is None:
                delay = min(waits)  # the SLURM files poke us once they are valid
                continue
            chosen = {
                kind: self._payloads_of(group, kind) for kind, group in decision.active.items()
            }
            snapshot = await anyio.to_thread.run_sync(merge_and_apply, chosen, policy)
            self.builds += 1
            used = {id(p): (p, now) for ps in chosen.values() for p, now in ps}.values()
            # Sleep until the first entry expires (in judged time, which runs like real time).
            ahead = [e - now for p, now in used if (e := p.earliest_expiry_after(now)) is not None]
            self.next_expiry_wall = self.clock.wall() + min(ahead) if ahead else None
            if ahead:
                waits.append(max(MIN_EXPIRY_WAKE, min(ahead)))
            delay = min(waits)
            await self.on_snapshot(snapshot)

    def _starting(self) -> bool:
        """Some started source has not made its first attempt yet."""
        return any(
            not s.status.attempted
            for g in self.groups
            if g.spec.name in self._started
            for s in g.sources
        )

    def judged_now(self, name: str) -> int:
        """The time (Unix seconds) a source's entries are judged at.

        Never earlier than the wall clock, and never earlier than the payload's acceptance time
        plus the monotonic time elapsed since, so a wall clock set back never extends a life.
        """
        wall = self.clock.wall()
        anchor = self._anchors.get(name)
        if anchor is None or self._frozen:
            return int(wall)
        anchored = anchor[0] + (self.clock.monotonic() - anchor[1])
        return int(max(wall, anchored))

    def _check_clock(self) -> None:
        """Distrust online sources after a wall-clock jump beyond the tolerance.

        Their data was accepted against the old clock; it is used again once they deliver anew.
        """
        if self._frozen:
            return
        wall, mono = self.clock.wall(), self.clock.monotonic()
        for source in self.sources:
            anchor = self._anchors.get(source.name)
            if anchor is None or source.name in self._untrusted:
                continue
            drift = wall - (anchor[0] + (mono - anchor[1]))
            if abs(drift) > self.clock_tolerance and getattr(source, "kind", "") in ONLINE:
                self._untrusted[source.name] = source.status.syncs
                log.warning(
                    "wall clock moved %+.0f s against the monotonic clock since source %s "
                    "delivered; its data is not used until it syncs again",
                    drift,
                    source.name,
                )

    def _payloads_of(self, group: str | None, kind: PayloadKind) -> list[Timed]:
        if group is None:
            return []
        return [
            (self.payloads[s.name], self.judged_now(s.name))
            for s in self.sources
            if self._group_of[s.name] == group
            and kind in _capabilities(s)
            and self._has_data(s)
            and s.name in self.payloads
        ]
