"""What a `Client` runs: `ClientConfig` (groups, sources, timing) and how sources are built.

Checking a configuration does no I/O: URLs are only parsed, so a configuration error is found
before any network activity. `make_source` builds the source for one entry: a file path, an
``http(s)://`` URL or an ``rtr://`` URL.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from persistence.limits import Limits
from persistence.location import StateLocation
from persistence.protocol import PersistenceBackend
from snapshot.kinds import PayloadKind
from upstream.file_source import FileSource
from upstream.json_format import DEFAULT_MAX_ASPA_PROVIDERS
from upstream.selection import GroupSpec
from upstream.source import Source
from upstream.timekeeper import TimeKeeper

#: The group of sources given without one (``--source`` on the command line).
IMPLICIT_GROUP = "default"


#: A configured group is exactly what the selection rules work with.
GroupConfig = GroupSpec


@dataclass(frozen=True, slots=True)
class SourceConfig:
    """One source: where it is and, for some kinds, how to reach it."""

    name: str
    url: str
    group: str = IMPLICIT_GROUP
    poll_interval: float | None = None
    #: Extra HTTP headers (e.g. an authorisation token; never logged).
    headers: tuple[tuple[str, str], ...] = ()
    ca_file: str | None = None
    max_bytes: int | None = None
    max_version: int | None = None
    #: Seconds; None keeps the source kind's default (see `make_source`).
    connect_timeout: float | None = None
    read_timeout: float | None = None
    total_timeout: float | None = None
    retry_initial: float | None = None
    retry_max: float | None = None
    #: File sources: watch the export's directory for changes besides polling (None: yes).
    watch: bool | None = None

    def __repr__(self) -> str:
        # Header values may be secrets: never show them.
        return (
            f"SourceConfig(name={self.name!r}, url={self.url!r}, group={self.group!r}, "
            f"headers={[n for n, _ in self.headers]!r})"
        )


def check_source_url(url: str) -> None:
    """Raise ValueError for a source location that can never work (no I/O)."""
    if not url:
        raise ValueError("empty source")
    scheme, sep, _ = url.partition("://")
    if not sep:
        return
    if scheme in ("http", "https"):
        from upstream.http_rules import parse_http_url

        parse_http_url(url)
    elif scheme == "rtr":
        from upstream.rtr_address import parse_rtr_url

        parse_rtr_url(url)
    else:
        raise ValueError(f"source {url!r}: unsupported scheme {scheme!r} (file, http, https, rtr)")


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Groups, sources and timing of a `Client`; ``revision`` orders runtime changes."""

    sources: tuple[SourceConfig, ...]
    #: Empty: every source is in one implicit group.
    groups: tuple[GroupConfig, ...] = ()
    poll_interval: float = 10.0
    max_aspa_providers: int = DEFAULT_MAX_ASPA_PROVIDERS
    #: Wall-clock drift (s) against the monotonic clock before online sources are distrusted.
    clock_tolerance: float = 300.0
    #: How long `Client.aclose` waits for its tasks before it reports ``cleanup_overdue``.
    cleanup_timeout: float = 5.0
    revision: int = 0
    #: SLURM files (RFC 8416, with ASPA) applied to every snapshot; see `upstream.slurm_files`.
    slurm: tuple[str, ...] = ()
    #: The kinds that must each have an active group for the client to be ready: the default
    #: of `Client.wait_ready` and `ClientStatus.ready` (never a judgement of the data's trust).
    required: frozenset[PayloadKind] = field(default=frozenset({PayloadKind.VRP}))
    #: Unix seconds: judge every ``expires`` at this fixed UTC time (an offline evaluation,
    #: whose results are never trusted online); None: the system clock.
    reference_time: float | None = None
    #: The client's own state file (opened, checked and recovered on entering the client;
    #: every delivered snapshot committed to it; closed by `Client.aclose`); None: memory only.
    state: StateLocation | None = None
    #: How long `Client.aclose` may take for the final commit (the sources' stop and a decided
    #: withdrawal count in it); past it the close says what was not persisted.
    flush_timeout: float = 30.0
    #: What a read of the state file may build (sources, supports, bytes); None: `Limits()`.
    #: A changed value (`Client.apply_config`) applies from the backend's next transaction.
    #: Only for the backend the client builds from ``state``: an injected ``backend`` keeps
    #: its own limits (it may be stricter), the client never overrides them.
    limits: Limits | None = None
    #: A host-injected backend instead of ``state`` (not both): any synchronous
    #: `persistence.PersistenceBackend`, unopened. The client opens, reads, commits and closes
    #: it on its own worker thread, exactly as a backend it built (an instance serves one
    #: client life: a closed backend cannot be opened again); None: ``state`` decides.
    backend: PersistenceBackend | None = None
    #: Build the query structures (origin index, ASPA index) of every snapshot in the build
    #: thread, before it is published (0.4 s and about 75 MB on the global table); False for
    #: a host that seldom queries (queries then search the packed keys, writing nothing).
    prepare_queries: bool = True

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("at least one source is needed")
        if self.poll_interval <= 0 or self.cleanup_timeout <= 0 or self.clock_tolerance <= 0:
            raise ValueError("poll_interval, cleanup_timeout and clock_tolerance must be > 0")
        names = [s.name for s in self.sources]
        for i, name in enumerate(names):
            if names.index(name) != i:
                raise ValueError(f"sources[{i}].name: {name!r} already used")
        groups = {g.name for g in self.effective_groups()}
        for i, source in enumerate(self.sources):
            if source.group not in groups:
                raise ValueError(f"sources[{i}].group: no group named {source.group!r}")
            try:
                check_source_url(source.url)
            except ValueError as exc:
                raise ValueError(f"sources[{i}].url: {exc}") from None
        if not self.required:
            raise ValueError("required: name at least one payload kind")
        if self.backend is not None:
            if self.state is not None:
                raise ValueError("state and backend: give one (a location or a backend), not both")
            if not isinstance(self.backend, PersistenceBackend):
                raise ValueError(
                    f"backend: {type(self.backend).__name__} is no PersistenceBackend "
                    "(capabilities, open, read_state, commit, close)"
                )
        if not self.flush_timeout > 0:
            raise ValueError("flush_timeout must be positive")
        for i, path in enumerate(self.slurm):
            if not path:
                raise ValueError(f"slurm[{i}]: empty path")
            if self.slurm.index(path) != i:
                raise ValueError(f"slurm[{i}]: {path!r} is given twice")

    def policy_id(self, slurm_id: str) -> str:
        """The identity (SHA-256, hex) of the policy a snapshot is judged under.

        It covers the SLURM policy applied (`SlurmPolicy.identity`) and the record limit.
        """
        text = f"slurm={slurm_id};max_aspa_providers={self.max_aspa_providers}"
        return hashlib.sha256(text.encode()).hexdigest()

    def effective_groups(self) -> tuple[GroupConfig, ...]:
        """The configured groups, or the implicit one."""
        if self.groups:
            return self.groups
        return (GroupConfig(IMPLICIT_GROUP, 0, startup_timeout=0.0, failback_delay=0.0),)


