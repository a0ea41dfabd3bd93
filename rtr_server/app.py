"""Composition root: the upstream `Client`'s snapshots go through the publisher to the server.

`run_app` owns everything it creates: the server and the client (which owns the sources). The
app only uses the client's public API (`Client.watch`). Publishing runs in a worker thread (the
delta of a large table takes a fraction of a second) and the new state is swapped into the
server in one assignment.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from anyio.abc import TaskStatus

from rtr_server.server import RtrServer
from rtr_server.settings import ServerSettings
from snapshot.publisher import PublishedState, Publisher, SessionIds
from snapshot.snapshot import Snapshot
from upstream.aggregate import Source
from upstream.client import Client, ClientState, ResyncRequiredError, SnapshotEvent
from upstream.clock import Clock, FixedWallClock, SystemClock
from upstream.config import ClientConfig, GroupConfig, SourceConfig
from upstream.json_format import DEFAULT_MAX_ASPA_PROVIDERS

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AppConfig:
    """Everything `run_app` needs; built by the CLI (or a test)."""

    #: Sources of the one implicit group: file paths or URLs (see `upstream.config`).
    sources: tuple[str | Path, ...] = ()
    server: ServerSettings = field(default_factory=ServerSettings)
    #: Prioritised groups and their sources (from a config file); instead of ``sources``.
    groups: tuple[GroupConfig, ...] = ()
    group_sources: tuple[SourceConfig, ...] = ()
    poll_interval: float = 10.0
    history: int = 10
    history_bytes: int = 64 * 1024 * 1024
    #: Evaluate ``expires`` at this fixed Unix time instead of the wall clock.
    reference_time: float | None = None
    max_aspa_providers: int = DEFAULT_MAX_ASPA_PROVIDERS
    #: SLURM files (RFC 8416 with ASPA), applied to every snapshot and reloaded on change.
    slurm: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.sources and not self.group_sources:
            raise ValueError("at least one source is needed (--source or [[sources]])")
        if self.sources and self.group_sources:
            raise ValueError("give --source or configured [[sources]], not both")
        if self.history < 0:
            raise ValueError("history must not be negative")
        self.client_config()  # every source and group check, before any I/O

    def client_config(self) -> ClientConfig:
        """The upstream half's configuration."""
        if self.group_sources:
            sources = self.group_sources
            groups = self.groups
        else:
            sources = tuple(SourceConfig(str(spec), str(spec)) for spec in self.sources)
            groups = ()
        return ClientConfig(
            sources,
            groups,
            poll_interval=self.poll_interval,
            max_aspa_providers=self.max_aspa_providers,
            slurm=self.slurm,
        )


class App:
    """The running pieces, handed to whoever started `run_app` (tests, the CLI)."""

    def __init__(self, config: AppConfig, clock: Clock) -> None:
        """Create (but do not start) the server, publisher and client."""
        self.config = config
        self.clock = clock
        self.server = RtrServer(config.server)
        self.publisher = Publisher(
            SessionIds.from_random(secrets.token_bytes(2)),
            max_entries=config.history,
            max_bytes=config.history_bytes,
        )
        self.client = Client(config.client_config(), clock=clock)
        self.published = 0

    @property
    def sources(self) -> tuple[Source, ...]:
        """The client's sources (for their status)."""
        return self.client.sources

    @property
    def state(self) -> PublishedState | None:
        """What routers are served now."""
        return self.server.state

    async def _on_snapshot(self, snapshot: Snapshot) -> None:
        started = self.clock.monotonic()
        state = await anyio.to_thread.run_sync(self.publisher.publish, snapshot)
        if state is None:
            log.debug("rebuilt snapshot is unchanged; serial stays")
            return
        self.server.publish(state)
        self.published += 1
        counts = ", ".join(f"{k}={v}" for k, v in snapshot.counts().items())
        if state.last_delta is None:
            log.info(
                "published serial %s (session ids v0/v1/v2 %d/%d/%d): %s (%.2f s)",
                state.serial,
                state.session_ids.v0,
                state.session_ids.v1,
                state.session_ids.v2,
                counts,
                self.clock.monotonic() - started,
            )
        else:
            delta = ", ".join(f"{k}={v}" for k, v in state.last_delta.counts().items() if v)
            log.info(
                "published serial %s: %s; delta %s (%.2f s)",
                state.serial,
                counts,
                delta,
                self.clock.monotonic() - started,
            )

    async def _follow(self) -> None:
        """Publish every snapshot the client makes; resynchronise when a watch says so."""
        while self.client.state is ClientState.RUNNING:
            with self.client.watch() as events:
                try:
                    async for event in events:
                        if isinstance(event, SnapshotEvent):
                            await self._on_snapshot(event.snapshot.snapshot)
                except ResyncRequiredError as exc:
                    log.info("resynchronising with the client: %s", exc)

    async def run(self, *, task_status: TaskStatus[App] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled."""
        async with self.client, anyio.create_task_group() as tg:
            await tg.start(self.server.serve)
            await tg.start(self.client.run)
            task_status.started(self)
            await self._follow()


def make_clock(reference_time: float | None) -> Clock:
    """The wall clock, or one frozen at ``reference_time``."""
    return SystemClock() if reference_time is None else FixedWallClock(reference_time)


async def run_app(
    config: AppConfig,
    *,
    clock: Clock | None = None,
    task_status: TaskStatus[App] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Build the app from ``config`` and serve until cancelled; reports the `App` when bound."""
    app = App(config, clock or make_clock(config.reference_time))
    await app.run(task_status=task_status)
