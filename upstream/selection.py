"""Which source group serves each payload kind: the pure failover and fail-back rules.

`GroupSelector.update(now, sources)` takes the monotonic time and what every source can offer,
and returns which groups must be running and which group is active for VRPs, ASPAs and router
keys, each kind decided on its own:

* A group is *ready* for a kind when at least one of its sources with that capability has
  completed a full sync whose data has not expired (empty but complete counts).
* The active group for a kind is the ready group with the lowest priority number — never the
  one with more records. With none ready the kind has no active group (nothing is served).
* Losing readiness fails over at once. Fail-back to a higher group happens only after it has
  been ready *continuously* for its ``failback_delay``; unrelated updates do not reset that clock.
* Groups start lazily in priority order: the next group starts when some kind has no ready
  group among the started ones and the lowest started group has either failed (it was ready,
  then lost it) or is past its ``startup_timeout`` without readiness. Started groups are never
  stopped, so a failed primary keeps retrying and can be failed back to.

Nothing here reads a clock or does I/O; the caller supplies ``now`` and wakes at ``next_wake``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


class PayloadKind(enum.Enum):
    """The payload kinds selected independently."""

    VRP = "vrp"
    ASPA = "aspa"
    ROUTER_KEY = "router_key"


ALL_KINDS = frozenset(PayloadKind)


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
    #: True while the source holds a completed full sync whose data has not expired.
    synced: bool


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one `GroupSelector.update`."""

    #: Groups that must be running, in priority order.
    started: tuple[str, ...]
    #: Active group per kind (None: no group is ready for it).
    active: dict[PayloadKind, str | None]
    #: One human-readable line per kind whose active group changed, saying why.
    changes: tuple[str, ...]
    #: Groups started by this update.
    newly_started: tuple[str, ...]
    #: Monotonic time of the next deadline (a fail-back or start-up timeout), if any.
    next_wake: float | None


@dataclass(slots=True)
class _GroupState:
    spec: GroupSpec
    started_at: float | None = None
    ever_ready: bool = False
    ready_since: dict[PayloadKind, float] = field(default_factory=dict)


class GroupSelector:
    """Keeps the per-group clocks; one instance per running client."""

    def __init__(self, groups: Iterable[GroupSpec]) -> None:
        """Groups need unique names and unique priorities."""
        specs = sorted(groups, key=lambda g: g.priority)
        if not specs:
            raise ValueError("at least one group is needed")
        names = [g.name for g in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"group names must be unique: {names}")
        priorities = [g.priority for g in specs]
        if len(set(priorities)) != len(priorities):
            raise ValueError(f"group priorities must be unique: {priorities}")
        self._groups = [_GroupState(g) for g in specs]
        self._by_name = {g.spec.name: g for g in self._groups}
        self.active: dict[PayloadKind, str | None] = dict.fromkeys(PayloadKind)

    @property
    def groups(self) -> tuple[GroupSpec, ...]:
        """The groups in priority order."""
        return tuple(g.spec for g in self._groups)

    def update(self, now: float, sources: Sequence[SourceView]) -> Decision:
        """Re-evaluate readiness, starts and the active group per kind at monotonic ``now``."""
        for source in sources:
            if source.group not in self._by_name:
                raise ValueError(f"source {source.name} names unknown group {source.group}")
        newly: list[str] = []
        if self._groups[0].started_at is None:
            self._groups[0].started_at = now
            newly.append(self._groups[0].spec.name)
        self._refresh_readiness(now, sources)
        while (group := self._next_to_start(now)) is not None:
            group.started_at = now
            newly.append(group.spec.name)
            self._refresh_readiness(now, sources)
        changes = [line for kind in PayloadKind if (line := self._select(kind, now)) is not None]
        return Decision(
            started=tuple(g.spec.name for g in self._groups if g.started_at is not None),
            active=dict(self.active),
            changes=tuple(changes),
            newly_started=tuple(newly),
            next_wake=self._next_wake(now),
        )

    # ------------------------------------------------------------------ internals
    def _refresh_readiness(self, now: float, sources: Sequence[SourceView]) -> None:
        for group in self._groups:
            members = [s for s in sources if s.group == group.spec.name and s.synced]
            for kind in PayloadKind:
                ready = group.started_at is not None and any(
                    kind in s.capabilities for s in members
                )
                if ready:
                    group.ready_since.setdefault(kind, now)
                    group.ever_ready = True
                else:
                    group.ready_since.pop(kind, None)

    def _uncovered(self) -> bool:
        started = [g for g in self._groups if g.started_at is not None]
        return any(not any(kind in g.ready_since for g in started) for kind in PayloadKind)

    def _next_to_start(self, now: float) -> _GroupState | None:
        started = [g for g in self._groups if g.started_at is not None]
        if len(started) == len(self._groups) or not self._uncovered():
            return None
        last = started[-1]
        assert last.started_at is not None
        failed = last.ever_ready and not last.ready_since
        timed_out = now - last.started_at >= last.spec.startup_timeout
        return self._groups[len(started)] if failed or timed_out else None

    def _select(self, kind: PayloadKind, now: float) -> str | None:
        current = self.active[kind]
        ready = [g for g in self._groups if kind in g.ready_since]
        best = ready[0] if ready else None
        chosen: _GroupState | None
        reason: str
        if current is not None and kind not in self._by_name[current].ready_since:
            chosen, reason = best, f"group {current} is no longer ready"
        elif best is None:
            chosen, reason = None, "no group is ready"
        elif current is None:
            chosen, reason = best, "first ready group"
        else:
            cur = self._by_name[current]
            if best is cur or best.spec.priority > cur.spec.priority:
                chosen, reason = cur, ""
            else:
                # Fail back only to a group ready for its whole fail-back delay; meanwhile stay.
                candidates = [
                    g
                    for g in ready
                    if g.spec.priority < cur.spec.priority
                    and now - g.ready_since[kind] >= g.spec.failback_delay
                ]
                if candidates:
                    chosen = candidates[0]
                    reason = (
                        f"fail-back: group {chosen.spec.name} ready for "
                        f"{now - chosen.ready_since[kind]:.0f} s (delay "
                        f"{chosen.spec.failback_delay:.0f} s)"
                    )
                else:
                    chosen, reason = cur, ""
        name = chosen.spec.name if chosen is not None else None
        if name == current:
            return None
        self.active[kind] = name
        return f"{kind.value}: active group {current or '-'} -> {name or '-'} ({reason})"

    def _next_wake(self, now: float) -> float | None:
        wakes: list[float] = []
        for kind in PayloadKind:
            current = self.active[kind]
            if current is None:
                continue
            cur = self._by_name[current]
            for group in self._groups:
                if group.spec.priority >= cur.spec.priority:
                    break
                since = group.ready_since.get(kind)
                if since is not None:
                    wakes.append(since + group.spec.failback_delay)
        started = [g for g in self._groups if g.started_at is not None]
        if len(started) < len(self._groups) and self._uncovered():
            last = started[-1]
            assert last.started_at is not None
            wakes.append(last.started_at + last.spec.startup_timeout)
        future = [w for w in wakes if w > now]
        return min(future) if future else None
