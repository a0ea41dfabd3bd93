"""Reloading the configuration file in process (what SIGHUP triggers): a new source reaches
routers as a Serial Query diff; a broken file, a refused source and restart-only options change
nothing that is served."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from rtr_server.app import App
from rtr_server.cli_args import build_parser
from rtr_server.cli_config import load_process_config
from rtr_server.logs import LogSettings
from rtr_server.reload import ProcessConfig, Reloader, ReloadOutcome
from tests.server.helpers import (
    RouterState,
    base_export,
    expected_state,
    export,
    port_of,
    roa,
    running_app,
    wait_until,
    write_export,
)
from tests.server.rtr_client import Response, RtrClient
from upstream.client import Client


def client_of(app: App) -> Client:
    """The owner's upstream client (never None outside follower mode)."""
    assert app.client is not None
    return app.client


pytestmark = pytest.mark.anyio

EXTRA = export(roas=[roa("198.51.100.0/24", 24, 64511), roa("2001:db8:77::/48", 48, 64512)])


def config_text(*sources: Path, refresh: int = 1800, extra: str = "") -> str:
    """A configuration on 127.0.0.1 port 0 serving ``sources`` in the implicit group."""
    text = (
        "[server]\n"
        'listen = ["127.0.0.1:0"]\n'
        "notify_interval = 0\n"
        "poll_interval = 0.05\n"
        f"refresh = {refresh}\nretry = 300\nexpire = 3600\n{extra}"
    )
    for i, path in enumerate(sources):
        text += f'[[sources]]\nname = "s{i}"\nurl = "{path}"\n'
    return text


class Setup:
    """A config file, its loader (the CLI's own) and recorded logging changes."""

    def __init__(self, tmp_path: Path) -> None:
        self.a = tmp_path / "a.json"
        self.b = tmp_path / "b.json"
        write_export(self.a, base_export())
        write_export(self.b, EXTRA)
        self.file = tmp_path / "rtr-serve.toml"
        self.file.write_text(config_text(self.a))
        self.parser = build_parser()
        self.argv = ["--config", str(self.file)]
        self.logging_changes: list[LogSettings] = []

    def load(self) -> ProcessConfig:
        return load_process_config(self.parser, self.argv)[1]

    def reloader(self, app: App, process: ProcessConfig) -> Reloader:
        return Reloader(
            app,
            process,
            self.load,
            origin=str(self.file),
            configure_logging=self.logging_changes.append,
        )

    @asynccontextmanager
    async def running(self) -> AsyncIterator[tuple[App, Reloader]]:
        """The app of the file as it is now, running, with its reloader."""
        process = self.load()
        async with running_app(process.app) as app:
            yield app, self.reloader(app, process)


def reload_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == "config_reload"]


