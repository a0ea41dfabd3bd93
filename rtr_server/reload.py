"""SIGHUP reload: re-read the configuration and apply what can change at runtime, atomically.

`Reloader.reload` loads and validates the whole configuration first; a file that does not load
is logged with the reason and nothing changes. Then:

* groups and sources (and ``poll_interval``, ``max_aspa_providers``) go to the upstream
  client through `Client.apply_config` with the next revision: unchanged sources keep running
  with their data, new ones start, removed ones stop. A change the client refuses (e.g. an
  unreadable ``ca_file``) is logged and nothing changes;
* ``log_level`` and ``log_format`` are applied;
* the TCP-MD5/AO keys of the listeners go to the live listening sockets (``rekey``: new keys are
  added before old ones are removed, so a router can move to its new key at any time);
* everything else (listen addresses, timers, limits, history, the event loop, ...) cannot change
  while running: the reload names those options, says they need a restart and keeps them.

Every reload logs one summary line (event ``config_reload``).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import AsyncIterable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import anyio

from rtr_server.app_config import AppConfig
from rtr_server.logs import LogSettings, configure
from rtr_server.settings import ListenAddress
from rtr_server.tcp_auth import TcpAuthError
from upstream.client import Client

log = logging.getLogger(__name__)


class Reloadable(Protocol):
    """What a reload changes: the process's configuration and its upstream client (`App`)."""

    config: AppConfig

    @property
    def client(self) -> Client | None:
        """The upstream client; None for a state follower, which runs no sources."""


#: AppConfig fields the upstream client takes at runtime (`AppConfig.client_config`).
CLIENT_FIELDS = ("sources", "groups", "group_sources", "poll_interval", "max_aspa_providers")


@dataclass(frozen=True, slots=True)
class ProcessConfig:
    """What one start of rtr-serve runs with: the app, logging and the event loop."""

    app: AppConfig
    logging: LogSettings = field(default_factory=LogSettings)
    backend: str = "asyncio"


class ReloadOutcome(enum.Enum):
    """What a reload did."""

    #: Something changed (sources or logging); restart-only options may have been kept.
    APPLIED = "applied"
    #: The file loaded but nothing that can change at runtime changed.
    UNCHANGED = "unchanged"
    #: The file did not load, or the change was refused: nothing changed.
    FAILED = "failed"
    #: Started without a configuration file: there is nothing to reload.
    NO_CONFIG = "no_config"


def restart_only_changes(old: ProcessConfig, new: ProcessConfig) -> list[str]:
    """Names of the options that differ but cannot change without a restart."""
    changed: list[str] = []
    for f in dataclasses.fields(AppConfig):
        if f.name in CLIENT_FIELDS:
            continue
        before, after = getattr(old.app, f.name), getattr(new.app, f.name)
        if before == after:
            continue
        if dataclasses.is_dataclass(before) and dataclasses.is_dataclass(after):
            changed.extend(_differing_fields(before, after))
        else:
            changed.append(f.name)
    if old.backend != new.backend:
        changed.append("async_backend")
    return changed


def _differing_fields(before: object, after: object) -> list[str]:
    names: list[str] = []
    for f in dataclasses.fields(before):  # type: ignore[arg-type]
        a, b = getattr(before, f.name), getattr(after, f.name)
        if a == b:
            continue
        if dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b):
            names.extend(_differing_fields(a, b))  # e.g. timers -> refresh, retry, expire
        else:
            names.append(f.name)
    return names


def _without_keys(config: ProcessConfig) -> ProcessConfig:
    """``config`` with the listeners' TCP-MD5/AO keys left out (they change at runtime)."""
    server = config.app.server
    listen = tuple(dataclasses.replace(a, tcp_md5=(), tcp_ao=()) for a in server.listen)
    app = dataclasses.replace(config.app, server=dataclasses.replace(server, listen=listen))
    return dataclasses.replace(config, app=app)


