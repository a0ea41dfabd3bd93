"""/metrics scraped with httpx from a running app: values after known router and source actions."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from rtr_protocol import CloseReason, ErrorCode
from rtr_server.http.view import SOURCE_STATES
from tests.http.helpers import (
    Metrics,
    Running,
    http_app_config,
    http_settings,
    running_http_app,
)
from tests.server.helpers import (
    base_export,
    expected_state,
    publish_and_wait,
    updated_export,
    wait_until,
    write_export,
)
from tests.server.rtr_client import RtrClient, raw_header
from upstream.status import SourceState

pytestmark = pytest.mark.anyio

README = Path(__file__).resolve().parents[2] / "README.md"


async def answered(run: Running) -> None:
    """Wait until every connected router's last response was completely written (and counted)."""
    await wait_until(
        lambda: all(c.session.last_serial is not None for c in run.app.server.connections),
        what="the responses to be written",
    )


def test_source_states_match_upstream() -> None:
    assert list(SOURCE_STATES) == [s.value for s in SourceState]


async def test_reset_query_and_second_source_state(export_path: Path, tmp_path: Path) -> None:
    missing = tmp_path / "not-yet.json"
    config = http_app_config(export_path, missing)
    size = (await anyio.Path(export_path).stat()).st_size
    async with running_http_app(config) as run:
        app = run.app
        assert app.state is not None
        before = await run.metrics()
        assert before.get("rtr_queries_total", type="reset") == 0
        assert before.get("rtr_clients", version="2") == 0

        async with await RtrClient.connect(run.rtr_port) as client:
            response = await client.reset(2)
            await answered(run)
            m = await run.metrics()
            assert m.get("rtr_queries_total", type="reset") == 1
            assert m.get("rtr_queries_total", type="serial") == 0
            assert m.get("rtr_clients", version="2") == 1
            assert m.get("rtr_clients", version="none") == 0
            assert m.get("rtr_connections_total") == 1
            assert m.get("rtr_sent_bytes_total") == app.server.stats.bytes_sent > 0

        serial = response.end_of_data.serial
        expected = expected_state(base_export(), 2)
        v4 = sum(1 for p in expected.prefixes if p[0] == 4)
        assert m.get("rtr_serial") == serial == app.state.serial.value
        assert m.get("rpki_vrps", ip_version="4") == v4
        assert m.get("rpki_vrps", ip_version="6") == len(expected.prefixes) - v4
        assert m.get("rpki_aspas") == len(expected.aspas)
        assert m.get("rpki_router_keys") == len(expected.keys)
        ids = app.state.session_ids
        assert m.get("rtr_session_id", version="2") == ids.v2 == response.cache_response.session_id
        assert m.get("rtr_session_id", version="0") == ids.v0
        assert m.get("rtr_publishes_total") == 1
        assert m.get("rtr_healthy", reason="ok") == 1

        a, b = str(export_path), str(missing)
        assert m.get("rpki_source_state", source=a, state="ok") == 1
        assert m.get("rpki_source_state", source=a, state="waiting") == 0
        assert m.get("rpki_source_state", source=b, state="waiting") == 1
        assert m.get("rpki_source_state", source=b, state="ok") == 0
        assert m.get("rpki_source_state", source=b, kind="file", state="waiting") == 1
        # A source counts what it loaded: the expired IPv4 entry of base_export too.
        assert m.get("rpki_source_records", source=a, kind="vrp_v4") == v4 + 1
        assert m.value("rpki_source_records", source=b, kind="vrp_v4") is None
        assert m.get("rpki_source_read_bytes_total", source=a) == size
        assert m.get("rpki_source_syncs_total", source=a) >= 1
        assert m.get("rpki_source_last_success_age_seconds", source=a) >= 0
        assert m.value("rpki_source_last_success_age_seconds", source=b) is None
        assert m.get("rpki_group_active", group="default", kind="vrp") == 1
        assert m.get("rpki_group_started", group="default") == 1

        # The connection closed: the gauge drops and the reason is counted.
        await wait_until(lambda: not app.server.connections, what="the close")
        after = await run.metrics()
        assert after.get("rtr_clients", version="2") == 0
        assert after.get("rtr_disconnects_total", reason="peer_closed") == 1


