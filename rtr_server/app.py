"""Composition root: wires sources (upstream) to the publisher (snapshot) and the RTR server.

`run_app` owns everything it creates: the server, the sources and their tasks. Publishing runs in
a worker thread (the delta of a large table takes a fraction of a second) and the new state is
swapped into the server in one assignment.
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
from upstream.aggregate import Aggregator, Source
from upstream.clock import Clock, FixedWallClock, SystemClock
from upstream.file_source import FileSource
from upstream.json_format import DEFAULT_MAX_ASPA_PROVIDERS

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AppConfig:
    """Everything `run_app` needs; built by the CLI (or a test)."""

    #: File paths, or URLs once the HTTP and RTR sources exist (see `make_source`).
    sources: tuple[str | Path, ...]
    server: ServerSettings = field(default_factory=ServerSettings)
    poll_interval: float = 10.0
    history: int = 10
    history_bytes: int = 64 * 1024 * 1024
    #: Evaluate ``expires`` at this fixed Unix time instead of the wall clock.
    reference_time: float | None = None
    max_aspa_providers: int = DEFAULT_MAX_ASPA_PROVIDERS

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("at least one --source is needed")
        for spec in self.sources:
            check_source_spec(spec)
        if self.poll_interval <= 0:
            raise ValueError("poll interval must be positive")
        if self.history < 0:
            raise ValueError("history must not be negative")


class App:
    """The running pieces, handed to whoever started `run_app` (tests, the CLI)."""

    def __init__(self, config: AppConfig, clock: Clock) -> None:
        """Create (but do not start) the server, publisher and sources."""
        self.config = config
        self.clock = clock
        self.server = RtrServer(config.server)
        self.publisher = Publisher(
            SessionIds.from_random(secrets.token_bytes(2)),
            max_entries=config.history,
            max_bytes=config.history_bytes,
        )
        self.sources: list[Source] = [make_source(spec, config, clock) for spec in config.sources]
        self.aggregator = Aggregator(self.sources, self._on_snapshot, clock=clock)
        self.published = 0

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

    async def run(self, *, task_status: TaskStatus[App] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled."""
        async with anyio.create_task_group() as tg:
            await tg.start(self.server.serve)
            await tg.start(self.aggregator.run)
            task_status.started(self)


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


def check_source_spec(spec: str | Path) -> None:
    """Raise ValueError for a source that can never work (checked before any I/O)."""
    text = str(spec)
    scheme, sep, _ = text.partition("://")
    if sep and scheme not in SCHEMES:
        raise ValueError(f"source {text!r}: unsupported scheme {scheme!r}")
    if not text:
        raise ValueError("empty source")


#: URL schemes a source may have; anything without ``://`` is a file path.
SCHEMES: tuple[str, ...] = ()


def make_source(spec: str | Path, config: AppConfig, clock: Clock) -> Source:
    """The source for one ``--source`` value."""
    return FileSource(
        Path(spec),
        poll_interval=config.poll_interval,
        max_aspa_providers=config.max_aspa_providers,
        clock=clock,
    )