class Reloader:
    """Applies reloads to a running app (`Reloadable`), one at a time; see the module docstring."""

    def __init__(
        self,
        app: Reloadable,
        current: ProcessConfig,
        load: Callable[[], ProcessConfig] | None,
        *,
        origin: str = "configuration file",
        configure_logging: Callable[[LogSettings], None] = configure,
        rekey: Callable[[tuple[ListenAddress, ...]], list[str]] | None = None,
    ) -> None:
        """Reload ``app`` with ``load`` (None: started without a file); ``current`` is in force.

        ``load`` does blocking file I/O (it runs in a worker thread) and raises ValueError with
        the reason for a configuration that does not load.
        """
        self.app = app
        self.current = current
        self.load = load
        self.origin = origin
        self.configure_logging = configure_logging
        #: Applies the listeners' TCP-MD5/AO keys (`RtrServer.rekey`); None: keys need a restart.
        self.rekey = rekey
        self.reloads = 0
        self.failures = 0
        self._lock = anyio.Lock()

    async def serve(self, signals: AsyncIterable[int]) -> None:
        """Reload on every signal received (e.g. from `anyio.open_signal_receiver`)."""
        async for _ in signals:
            await self.reload()

    async def reload(self) -> ReloadOutcome:
        """Re-read the configuration and apply it; never raises for a bad file."""
        async with self._lock:
            outcome = await self._reload()
        if outcome is ReloadOutcome.FAILED:
            self.failures += 1
        elif outcome is not ReloadOutcome.NO_CONFIG:
            self.reloads += 1
        return outcome

    async def _reload(self) -> ReloadOutcome:
        if self.load is None:
            self._summary(
                logging.WARNING,
                ReloadOutcome.NO_CONFIG,
                "reload requested, but rtr-serve was started without --config: nothing to reload",
            )
            return ReloadOutcome.NO_CONFIG
        try:
            new = await anyio.to_thread.run_sync(self.load)
        except ValueError as exc:
            self._failed(str(exc))
            return ReloadOutcome.FAILED
        changed: list[str] = []
        keys_changed = new.app.server.listen != self.current.app.server.listen
        if self.rekey is not None and keys_changed:
            restart = restart_only_changes(_without_keys(self.current), _without_keys(new))
            if "listen" not in restart:
                try:
                    done = self.rekey(new.app.server.listen)
                except TcpAuthError as exc:
                    self._failed(str(exc.strerror))
                    return ReloadOutcome.FAILED
                for line in done:
                    log.info("reload: %s", line)
                changed.append("TCP-MD5/AO keys")
                self._set_listen(new.app.server.listen)
        restart = restart_only_changes(self.current, new)
        client = self.app.client
        revision: int | None = 0  # a state follower runs no sources: only logging can change
        if client is not None:
            revision = await self._apply_sources(new, changed)
            if revision is None:
                return ReloadOutcome.FAILED
        kept = {name: getattr(self.app.config, name) for name in CLIENT_FIELDS}
        applied = {name: getattr(new.app, name) for name in CLIENT_FIELDS}
        if kept != applied:
            self.app.config = dataclasses.replace(self.app.config, **applied)
        if new.logging != self.current.logging:
            self.configure_logging(new.logging)
            changed.append("logging")
        self.current = ProcessConfig(self.app.config, new.logging, self.current.backend)
        outcome = ReloadOutcome.APPLIED if changed else ReloadOutcome.UNCHANGED
        text = (
            f"reloaded {self.origin}: "
            + (f"applied {' and '.join(changed)}" if changed else "no runtime change")
            + f" (source configuration revision {revision})"
        )
        if restart:
            text += f"; kept until a restart: {', '.join(restart)}"
        self._summary(
            logging.WARNING if restart else logging.INFO,
            outcome,
            text,
            changed=changed,
            restart_required=restart,
            revision=revision,
        )
        return outcome

    def _set_listen(self, listen: tuple[ListenAddress, ...]) -> None:
        server = dataclasses.replace(self.app.config.server, listen=listen)
        self.app.config = dataclasses.replace(self.app.config, server=server)
        self.current = dataclasses.replace(self.current, app=self.app.config)

    async def _apply_sources(self, new: ProcessConfig, changed: list[str]) -> int | None:
        """Apply changed sources and groups; the revision in force, or None after a failure."""
        client = self.app.client
        assert client is not None
        wanted = new.app.client_config()
        in_force = client.config
        if dataclasses.replace(wanted, revision=in_force.revision) != in_force:
            try:
                await client.apply_config(
                    dataclasses.replace(wanted, revision=in_force.revision + 1)
                )
            except (ValueError, RuntimeError) as exc:
                self._failed(str(exc))
                return None
            changed.append("sources")
        return client.config.revision

    def _failed(self, reason: str) -> None:
        self._summary(
            logging.ERROR,
            ReloadOutcome.FAILED,
            f"reload of {self.origin} failed, configuration unchanged: {reason}",
            error=reason,
        )

    def _summary(self, level: int, outcome: ReloadOutcome, text: str, **fields: object) -> None:
        log.log(
            level,
            "%s",
            text,
            extra={"event": "config_reload", "outcome": outcome.value, "file": self.origin}
            | fields,
        )
