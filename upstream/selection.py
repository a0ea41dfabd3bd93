"""Which source group serves each payload kind: the pure failover and fail-back rules.

`GroupSelector.update(now, sources)` takes the monotonic time and what every source offers, and
returns which groups must run and which group is active for VRPs, ASPAs and router keys, each
kind decided on its own. A group takes part once every one of its sources made its first
attempt (or holds recovered data), so a half-loaded union is never served. For a kind, a group
is

* *ready* when one of its sources with that capability holds complete usable data (empty but
  complete counts), and *healthy* when such a source can also still refresh;
* *failing* when every one of its sources with that capability has made an attempt and can no
  longer refresh (an RTR connection lost and not re-synced within its Retry interval, an HTTP
  fetch failing, a file gone), when none of its sources can deliver that kind at all (an RTR
  cache at version 1 has no ASPA), or when it was ready and no longer is (data expired,
  withdrawn or distrusted).

Rules:

* The active group for a kind is the highest-priority healthy group. While the active group is
  healthy, a higher group takes over only after it has been healthy *continuously* for its
  ``failback_delay`` (unrelated updates and configuration commits do not reset that clock).
  When the active group stops being healthy, the highest healthy group takes over at once; with
  none healthy, the active group keeps serving while its data is still usable, else the highest
  ready group does. Never the one with more records.
* The first choice for a kind waits while a higher started group is still starting for it
  (inside its window, neither ready nor failing).
* Groups start lazily, in priority order: the next group starts when some kind has no healthy
  started group and the last started group is failing for it or past its start-up window
  (``startup_timeout`` from the moment it started; each group has its own window, fixed when it
  starts). Started groups are never stopped, so a failed primary keeps retrying and can be
  failed back to.
* `GroupSelector.reconfigure` keeps the state (started groups, windows, healthy-since clocks) of
  every group that keeps its name.

Nothing here reads a clock or does I/O; the caller supplies ``now`` and wakes at ``next_wake``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from snapshot.kinds import ALL_KINDS, PayloadKind

__all__ = [
    "ALL_KINDS",
    "Decision",
    "GroupSelector",
    "GroupSpec",
    "PayloadKind",
    "SourceView",
]


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """A configured group of sources."""

    name: str
    priority: int
    startup_timeout: float = 30.0
    failback_delay: float = 300.0

    def __post_init__(self) -> None:
        if self.startup_timeout < 0 or self.failback_delay < 0:
            raise ValueError(
                f"group {self.name}: startup_timeout and failback_delay must not be negative"
            )


@dataclass(frozen=True, slots=True)
class SourceView:
    """What one source offers right now (built by the caller from the source's state)."""

    name: str
    group: str
    #: Kinds this source can deliver now (an RTR source at v1 has no ASPA).
    capabilities: frozenset[PayloadKind]
    #: Holds complete data that is usable now (empty but complete counts).
    ready: bool
    #: Can still refresh (see the module docstring); True before its first attempt.
    refreshing: bool = True
    #: Made its first attempt (or holds recovered data).
    attempted: bool = True


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one `GroupSelector.update`."""

    #: Groups that must be running, in priority order.
    started: tuple[str, ...]
    #: Active group per kind (None: no group is ready for it).
    active: dict[PayloadKind, str | None]
    #: One human-readable line per kind whose active group changed, saying why.
    changes: tuple[str, ...]
    #: Groups started by this update, each with the reason.
    newly_started: tuple[tuple[str, str], ...]
    #: Monotonic time of the next deadline (a fail-back or start-up window), if any.
    next_wake: float | None


@dataclass(slots=True)
class _GroupState:
    spec: GroupSpec
    started_at: float | None = None
    #: End of the start-up window, fixed when the group starts.
    window_end: float | None = None
    healthy_since: dict[PayloadKind, float] = field(default_factory=dict)
    ready: set[PayloadKind] = field(default_factory=set)
    failing: set[PayloadKind] = field(default_factory=set)
    #: Kinds it was ever ready for: a source added later does not hold it back.
    was_ready: set[PayloadKind] = field(default_factory=set)


def _check(specs: Sequence[GroupSpec]) -> None:
    if not specs:
        raise ValueError("at least one group is needed")
    names = [g.name for g in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"group names must be unique: {names}")
    priorities = [g.priority for g in specs]
    if len(set(priorities)) != len(priorities):
        raise ValueError(f"group priorities must be unique: {priorities}")


class GroupSelector:
    """Keeps the per-group clocks; one instance per running client."""

    def __init__(self, groups: Iterable[GroupSpec]) -> None:
        """Groups need unique names and unique priorities."""
        specs = sorted(groups, key=lambda g: g.priority)
        _check(specs)
        self._groups = [_GroupState(g) for g in specs]
        self._by_name = {g.spec.name: g for g in self._groups}
        self.active: dict[PayloadKind, str | None] = dict.fromkeys(PayloadKind)

    @property
    def groups(self) -> tuple[GroupSpec, ...]:
        """The groups in priority order."""
        return tuple(g.spec for g in self._groups)

    def started(self) -> tuple[str, ...]:
        """Names of the started groups, in priority order."""
        return tuple(g.spec.name for g in self._groups if g.started_at is not None)

    def reconfigure(self, groups: Iterable[GroupSpec]) -> None:
        """Take a new group list; groups that keep their name keep all their state.

        A changed ``startup_timeout`` applies to windows that start later; a running window
        keeps its end. An active group that is gone leaves its kinds unselected until `update`.
        """
        specs = sorted(groups, key=lambda g: g.priority)
        _check(specs)
        states = []
        for spec in specs:
            state = self._by_name.get(spec.name)
            if state is None:
                state = _GroupState(spec)
            else:
                state.spec = spec
            states.append(state)
        self._groups = states
        self._by_name = {g.spec.name: g for g in states}
        for kind, name in self.active.items():
            if name is not None and name not in self._by_name:
                self.active[kind] = None

    def update(self, now: float, sources: Sequence[SourceView]) -> Decision:
        """Re-evaluate readiness, starts and the active group per kind at monotonic ``now``."""
        for source in sources:
            if source.group not in self._by_name:
                raise ValueError(f"source {source.name} names unknown group {source.group}")
        newly: list[tuple[str, str]] = []
        if self._groups[0].started_at is None:
            self._start(self._groups[0], now)
            newly.append((self._groups[0].spec.name, "highest priority"))
        self._refresh(now, sources)
        while (step := self._next_to_start(now)) is not None:
            group, reason = step
            self._start(group, now)
            newly.append((group.spec.name, reason))
            self._refresh(now, sources)
        changes = [line for kind in PayloadKind if (line := self._select(kind, now)) is not None]
        return Decision(
            started=self.started(),
            active=dict(self.active),
            changes=tuple(changes),
            newly_started=tuple(newly),
            next_wake=self._next_wake(now),
        )

    # ------------------------------------------------------------------ internals
    @staticmethod
    def _start(group: _GroupState, now: float) -> None:
        group.started_at = now
        group.window_end = now + group.spec.startup_timeout

    def _refresh(self, now: float, sources: Sequence[SourceView]) -> None:
        for group in self._groups:
            members = [s for s in sources if s.group == group.spec.name]
            complete = group.started_at is not None and all(s.attempted for s in members)
            group.ready.clear()
            group.failing.clear()
            for kind in PayloadKind:
                eligible = group.started_at is not None and (complete or kind in group.was_ready)
                able = [s for s in members if kind in s.capabilities]
                ready = [s for s in able if s.ready]
                if eligible and ready:
                    group.ready.add(kind)
                    group.was_ready.add(kind)
                if eligible and any(s.refreshing for s in ready):
                    group.healthy_since.setdefault(kind, now)
                else:
                    group.healthy_since.pop(kind, None)
                lost = kind in group.was_ready and kind not in group.ready
                if group.started_at is not None and (
                    lost or all(s.attempted and not s.refreshing for s in able)
                ):
                    group.failing.add(kind)

    def _uncovered(self) -> list[PayloadKind]:
        started = [g for g in self._groups if g.started_at is not None]
        return [k for k in PayloadKind if not any(k in g.healthy_since for g in started)]

    def _next_to_start(self, now: float) -> tuple[_GroupState, str] | None:
        started = [g for g in self._groups if g.started_at is not None]
        if len(started) == len(self._groups):
            return None
        last = started[-1]
        nxt = self._groups[len(started)]
        for kind in self._uncovered():
            if kind in last.failing:
                return nxt, f"group {last.spec.name} cannot refresh {kind.value}"
            assert last.window_end is not None
            if now >= last.window_end:
                return nxt, (
                    f"group {last.spec.name} not ready for {kind.value} within its "
                    f"startup_timeout of {last.spec.startup_timeout:g} s"
                )
        return None

    def _select(self, kind: PayloadKind, now: float) -> str | None:
        current = self.active[kind]
        cur = self._by_name.get(current) if current is not None else None
        healthy = [g for g in self._groups if kind in g.healthy_since]
        ready = [g for g in self._groups if kind in g.ready]
        if cur is None:
            # The first choice waits for higher groups still starting for this kind (within
            # their window, neither ready nor failing): a backup that loads faster must not
            # take a kind its primary is about to provide.
            healthy = [g for g in healthy if not self._pending_above(g, kind, now)]
            ready = [g for g in ready if not self._pending_above(g, kind, now)]
        chosen: _GroupState | None = cur
        reason = ""
        if cur is not None and kind in cur.healthy_since:
            for group in healthy:
                if group.spec.priority >= cur.spec.priority:
                    break
                since = now - group.healthy_since[kind]
                if since >= group.spec.failback_delay:
                    chosen = group
                    reason = (
                        f"fail-back: group {group.spec.name} healthy for {since:.0f} s "
                        f"(delay {group.spec.failback_delay:g} s)"
                    )
                    break
        elif healthy:
            chosen = healthy[0]
            if cur is None:
                reason = "first ready group"
            elif kind in cur.ready:
                reason = f"failover: group {current} can no longer refresh"
            else:
                reason = f"failover: group {current} is no longer ready"
        elif cur is not None and kind in cur.ready:
            chosen = cur  # nothing healthier: its data is still usable
        elif ready:
            chosen = ready[0]
            reason = (
                "first ready group (none can refresh)"
                if cur is None
                else f"group {current} is no longer ready"
            )
        else:
            chosen = None
            reason = "no group is ready" if cur is None else f"group {current} is no longer ready"
        name = chosen.spec.name if chosen is not None else None
        if name == current:
            return None
        self.active[kind] = name
        return f"{kind.value}: active group {current or '-'} -> {name or '-'} ({reason})"

    def _pending_above(self, group: _GroupState, kind: PayloadKind, now: float) -> bool:
        """A started group of higher priority is still starting for ``kind``."""
        for other in self._groups:
            if other is group:
                return False
            if (
                other.started_at is not None
                and kind not in other.ready
                and kind not in other.failing
                and other.window_end is not None
                and now < other.window_end
            ):
                return True
        return False

    def _next_wake(self, now: float) -> float | None:
        wakes: list[float] = []
        for kind in PayloadKind:
            current = self.active[kind]
            cur = self._by_name.get(current) if current is not None else None
            if cur is None or kind not in cur.healthy_since:
                continue
            for group in self._groups:
                if group.spec.priority >= cur.spec.priority:
                    break
                since = group.healthy_since.get(kind)
                if since is not None:
                    wakes.append(since + group.spec.failback_delay)
        started = [g for g in self._groups if g.started_at is not None]
        if len(started) < len(self._groups) and self._uncovered():
            end = started[-1].window_end
            if end is not None:
                wakes.append(end)
        if any(name is None for name in self.active.values()):
            wakes.extend(g.window_end for g in started if g.window_end is not None)
        future = [w for w in wakes if w > now]
        return min(future) if future else None
