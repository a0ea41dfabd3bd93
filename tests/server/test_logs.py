"""Log output: the JSON and text formatters, `configure`, and the event lines a running app
writes (session open/close, publish, source state changes), each one line with its facts."""

from __future__ import annotations

import io
import json
import logging
import re
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from rtr_protocol import SerialNotify
from rtr_server.logs import JsonFormatter, LogSettings, configure, fields_of
from tests.server.helpers import (
    app_config,
    base_export,
    port_of,
    publish_and_wait,
    roa,
    running_app,
    wait_until,
    write_export,
)
from tests.server.rtr_client import Response, RtrClient
from upstream.status import SourceState

RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """Where `configure` writes during a test; the root logger is restored afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    chatty = {name: logging.getLogger(name).level for name in ("httpx", "httpcore")}
    out = io.StringIO()
    try:
        yield out
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
        for name, old in chatty.items():
            logging.getLogger(name).setLevel(old)


def lines_of(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


def test_json_lines_carry_the_base_keys_and_the_fields(stream: io.StringIO) -> None:
    configure(LogSettings("info", "json"), stream)
    log = logging.getLogger("test.logs")
    before = time.time()
    log.info(
        "router %s closed",
        "192.0.2.1:5000",
        extra={"event": "session_close", "peer": "192.0.2.1:5000", "state": SourceState.OK},
    )
    log.debug("not at info level")
    log.warning("with a clash", extra={"ts": "not the time", "path": Path("/x")})
    first, second = (json.loads(line) for line in lines_of(stream))
    assert list(first)[:4] == ["ts", "level", "logger", "msg"]
    assert RFC3339_UTC.match(first["ts"]), first["ts"]
    stamp = datetime.fromisoformat(first["ts"].replace("Z", "+00:00")).timestamp()
    assert before - 0.01 <= stamp <= time.time()
    assert first["level"] == "info"
    assert first["logger"] == "test.logs"
    assert first["msg"] == "router 192.0.2.1:5000 closed"
    assert first["event"] == "session_close"
    assert first["peer"] == "192.0.2.1:5000"
    assert first["state"] == "ok"  # enums by value
    assert "args" not in first
    assert "lineno" not in first
    assert second["level"] == "warning"
    assert second["ts"] != "not the time"  # a field never overwrites a base key
    assert second["path"] == "/x"


def test_json_exception_stays_on_one_line(stream: io.StringIO) -> None:
    configure(LogSettings("info", "json"), stream)

    def fail() -> None:
        raise ValueError("boom")

    try:
        fail()
    except ValueError:
        logging.getLogger("test.logs").exception("failed")
    (line,) = lines_of(stream)
    record = json.loads(line)
    assert record["msg"] == "failed"
    assert "ValueError: boom" in record["exc"]


def test_text_lines_are_readable(stream: io.StringIO) -> None:
    configure(LogSettings("warning", "text"), stream)
    log = logging.getLogger("test.logs")
    log.info("hidden")
    log.warning("source %s: %s -> %s", "a", "ok", "error", extra={"event": "source_state"})
    (line,) = lines_of(stream)
    stamp, rest = line.split(" ", 1)
    assert RFC3339_UTC.match(stamp), stamp
    assert rest == "WARNING test.logs: source a: ok -> error"


def test_configure_again_changes_the_same_handler(stream: io.StringIO) -> None:
    root = logging.getLogger()
    configure(LogSettings("info", "text"), stream)
    count = len(root.handlers)
    assert logging.getLogger("httpx").level == logging.WARNING
    configure(LogSettings("debug", "json"))
    assert len(root.handlers) == count
    assert root.level == logging.DEBUG
    assert logging.getLogger("httpx").level == logging.DEBUG
    logging.getLogger("test.logs").debug("now visible")
    (line,) = lines_of(stream)
    assert json.loads(line)["msg"] == "now visible"


def test_log_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="log format 'xml'"):
        LogSettings("info", "xml")
    with pytest.raises(ValueError, match="log level 'loud'"):
        LogSettings("loud", "text")


# ------------------------------------------------------------------------------ a running app


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[dict[str, Any]]:
    """The fields of the records of event ``name``; each must format as one JSON line."""
    found = []
    formatter = JsonFormatter()
    for record in caplog.records:
        if getattr(record, "event", None) == name:
            line = formatter.format(record)
            assert "\n" not in line
            assert json.loads(line)["msg"] == record.getMessage()
            found.append(fields_of(record) | {"msg": record.getMessage()})
    return found


@pytest.mark.anyio
async def test_session_and_publish_lines(
    export_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with running_app(app_config(export_path)) as app:
        async with await RtrClient.connect(port_of(app)) as client:
            await client.reset(2)
            doc = base_export()
            doc["roas"].append(roa("198.51.100.0/24", 24, 64511))
            serial = await publish_and_wait(app, export_path, doc)
            notify = await client.receive_pdu()
            assert isinstance(notify, SerialNotify), notify
            assert notify.serial == serial
            delta = await client.serial(2, notify.session_id, 0)
            assert isinstance(delta, Response)
            assert len(delta.payload) == 1
        await wait_until(lambda: not app.server.connections, what="the close")
        state = app.state
        assert state is not None

    (opened,) = events(caplog, "session_open")
    assert opened["peer"].startswith("127.0.0.1:")
    (closed,) = [c for c in events(caplog, "session_close") if c["peer"] == opened["peer"]]
    assert closed["version"] == 2
    assert closed["session_id"] == state.session_ids.v2
    assert closed["serial"] == serial
    assert closed["reason"] == "peer closed"
    assert closed["reset_queries"] == closed["serial_queries"] == closed["notifies"] == 1
    assert closed["bytes_received"] == 8 + 12  # a Reset Query and a Serial Query
    assert closed["bytes_sent"] > 0
    assert 0 <= closed["duration_s"] < 30
    for fact in (opened["peer"], "version 2", f"serial {serial}", "20 bytes received"):
        assert fact in closed["msg"]

    first, second = events(caplog, "publish")
    assert first["serial"] == 0
    assert first["delta"] is None
    assert first["counts"]["vrp_v4"] == 9
    assert second["serial"] == serial == 1
    assert second["delta_size"] == 1
    assert second["delta"]["vrp_announce"] == 1
    assert second["counts"]["vrp_v4"] == 10
    assert second["session_ids"]["v2"] == state.session_ids.v2
    assert second["duration_s"] >= 0
    assert "delta of 1 changes: vrp_announce=1" in second["msg"]


@pytest.mark.anyio
async def test_source_state_changes_log_once_each(
    export_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with running_app(app_config(export_path)) as app:
        (source,) = app.sources
        write_export(export_path, '{"roas": [{"asn": "nonsense"}]}')
        await wait_until(lambda: source.status.state is SourceState.ERROR, what="the error")
        await anyio.sleep(0.3)  # about six polls of the same broken file
        write_export(export_path, '{"roas": [{"asn": "still nonsense"}]}')
        await anyio.sleep(0.2)  # another broken update: still in error, no new state line
        write_export(export_path, base_export())
        await wait_until(lambda: source.status.state is SourceState.OK, what="the recovery")

    changes = events(caplog, "source_state")
    assert [(c["old"], c["new"]) for c in changes] == [
        ("starting", "ok"),
        ("ok", "error"),
        ("error", "ok"),
    ]
    failed = changes[1]
    assert failed["source"] == str(export_path)
    assert failed["kind"] == "file"
    assert failed["error_class"] == "format"
    assert "roas[0]" in failed["reason"]
    assert f"source {export_path}: ok -> error (format error: roas[0]" in failed["msg"]
    assert changes[2]["error_class"] is None
