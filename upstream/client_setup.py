"""How a `Client` is bound, prepared and closed: its loop, its sources' set-up, what is held.

Binding and preparing happen on entering the client (`Preparable.prepare` reads, e.g., a CA
file); `RecoveryTarget` is what the client's state file recovers into (its sources, SLURM
policy and clock); `cleanup_pending` names what a close in progress still waits for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import anyio
import anyio.lowlevel

from snapshot.slurm import SlurmPolicy
from upstream.aggregate import Aggregator, Group
from upstream.config import ClientConfig, SourceConfig, make_source, source_identity
from upstream.recovery import Placeholder, SourceIdentity
from upstream.slurm_files import SlurmFiles
from upstream.source import Preparable, Source
from upstream.source_entry import Recovered
from upstream.timekeeper import TimeKeeper

__all__ = [
    "RecoveryTarget",
    "check_home",
    "cleanup_pending",
    "groups_of",
    "loop_identity",
    "make_sources",
    "placeholders",
    "prepare_sources",
]


@dataclass(frozen=True, slots=True)
class RecoveryTarget:
    """A client as its state file's recovery sees it (`state_keeping.Seedable`)."""

    config: ClientConfig
    sources: Mapping[str, tuple[SourceConfig, Source]]
    slurm: SlurmFiles
    keeper: TimeKeeper
    seed: Callable[[str, Recovered], None]

    @property
    def clock_tolerance(self) -> float:
        """Wall-clock drift tolerated before a state's time is distrusted."""
        return self.config.clock_tolerance

    def configured(self) -> Sequence[SourceIdentity]:
        """The configured sources' identities (name, kind, location, full identity)."""
        return [
            SourceIdentity(
                s.name, s.status.kind, s.status.location, source_identity(c, self.config)
            )
            for c, s in self.sources.values()
        ]

    async def policy(self) -> SlurmPolicy | None:
        """The policy every published snapshot gets (the files read once, off the loop)."""
        await self.slurm.check()
        return self.slurm.policy

    def observe(self, wall: float) -> None:
        """A UTC time the state shows was reached: the effective time never goes below it."""
        self.keeper.observe(wall)


def loop_identity(*, required: bool = True) -> tuple[object, int] | None:
    """(this event loop's token, this thread's id); None outside any loop unless required."""
    try:
        token = anyio.lowlevel.current_token()
    except Exception:
        if required:
            raise
        return None
    return token, threading.get_ident()


async def prepare_sources(sources: Iterable[Source]) -> None:
    """Await `Preparable.prepare` of every source that has set-up I/O, in order."""
    for source in sources:
        if isinstance(source, Preparable):
            await source.prepare()


def check_home(home: tuple[object, int] | None) -> None:
    """Refuse a call from another event loop or thread than ``home`` (`loop_identity`).

    A client is no cross-loop client: hand other threads an immutable snapshot instead.
    """
    if home is not None and loop_identity(required=False) != home:
        raise RuntimeError(
            "this Client belongs to the event loop and thread it was entered in; it "
            "cannot be used from another (give other threads a snapshot instead)"
        )


def cleanup_pending(aggregator: Aggregator, done: anyio.Event | None) -> tuple[str, ...]:
    """What a closing client still waits for: source tasks, the last build, its own tasks."""
    held = [f"source task {name}" for name in aggregator.still_running()]
    if aggregator.cleanup_pending:
        held.append("last build")
    if done is not None and not done.is_set():
        held.append("client tasks")
    return tuple(held)


def groups_of(
    config: ClientConfig, sources: Mapping[str, tuple[SourceConfig, Source]]
) -> list[Group]:
    """The configured groups in priority order, each with its sources."""
    return [
        Group(g, tuple(s for c, s in sources.values() if c.group == g.name))
        for g in config.effective_groups()
    ]


def make_sources(
    config: ClientConfig,
    current: Mapping[str, tuple[SourceConfig, Source]],
    keeper: TimeKeeper,
) -> dict[str, tuple[SourceConfig, Source]]:
    """The sources of ``config``: those configured as in ``current`` are kept (with their data)."""
    sources: dict[str, tuple[SourceConfig, Source]] = {}
    for entry in config.sources:
        old = current.get(entry.name)
        if old is not None and old[0] == entry:
            sources[entry.name] = old
        else:
            sources[entry.name] = (entry, make_source(entry, config, keeper))
    return sources


def placeholders(
    config: ClientConfig, sources: Mapping[str, tuple[SourceConfig, Source]]
) -> list[Placeholder]:
    """Every configured source as a placeholder (stored for those without a payload, P-53)."""
    return [
        Placeholder(
            s.name,
            c.group,
            s.status.kind,
            s.status.location,
            s.capabilities,
            source_identity(c, config),
        )
        for c, s in sources.values()
    ]