def source_identity(source: SourceConfig, config: ClientConfig) -> str:
    """What a stored payload of ``source`` must match to be revived (P-52), as a digest.

    The kind and endpoint (scheme and URL or path), the protocol range (RTR ``max_version``),
    the format (the JSON shapes are detected per document: one reader profile), the trust
    configuration (the CA file's path, or the system store) and the validity policy that
    shapes a payload (``max_aspa_providers``). Secrets take part only as non-sensitive
    identifiers: header names, never their values. SHA-256, hex, with its name.
    """
    url = source.url
    scheme = url.partition("://")[0] if "://" in url else "file"
    parts = [
        f"kind={scheme}",
        f"endpoint={url}",
        f"protocol={source.max_version if source.max_version is not None else '-'}",
        "format=json-auto" if scheme != "rtr" else "format=rtr",
        f"trust={source.ca_file if source.ca_file is not None else 'system'}",
        "headers=" + ",".join(sorted(name.lower() for name, _ in source.headers)),
        f"max_aspa_providers={config.max_aspa_providers}",
    ]
    return "sha256:" + hashlib.sha256("\n".join(parts).encode()).hexdigest()


def make_source(source: SourceConfig, config: ClientConfig, clock: TimeKeeper) -> Source:
    """The source object for one entry (constructors do no I/O); ``clock`` is the shared one."""
    url = source.url
    scheme = url.partition("://")[0] if "://" in url else ""
    poll = source.poll_interval if source.poll_interval is not None else config.poll_interval
    if scheme in ("http", "https"):
        from upstream.http_source import HttpSource

        extra: dict[str, Any] = {"headers": dict(source.headers), "ca_file": source.ca_file}
        extra.update(
            _given(source, "max_bytes", "connect_timeout", "read_timeout", "total_timeout")
        )
        extra.update(_given(source, "retry_initial", "retry_max"))
        return HttpSource(
            url,
            name=source.name,
            poll_interval=poll,
            max_aspa_providers=config.max_aspa_providers,
            clock=clock,
            **extra,
        )
    if scheme == "rtr":
        from upstream.rtr_source import RtrSource

        version = source.max_version if source.max_version is not None else 2
        return RtrSource(
            url,
            name=source.name,
            clock=clock,
            max_version=version,
            **_given(source, "connect_timeout", "retry_initial", "retry_max"),
        )
    return FileSource(
        Path(url),
        name=source.name,
        poll_interval=poll,
        max_aspa_providers=config.max_aspa_providers,
        clock=clock,
        **_given(source, "max_bytes", "watch"),
    )


def _given(source: SourceConfig, *names: str) -> dict[str, Any]:
    """The named options that the configuration sets (others keep their defaults)."""
    return {n: getattr(source, n) for n in names if getattr(source, n) is not None}