async def test_serial_query_notify_errors_and_router_lag(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    write_export(path, base_export())
    config = http_app_config(path, http=http_settings(router_lag=True))
    async with running_http_app(config) as run:
        app = run.app
        async with await RtrClient.connect(run.rtr_port) as client:
            full = await client.reset(1)
            session, serial = full.cache_response.session_id, full.end_of_data.serial
            await answered(run)
            m = await run.metrics()
            peers = [labels for labels, _ in m.samples["rtr_router_serial_lag"]]
            assert len(peers) == 1
            assert peers[0]["version"] == "1"
            assert m.get("rtr_router_serial_lag", version="1") == 0

            new_serial = await publish_and_wait(app, path, updated_export())
            await wait_until(lambda: app.server.stats.notifies == 1, what="the notify")
            m = await run.metrics()
            assert m.get("rtr_serial") == new_serial
            assert m.get("rtr_notifies_total") == 1
            assert m.get("rtr_publishes_total") == 2
            # The router holds the old serial until it asks for the delta.
            assert m.get("rtr_router_serial_lag", version="1") == 1

            await client.serial(1, session, serial)
            await wait_until(
                lambda: all(
                    c.session.last_serial == app.server.state.serial  # type: ignore[union-attr]
                    for c in app.server.connections
                ),
                what="the delta to be sent",
            )
            m = await run.metrics()
            assert m.get("rtr_queries_total", type="serial") == 1
            assert m.get("rtr_router_serial_lag", version="1") == 0

        # A query of an unknown version gets Error 4 (counted), then the router leaves.
        async with await RtrClient.connect(run.rtr_port) as bad:
            await bad.send(raw_header(9, 2, 0, 8))  # a Reset Query of version 9
            error = await bad.read_error()
            assert error.code == ErrorCode.UNSUPPORTED_PROTOCOL_VERSION
        await wait_until(lambda: not app.server.connections, what="both closes")
        m = await run.metrics()
        assert m.get("rtr_errors_sent_total", code="4", name="unsupported_protocol_version") == 1
        assert m.get("rtr_disconnects_total", reason="peer_closed") == 2
        assert m.value("rtr_router_serial_lag") is None


async def test_router_lag_is_opt_in(export_path: Path) -> None:
    async with running_http_app(http_app_config(export_path)) as run:
        async with await RtrClient.connect(run.rtr_port) as client:
            await client.reset(2)
            m = await run.metrics()
        assert "rtr_router_serial_lag" not in m.samples
        assert "rtr_router_serial_lag" not in m.text


@dataclass
class _PersisterStatus:
    backend: str = "sqlite"
    path: str = "/var/lib/rtr-serve/state.db"
    last_persisted_id: str | None = "59616-3"
    last_commit_wall: float | None = 1_800_000_000.0
    commits: int = 4
    failures: int = 1
    last_error: str | None = "disk full"
    stopped: bool = False
    error_code: str | None = None
    error_details: dict[str, str] | None = None


@dataclass
class _Persister:
    """Stands in for the persistence layer, which a later change adds (only its status)."""

    status: _PersisterStatus


async def test_persistence_metrics_appear_only_with_a_persister(
    export_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_http_app(http_app_config(export_path)) as run:
        m = await run.metrics()
        assert not [n for n in m.samples if n.startswith("rtr_persistence")]
        # A stand-in for the persister that a client's state file would hold.
        stand_in = _Persister(_PersisterStatus())
        monkeypatch.setattr(type(run.app), "persister", property(lambda _: stand_in))
        m = await run.metrics()
        info = m.get(
            "rtr_persistence_info",
            backend="sqlite",
            path="/var/lib/rtr-serve/state.db",
            last_persisted_id="59616-3",
        )
        assert info == 1
        assert m.get("rtr_persistence_commits_total") == 4
        assert m.get("rtr_persistence_failures_total") == 1
        assert m.get("rtr_persistence_last_commit_timestamp_seconds") == 1_800_000_000.0
        status = (await run.get("/status")).json()
        assert status["persistence"]["last_persisted_id"] == "59616-3"
        assert status["persistence"]["last_error"] == "disk full"


async def test_http_requests_are_counted(export_path: Path) -> None:
    async with running_http_app(http_app_config(export_path)) as run:
        assert (await run.get("/healthz")).status_code == 200
        assert (await run.get("/nope")).status_code == 404
        m = await run.metrics()
        assert m.get("rtr_http_requests_total", endpoint="/healthz", code="200") == 1
        assert m.get("rtr_http_requests_total", endpoint="other", code="404") == 1
        assert m.get("rtr_http_connections_total") >= 1


def test_disconnect_reasons_are_the_documented_labels() -> None:
    """The close reasons are one bounded set, and the README names each of its labels."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    (row,) = [line for line in readme.splitlines() if line.startswith("| `rtr_disconnects_total`")]
    documented = re.findall(r"`([a-z_]+)`", row.split("|")[4])
    assert documented == [reason.value for reason in CloseReason]


def test_every_metric_is_documented() -> None:
    """Each family name in the code appears in the README's metrics table."""
    sources = Path(__file__).resolve().parents[2] / "rtr_server" / "http"
    names = set()
    for module in ("metrics.py", "api.py"):
        text = (sources / module).read_text()
        names |= set(re.findall(r'"((?:rpki|rtr)_[a-z0-9_]+)"', text))
    assert "rtr_router_serial_lag" in names
    readme = README.read_text()
    missing = sorted(n for n in names if f"`{n.removesuffix('_total')}" not in readme)
    assert not missing, f"metrics missing from README.md: {missing}"


def test_metrics_parse_helper() -> None:
    m = Metrics('# TYPE x gauge\nx{a="1"} 2.0\nx{a="2"} 3.0\n')
    assert m.get("x", a="2") == 3.0
    assert m.value("x", a="3") is None