async def test_reload_adds_a_source_and_routers_get_the_diff(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    setup = Setup(tmp_path)
    async with setup.running() as (app, reloader), await RtrClient.connect(port_of(app)) as client:
        first = await client.reset(2)
        held = RouterState().apply(first.payload)
        assert held == expected_state(base_export(), 2)
        revision = client_of(app).config.revision

        setup.file.write_text(config_text(setup.a, setup.b))
        assert await reloader.reload() is ReloadOutcome.APPLIED
        assert client_of(app).config.revision == revision + 1
        assert [s.name for s in app.config.group_sources] == ["s0", "s1"]
        await wait_until(
            lambda: app.state is not None and app.state.serial.value != first.end_of_data.serial,
            what="the serial with the new source",
        )
        reply = await client.serial(2, first.cache_response.session_id, first.end_of_data.serial)
        assert isinstance(reply, Response), reply
        # Only announcements: the kept source's data never left during the change.
        assert all(pdu.flags == 1 for pdu in reply.payload), reply.payload
        held = held.apply(reply.payload)
        merged = base_export()
        merged["roas"] += EXTRA["roas"]
        assert held == expected_state(merged, 2)

    (record,) = reload_records(caplog)
    assert record.levelno == logging.INFO
    assert record.outcome == "applied"  # type: ignore[attr-defined]
    assert record.changed == ["sources"]  # type: ignore[attr-defined]
    assert record.restart_required == []  # type: ignore[attr-defined]
    assert setup.logging_changes == []


async def test_broken_file_keeps_everything(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    setup = Setup(tmp_path)
    async with setup.running() as (app, reloader), await RtrClient.connect(port_of(app)) as client:
        first = await client.reset(2)
        config, state = client_of(app).config, app.state
        for broken, reason in [
            ("[server\nnot toml", "not valid TOML"),
            (config_text(setup.a, setup.b) + "bogus = 1\n", "sources[1].bogus: unknown key"),
            (config_text(setup.a, refresh=0), "refresh"),
        ]:
            setup.file.write_text(broken)
            assert await reloader.reload() is ReloadOutcome.FAILED
            record = reload_records(caplog)[-1]
            assert record.levelno == logging.ERROR
            assert reason in record.getMessage()
            assert str(setup.file) in record.getMessage()
            assert "configuration unchanged" in record.getMessage()
        setup.file.unlink()
        assert await reloader.reload() is ReloadOutcome.FAILED
        assert "cannot read" in reload_records(caplog)[-1].getMessage()
        assert reloader.failures == 4
        assert client_of(app).config is config
        assert [s.name for s in app.sources] == ["s0"]
        await anyio.sleep(0.2)  # several polls: nothing new may be published
        assert app.state is state
        again = await client.reset(2)
        assert again.end_of_data.serial == first.end_of_data.serial
        assert RouterState().apply(again.payload) == expected_state(base_export(), 2)


async def test_refused_source_changes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    setup = Setup(tmp_path)
    async with setup.running() as (app, reloader):
        config, sources = client_of(app).config, app.sources
        # Loads and validates, but the client cannot build the source: no CA file there.
        setup.file.write_text(
            config_text(setup.a)
            + '[[sources]]\nname = "web"\nurl = "https://192.0.2.1/json"\n'
            + f'ca_file = "{tmp_path / "missing.pem"}"\n'
        )
        assert await reloader.reload() is ReloadOutcome.FAILED
        assert "missing.pem" in reload_records(caplog)[-1].getMessage()
        assert client_of(app).config is config
        assert app.sources == sources
        assert [s.name for s in app.config.group_sources] == ["s0"]
        # The next good reload still gets the next revision.
        setup.file.write_text(config_text(setup.a, setup.b))
        assert await reloader.reload() is ReloadOutcome.APPLIED
        assert client_of(app).config.revision == config.revision + 1


async def test_restart_only_options_are_named_and_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    setup = Setup(tmp_path)
    async with setup.running() as (app, reloader):
        settings = app.server.settings
        setup.file.write_text(
            config_text(
                setup.a,
                refresh=900,
                extra='max_connections = 7\nlog_format = "json"\nasync_backend = "trio"\n',
            ).replace('"127.0.0.1:0"', '"127.0.0.1:0", "[::1]:0"')
        )
        assert await reloader.reload() is ReloadOutcome.APPLIED  # the log format changed
        record = reload_records(caplog)[-1]
        assert record.levelno == logging.WARNING
        assert record.restart_required == [  # type: ignore[attr-defined]
            "listen",
            "refresh",
            "max_connections",
            "async_backend",
        ]
        assert "kept until a restart: listen, refresh, max_connections" in record.getMessage()
        assert app.server.settings is settings
        assert app.config.server is settings
        assert setup.logging_changes == [LogSettings("info", "json")]
        # Reloading the same file again changes nothing more at runtime.
        assert await reloader.reload() is ReloadOutcome.UNCHANGED
        assert setup.logging_changes == [LogSettings("info", "json")]
        assert reloader.current.backend == "asyncio"


async def test_without_config_file_nothing_to_reload(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    setup = Setup(tmp_path)
    process = setup.load()
    async with running_app(process.app) as app:
        reloader = Reloader(app, process, None)
        assert await reloader.reload() is ReloadOutcome.NO_CONFIG
        (record,) = reload_records(caplog)
        assert "nothing to reload" in record.getMessage()
        assert record.outcome == "no_config"  # type: ignore[attr-defined]
        assert reloader.reloads == reloader.failures == 0


async def test_serve_reloads_once_per_signal(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    async with setup.running() as (app, reloader):
        send, receive = anyio.create_memory_object_stream[int](4)
        with receive:
            async with anyio.create_task_group() as tg:
                tg.start_soon(reloader.serve, receive)
                setup.file.write_text(config_text(setup.a, setup.b))
                async with send:
                    await send.send(1)
                    await send.send(1)
        assert reloader.reloads == 2
        assert [s.name for s in app.sources] == ["s0", "s1"]
