"""Runs sources in prioritised groups, judges their data in effective time, builds and publishes.

Each configured source is one `SourceEntry` (payload, clock anchor, trust, revocation, recovery,
source-wide deadline). Each payload kind comes from its own active group, chosen by
`upstream.selection.GroupSelector`; within a group the usable payloads of its sources are merged
(union; ASPA union per customer) and the SLURM policy is applied, in a worker thread.

Time (lifecycle contract, "时间与到期"): every judgement uses the shared `TimeKeeper`'s effective
time, which never moves back. The loop samples the clock at least every `CLOCK_TICK` seconds,
so a wall-clock jump is acted upon within a second: an online source whose wall clock moved
beyond the tolerance against its anchor is distrusted (its data withdrawn until it admits new
raw input) and asked to resync; an entry past its validity is withdrawn on schedule, whether or
not any source changes. A snapshot is judged `JUDGE_FACTOR` times the last build's duration
ahead, so nothing it holds expires while it is being built (a build that still ran past an
expiry is discarded); each kind's usable-until time is handed on with it.

A build that a configuration change or a decided withdrawal made stale while it ran is discarded
and rebuilt (`upstream.build_job`, which also prepares snapshots for queries); the rebuild merges
again only the kinds whose inputs changed (`MergeCache`): one group's change redoes no others.

`reconfigure` changes groups and sources in place: kept sources keep running with their data,
the selector keeps its clocks. `close` stops the sources and refuses further ordinary
deliveries; the last round comes once every source task has ended (a revocation a source
reports while it stops is still admitted and built), and makes one last build when a decided
withdrawal is not yet in the published view.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

import anyio
from anyio.abc import TaskGroup, TaskStatus

from snapshot.kinds import PayloadKind
from snapshot.slurm import EMPTY_POLICY, SlurmPolicy
from snapshot.snapshot import Snapshot
from upstream.build_job import Admissions, BuildJob
from upstream.clock import Clock, SystemClock
from upstream.merge import (
    Build,
    MergeCache,
    SourceInput,
    build_snapshot,
    merge_and_apply,
    merge_at,
    merge_by_kind,
)
from upstream.selection import Decision, GroupSelector, GroupSpec, SourceView
from upstream.source import Delivery, Source
from upstream.source_entry import Availability, Recovered, SourceEntry
from upstream.source_tasks import SourceTasks
from upstream.timekeeper import TimeKeeper

__all__ = [
    "IMPLICIT_GROUP",
    "Aggregator",
    "Build",
    "Group",
    "Recovered",
    "Source",
    "SourceInput",
    "merge_and_apply",
    "merge_at",
    "merge_by_kind",
]

log = logging.getLogger(__name__)

#: The clock is sampled (jumps and deadlines checked) at least this often, in seconds.
CLOCK_TICK = 1.0
#: How often readiness is re-checked while sources have not reported their first attempt.
READY_POLL = 0.2
#: A snapshot is judged this many times its last build's duration ahead of the effective time,
#: so nothing in it expires while it is built (a few milliseconds for small tables).
JUDGE_FACTOR = 2.0
#: Wall-clock drift against the monotonic clock tolerated before online sources are distrusted.
DEFAULT_CLOCK_TOLERANCE = 300.0
#: The group made for sources given without one (``--source`` on the command line).
IMPLICIT_GROUP = GroupSpec("default", priority=0, startup_timeout=0.0, failback_delay=0.0)


@dataclass(frozen=True, slots=True)
class Group:
    """A group spec with its sources."""

    spec: GroupSpec
    sources: tuple[Source, ...]


class Aggregator:
    """Owns the source tasks; calls ``on_snapshot`` with each new `Build`."""

    prepare_snapshots = True  # in the build thread (`BuildJob.prepare`); off: nobody queries

    def __init__(
        self,
        sources: Sequence[Source],
        on_snapshot: Callable[[Build], Awaitable[None]],
        *,
        clock: Clock | None = None,
        keeper: TimeKeeper | None = None,
        groups: Sequence[Group] | None = None,
        clock_tolerance: float = DEFAULT_CLOCK_TOLERANCE,
        slurm_policy: Callable[[], SlurmPolicy | None] | None = None,
    ) -> None:
        """Give either ``sources`` (one implicit group) or ``groups``; nothing runs until `run`.

        ``keeper`` is the shared effective time (made from ``clock`` when not given).
        ``slurm_policy`` gives the SLURM policy in force for each build; while it gives None
        (SLURM files configured but not valid yet) nothing is built. Call `poke` when it changes.
        """
        if groups is None:
            groups = [Group(IMPLICIT_GROUP, tuple(sources))]
        elif sources:
            raise ValueError("give sources or groups, not both")
        self.keeper = keeper or TimeKeeper(clock or SystemClock(), tolerance=clock_tolerance)
        self.clock: Clock = self.keeper
        self.on_snapshot = on_snapshot
        self.slurm_policy = slurm_policy
        #: Called after every selection round (active groups or source states may have moved).
        self.on_status: Callable[[], None] | None = None
        self.groups: list[Group] = []
        self.entries: dict[str, SourceEntry] = {}
        self.selector = GroupSelector(g.spec for g in groups)
        self._admissions = Admissions()  # what makes a running build stale
        self._install(groups)
        self.active: dict[PayloadKind, str | None] = dict.fromkeys(PayloadKind)
        self.builds = 0
        self._changed = anyio.Event()
        self._select_wake = anyio.Event()
        self._building = False
        #: Set once the last round after `close` is done: every source task has ended and every
        #: withdrawal decided until then is in the published view.
        self.final_round = anyio.Event()
        #: Set (and renewed) after each round once closing began.
        self._closing_round = anyio.Event()
        self._tasks = SourceTasks(self.poke)
        #: Each kind's last merge: a rebuild merges only the kinds whose inputs changed.
        self.merges = MergeCache()
        self._tg: TaskGroup | None = None
        self._closing = False
        self._started: set[str] = set()
        #: What the last published build was made of, and when it must be remade anyway.
        self._built_key: object = None
        self._next_change = math.inf
        self._margin = 0.0
        self._judged = -math.inf
        self._announced_wait = False
        self._published: Snapshot | None = None  # the last one; the next build reuses its index

    # ------------------------------------------------------------------ configuration
    def _install(self, groups: Sequence[Group]) -> None:
        names = [s.name for g in groups for s in g.sources]
        if len(set(names)) != len(names):
            raise ValueError(f"source names must be unique: {names}")
        entries: dict[str, SourceEntry] = {}
        for group in groups:
            for source in group.sources:
                old = self.entries.get(source.name)
                if old is not None and old.source is source and old.group == group.spec.name:
                    entries[source.name] = old
                else:
                    entries[source.name] = SourceEntry(source, group.spec.name)
        for name, old in self.entries.items():
            if entries.get(name) is not old:
                old.retire()
        self.groups = list(groups)
        self.entries = entries

    def reconfigure(self, groups: Sequence[Group]) -> None:
        """Switch to ``groups`` in place (see the module docstring)."""
        self.selector.reconfigure(g.spec for g in groups)
        self._install(groups)
        self._admissions.reconfigured(self.entries.values())  # a running build is not published
        self._built_key = None  # a commit is published (with its revision) even if unchanged
        if self._tg is not None:
            for entry in self.entries.values():
                if entry.group in self._started:
                    self._start_source(entry)
        self.poke()

    @property
    def sources(self) -> list[Source]:
        """The configured sources, in group order."""
        return [s for g in self.groups for s in g.sources]

    def seed(self, name: str, recovered: Recovered) -> None:
        """Give source ``name`` a recovered payload before `run` (used until it delivers).

        It is judged at the effective time, never earlier than ``not_before_wall`` plus the
        monotonic time elapsed since; its entries keep their own expiry.
        """
        if (entry := self.entries.get(name)) is None:
            raise ValueError(f"no source {name!r} to seed")
        entry.seed(recovered, self.keeper)
        self.poke()

    # ------------------------------------------------------------------ queries
    def started_groups(self) -> set[str]:
        """Names of the groups whose sources run."""
        return set(self._started)

    def availability(self) -> dict[str, Availability]:
        """What each source's data is worth now."""
        now = self.keeper.now()
        return {name: e.availability(now) for name, e in self.entries.items()}

    def judged_now(self, name: str) -> int:  # noqa: ARG002 - every source shares one time
        """The effective time (Unix seconds) every source's entries are judged at now."""
        return math.floor(self.keeper.now())

    def inputs(self) -> tuple[SourceInput, ...]:
        """The usable payloads of the sources whose group is active for some kind."""
        now = self.keeper.now()
        return tuple(
            self._input(entry)
            for entry in self.entries.values()
            if entry.payload is not None
            and entry.availability(now).usable
            and self._selected(entry)
        )

    def _selected(self, entry: SourceEntry) -> frozenset[PayloadKind]:
        caps = entry.source.capabilities
        return frozenset(k for k in caps if self.active.get(k) == entry.group)

    def _input(self, entry: SourceEntry) -> SourceInput:
        assert entry.payload is not None
        return SourceInput(
            name=entry.name,
            group=entry.group,
            kind=entry.source.status.kind,
            location=entry.source.status.location,
            capabilities=entry.source.capabilities,
            selected=self._selected(entry),
            payload=entry.payload,
            accepted_wall=entry.accepted_at if entry.accepted_at is not None else 0.0,
            expires_wall=entry.expires_at,
            rtr_session=entry.rtr_session,
            rtr_serial=entry.rtr_serial,
            protocol=entry.rtr_version,
        )

    def poke(self) -> None:
        """Re-evaluate now (e.g. after a test moved the clock, or a source changed state)."""
        self._changed.set()
        self._select_wake.set()

    # ------------------------------------------------------------------ running
    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the groups' sources (as they are needed) and the build loop until closed."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                tg.start_soon(self._schedule, name="group selection")
                task_status.started()
                await self._loop()
            finally:
                self._tg = None
                tg.cancel_scope.cancel()

    def close(self) -> None:
        """Stop the sources; after their tasks ended a last round builds, then `run` returns."""
        self._closing = True
        self._tasks.stop(self.entries.values())
        self.poke()

    def still_running(self) -> list[str]:
        """Names of the sources whose task has not ended (e.g. a parse in a worker thread)."""
        return self._tasks.running()

    @property
    def cleanup_pending(self) -> bool:
        """Closing, and a build is running or a decided change still waits for its round."""
        return self._closing and (self._building or self._changed.is_set())

    async def closing_round(self) -> None:
        """Wait for the end of the next round after `close` (or for the final one)."""
        if not self.final_round.is_set():
            await self._closing_round.wait()

    def _deliver(self, entry: SourceEntry, delivery: Delivery) -> None:
        if self._closing and not delivery.revoked:
            log.info("source %s: delivery after close began is not admitted", entry.name)
            return
        if entry.accept(delivery, self.keeper):
            self._admissions.delivered(entry, delivery)
            self.poke()

    def _start_groups(self, started: Iterable[tuple[str, str]]) -> None:
        assert self._tg is not None
        for name, reason in started:
            if name in self._started:
                continue
            self._started.add(name)
            group = next(g for g in self.groups if g.spec.name == name)
            log.info(
                "starting group %s (priority %d; %s): %s",
                name,
                group.spec.priority,
                reason,
                ", ".join(s.name for s in group.sources) or "no sources",
                extra={"event": "group_started", "group": name, "reason": reason},
            )
            for source in group.sources:
                self._start_source(self.entries[source.name])

    def _start_source(self, entry: SourceEntry) -> None:
        """Start the task of ``entry``'s source unless it has one."""
        assert self._tg is not None
        self._tasks.start(self._tg, entry, self._deliver)

    async def _loop(self) -> None:
        delay = 0.0
        while True:
            with anyio.move_on_after(delay):
                await self._changed.wait()
            self._changed = anyio.Event()
            closing = self._closing
            delay = await self._round()
            if closing and not self._changed.is_set() and not self._tasks:
                self.final_round.set()  # decided withdrawals are in the last build
                self._closing_round.set()
                return
            if closing:
                self._closing_round.set()
                self._closing_round = anyio.Event()

    def _check_clock(self) -> None:
        """Distrust online sources whose wall clock moved beyond the tolerance (and resync)."""
        keeper = self.keeper
        for entry in self.entries.values():
            if (
                entry.anchor is None
                or entry.untrusted
                or entry.payload is None
                or not entry.source.online
            ):
                continue
            if keeper.untrusted(entry.anchor):
                entry.distrust(keeper.drift(entry.anchor))
                self._admissions.withdrawn(entry)
                entry.source.resync()

    def _views(self, now: float) -> list[SourceView]:
        views = []
        for entry in self.entries.values():
            source = entry.source
            views.append(
                SourceView(
                    entry.name,
                    entry.group,
                    source.capabilities,
                    ready=entry.availability(now).usable,
                    refreshing=source.refreshing(),
                    attempted=source.status.attempted or entry.recovered,
                )
            )
        return views

    def _starting(self) -> bool:
        """Some started source has not made its first attempt yet."""
        return any(
            not e.source.status.attempted and not e.recovered
            for e in self.entries.values()
            if e.group in self._started
        )

    def _select(self) -> tuple[Decision, list[float]]:
        """Selection (clock check, readiness, group starts, active groups); no await.

        Returns the decision and the waits after which to look again.
        """
        keeper = self.keeper
        if not self._closing:
            self._check_clock()
        now = keeper.now()
        mono = keeper.monotonic()
        decision = self.selector.update(mono, self._views(now))
        if not self._closing:
            self._start_groups(decision.newly_started)
        for line in decision.changes:
            log.info("%s", line, extra={"event": "group_change"})
        self.active = decision.active
        if self.on_status is not None:
            self.on_status()
        waits = [CLOCK_TICK]
        if self._starting():
            waits.append(READY_POLL)
        if decision.next_wake is not None:
            waits.append(max(0.0, decision.next_wake - mono))
        return decision, waits

    async def _schedule(self) -> None:
        """While a build runs, keep selecting: a long build never delays a group start.

        The builder selects itself between builds; this light task covers the time a build
        takes (it only reads states and starts tasks, and never builds or publishes).
        """
        while True:
            delay = math.inf  # idle between builds: the builder wakes it when one starts
            if self._building:
                _, waits = self._select()
                delay = min([READY_POLL, *waits])
            with anyio.move_on_after(delay):
                await self._select_wake.wait()
            self._select_wake = anyio.Event()

    async def _round(self) -> float:
        """One selection and, when needed, build round; returns how long to wait then."""
        keeper = self.keeper
        decision, waits = self._select()
        now = keeper.now()
        # Judged ahead by the margin, and never earlier than a published build was judged: an
        # entry withdrawn early (by the margin) is never announced again.
        judged = max(now + self._margin, self._judged)
        if self.builds == 0 and all(group is None for group in decision.active.values()):
            # Nothing was ever published: routers keep getting No Data Available. (Once
            # something was, losing every group publishes the empty set: data is withdrawn.)
            if not self._announced_wait and not self._starting():
                log.warning("no group has data yet; routers get No Data Available")
                self._announced_wait = True
            return min(waits)
        policy = EMPTY_POLICY if self.slurm_policy is None else self.slurm_policy()
        if policy is None:
            return min(waits)  # the SLURM files poke us once they are valid
        chosen = self._choose(judged)
        key = (
            tuple((k, tuple((id(e), e.version) for e in es)) for k, es in chosen.items()),
            id(policy),
        )
        if key == self._built_key and judged < self._next_change:
            waits.append(max(0.0, self._next_change - judged))
            return min(waits)
        self._building = True
        self._select_wake.set()
        try:
            build = await self._build(chosen, policy, judged)
        finally:
            self._building = False
        if build is None:
            self._changed.set()  # a withdrawal made it stale: build again at once
            return 0.0
        self._built_key = key
        self._judged = judged
        self.builds += 1
        self._published = build.snapshot
        await self.on_snapshot(build)
        waits.append(max(0.0, self._next_change - self._margin - keeper.now()))
        return min(waits)

    def _choose(self, judged: float) -> dict[PayloadKind, list[SourceEntry]]:
        """The entries each kind is built from: its active group's usable ones at ``judged``."""
        chosen: dict[PayloadKind, list[SourceEntry]] = {}
        for kind, group in self.active.items():
            chosen[kind] = [
                e
                for e in self.entries.values()
                if group is not None
                and e.group == group
                and kind in e.source.capabilities
                and e.availability(judged).usable
            ]
        return chosen

    async def _build(
        self, chosen: dict[PayloadKind, list[SourceEntry]], policy: SlurmPolicy, judged: float
    ) -> Build | None:
        """Build in a worker thread; None when the result is stale (`upstream.build_job`)."""
        job = BuildJob.of(
            chosen,
            self.entries.values(),
            self._admissions,
            policy=policy,
            judged=judged,
            cache=self.merges,
            published=self._published if self.prepare_snapshots else None,
            prepare=self.prepare_snapshots,
            build=build_snapshot,
        )
        started = self.keeper.monotonic()
        built = await anyio.to_thread.run_sync(job.run)
        for entry in self.entries.values():
            if entry.payload is not None and id(entry.payload) in built.last_expiry:
                entry.learn(entry.payload, built.last_expiry[id(entry.payload)])
        until = built.usable_until
        took = self.keeper.monotonic() - started
        self._margin = JUDGE_FACTOR * took
        if (reason := job.stale(built, self._admissions, self.keeper.now())) is not None:
            log.info("build discarded: %s (%.2f s)", reason, took)
            return None
        self._next_change = built.next_change
        selected = dict(self.active)
        return Build(
            built.snapshot, selected, until, self.inputs(), judged, slurm_id=policy.identity()
        )
