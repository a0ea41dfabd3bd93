"""``rtr-serve dump``: a real rtr-serve (loopback TCP) and StayRTR 0.5, read as a router."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from snapshot.kinds import PayloadKind
from snapshot.model import Aspa, RouterKey, Vrp
from snapshot.snapshot import Snapshot
from tests.server.helpers import (
    app_config,
    base_export,
    port_of,
    publish_and_wait,
    roa,
    updated_export,
    write_export,
)
from tests.server.helpers import running_app as running_core_app
from tests.tools.helpers import rtr_serve, stayrtr_export
from tests.upstream.rtr_source_helpers import free_port, running_stayrtr
from upstream import router_fetch
from upstream.json_format import parse_export
from upstream.router_fetch import CacheAddress, FetchError, fetch, parse_cache_url

pytestmark = pytest.mark.anyio


def _only(snapshot: Snapshot, version: int) -> Snapshot:
    """What a router of ``version`` is served of ``snapshot``."""
    keep = {0: {PayloadKind.VRP}, 1: {PayloadKind.VRP, PayloadKind.ROUTER_KEY}}.get(version)
    if keep is None:
        return snapshot
    keys = snapshot.router_keys if PayloadKind.ROUTER_KEY in keep else ()
    return Snapshot(snapshot.v4, snapshot.v6, keys, ())


def test_urls() -> None:
    assert parse_cache_url("rtr://127.0.0.1") == CacheAddress("127.0.0.1", 323)
    assert parse_cache_url("rtrs://cache.example") == CacheAddress("cache.example", 324, tls=True)
    assert parse_cache_url("rtrs://[::1]:9") == CacheAddress("::1", 9, tls=True)
    assert parse_cache_url("rtr://h:8323", tls=True) == CacheAddress("h", 8323, tls=True)
    with pytest.raises(ValueError, match="expected rtr://"):
        parse_cache_url("http://h")


@pytest.mark.parametrize("version", [2, 1, 0])
async def test_full_dump_is_what_rtr_serve_serves(tmp_path: Path, version: int) -> None:
    path = tmp_path / "export.json"
    write_export(path, base_export())
    async with running_core_app(app_config(path)) as app:
        assert app.state is not None
        result = await fetch(
            CacheAddress("127.0.0.1", port_of(app)), version=version, negotiate=False
        )
        assert result.snapshot == _only(app.state.snapshot, version)
        assert result.version == version
        assert result.session_id == getattr(app.state.session_ids, f"v{version}")
        assert result.serial == app.state.serial.value
        assert (result.timers is None) == (version == 0)


async def test_serial_query_lists_the_delta(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    write_export(path, base_export())
    async with running_core_app(app_config(path)) as app:
        assert app.state is not None
        before = app.state.snapshot
        session = app.state.session_ids.v2
        await publish_and_wait(app, path, updated_export())
        after = app.state.snapshot
        result = await fetch(CacheAddress("127.0.0.1", port_of(app)), serial_query=(session, 0))
    assert result.snapshot is None
    assert result.serial == 1
    vrps = {c.record: c.announce for c in result.changes if isinstance(c.record, Vrp)}
    assert {v for v, a in vrps.items() if a} == set(after.vrps()) - set(before.vrps())
    assert {v for v, a in vrps.items() if not a} == set(before.vrps()) - set(after.vrps())
    keys = [c for c in result.changes if isinstance(c.record, RouterKey)]
    assert [c.announce for c in keys] == [True]
    withdrawn_aspas = [
        c.record.customer for c in result.changes if not c.announce and isinstance(c.record, Aspa)
    ]
    assert withdrawn_aspas == [64510]


async def test_cli_json_reads_back_and_csv_has_every_record(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    write_export(path, base_export())
    async with running_core_app(app_config(path)) as app:
        assert app.state is not None
        url = f"rtr://127.0.0.1:{port_of(app)}"
        ran = await rtr_serve("dump", url)
        assert ran.returncode == 0, ran.stderr
        doc = json.loads(ran.stdout)
        assert doc["metadata"]["version"] == 2
        assert doc["metadata"]["serial"] == 0
        assert doc["metadata"]["session_id"] == app.state.session_ids.v2
        assert doc["metadata"]["expire"] == 3600
        payload = parse_export(ran.stdout)
        assert payload.snapshot_at(0) == app.state.snapshot
        ran = await rtr_serve("dump", url, "--format", "csv", "--version", "1")
        assert ran.returncode == 0, ran.stderr
        rows = list(csv.DictReader(io.StringIO(ran.stdout)))
        snapshot = app.state.snapshot
        assert len(rows) == snapshot.vrp_count + len(snapshot.router_keys)
        assert {r["kind"] for r in rows} == {"vrp", "router_key"}
        assert {r["action"] for r in rows} == {"announce"}


async def test_cli_failures_are_one_line(tmp_path: Path) -> None:
    ran = await rtr_serve("dump", f"rtr://127.0.0.1:{free_port()}")
    assert ran.returncode == 1
    assert ran.stderr.startswith("rtr-serve dump: cannot connect to rtr://127.0.0.1:")
    assert ran.stderr.count("\n") == 1
    ran = await rtr_serve("dump", "http://127.0.0.1:1")
    assert ran.returncode == 2
    assert "expected rtr://" in ran.stderr
    ran = await rtr_serve("dump", "rtr://127.0.0.1:1", "--serial-query", "7")
    assert ran.returncode == 2
    assert "SESSION:SERIAL" in ran.stderr
    path = tmp_path / "export.json"
    write_export(path, base_export())
    async with running_core_app(app_config(path)) as app:
        url = f"rtr://127.0.0.1:{port_of(app)}"
        ran = await rtr_serve("dump", url, "--serial-query", "1:0")
        assert app.state is not None
        assert app.state.session_ids.v2 != 1  # so the query names an unknown session
        assert ran.returncode == 1
        assert "Cache Reset" in ran.stderr
        assert ran.stderr.count("\n") == 1
        assert ran.stdout == ""


async def test_no_data_is_an_error(tmp_path: Path) -> None:
    async with running_core_app(app_config(tmp_path / "missing.json"), wait_for_data=False) as app:
        with pytest.raises(FetchError, match="no data yet"):
            await fetch(CacheAddress("127.0.0.1", port_of(app)))


async def test_stayrtr_is_followed_down_to_v1(tmp_path: Path) -> None:
    """StayRTR 0.5 sends the pre-standard ASPA layout at v2: the dump speaks v1 and says so."""
    doc = stayrtr_export()
    cache = tmp_path / "stayrtr.json"
    cache.write_text(json.dumps(doc))
    async with running_stayrtr(cache, tmp_path / "stayrtr.log") as port:
        ran = await rtr_serve("dump", f"rtr://127.0.0.1:{port}")
        assert ran.returncode == 0, ran.stderr
        out = json.loads(ran.stdout)
        assert out["metadata"]["version"] == 1
        assert "pre-standard" in " ".join(out["metadata"]["downgrades"])
        assert "version 2 -> 1" in ran.stderr
        want = {(r["prefix"], r["maxLength"], r["asn"]) for r in doc["roas"]}
        got = {(r["prefix"], r["maxLength"], r["asn"]) for r in out["roas"]}
        assert got == want
        ran = await rtr_serve("dump", f"rtr://127.0.0.1:{port}", "--version", "2")
        assert ran.returncode == 1
        assert ran.stderr.count("\n") == 1
        assert "version 2" in ran.stderr


def test_roa_helper_shape() -> None:
    """The rpki-client entry shape the dump writes is the one the test exports use."""
    entry = roa("192.0.2.0/24", 24, 64496)
    assert {"asn", "prefix", "maxLength"} <= entry.keys()


async def test_an_incremental_answer_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "export.json"
    write_export(path, base_export())
    async with running_core_app(app_config(path)) as app:
        assert app.state is not None
        session = app.state.session_ids.v2
        await publish_and_wait(app, path, updated_export())
        address = CacheAddress("127.0.0.1", port_of(app))
        monkeypatch.setattr(router_fetch, "MAX_CHANGES", 2)
        with pytest.raises(FetchError, match="exceeds 2 records"):
            await fetch(address, serial_query=(session, 0))
        monkeypatch.setattr(router_fetch, "MAX_CHANGES", 100)
        monkeypatch.setattr(router_fetch, "MAX_ANSWER_BYTES", 100)
        with pytest.raises(FetchError, match="exceeds 100 octets"):
            await fetch(address, serial_query=(session, 0))
