"""`AppConfig`: everything one `rtr-serve` process runs, checked before any I/O; `make_clock`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from persistence.location import StateLocation
from rtr_server.http.settings import HttpSettings
from rtr_server.settings import ServerSettings
from upstream.clock import Clock, FixedWallClock, SystemClock
from upstream.config import ClientConfig, GroupConfig, SourceConfig
from upstream.json_format import DEFAULT_MAX_ASPA_PROVIDERS

__all__ = ["AppConfig", "make_clock"]


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
    #: Persist published state here and recover from it at start (``--state``).
    state: StateLocation | None = None
    #: Serve another process's SQLite state read-only instead of running sources.
    state_reader: StateLocation | None = None
    #: Seconds between looks at the owner's header in reader mode.
    reader_poll: float = 1.0
    #: The HTTP listener (metrics, status, dashboard, queries); None: off.
    http: HttpSettings | None = None
    #: SLURM files (RFC 8416 with ASPA), applied to every snapshot and reloaded on change.
    slurm: tuple[str, ...] = ()
    #: At an orderly stop, wait at most this long for the last state's commit (seconds).
    flush_timeout: float = 30.0

    def __post_init__(self) -> None:
        if not self.flush_timeout > 0:
            raise ValueError("flush_timeout must be positive")
        if self.state_reader is not None:
            if self.sources or self.group_sources or self.state is not None:
                raise ValueError("--state-reader serves another process's state: no sources")
            if self.state_reader.backend != "sqlite":
                raise ValueError("--state-reader needs sqlite:PATH")
            return
        if not self.sources and not self.group_sources:
            raise ValueError("at least one source is needed (--source or [[sources]])")
        if self.sources and self.group_sources:
            raise ValueError("give --source or configured [[sources]], not both")
        if self.history < 0:
            raise ValueError("history must not be negative")
        if self.reference_time is not None and self.state is not None:
            # Offline evaluation at a fixed time must never become state an online start (or a
            # reader) trusts as online data: the stored times would be the reference time's.
            raise ValueError("--reference-time evaluates offline; it cannot be used with --state")
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
            reference_time=self.reference_time,
            state=self.state,
            flush_timeout=self.flush_timeout,
            # Routers get packed bytes; the HTTP queries search the packed keys (~0.1 ms).
            prepare_queries=False,
        )


def make_clock(reference_time: float | None) -> Clock:
    """The wall clock, or one frozen at ``reference_time``."""
    return SystemClock() if reference_time is None else FixedWallClock(reference_time)
