"""``rtr-serve compare``: a real rtr-serve, its export, StayRTR 0.5, and the --watch metrics."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest

from rtr_server import compare_sides
from rtr_server.compare_diff import compare_snapshots
from rtr_server.compare_sides import parse_side
from snapshot.model import Aspa, Vrp
from snapshot.snapshot import Snapshot
from tests.http.helpers import http_app_config, running_http_app
from tests.server.helpers import (
    app_config,
    base_export,
    export,
    port_of,
    publish_and_wait,
    roa,
    updated_export,
    write_export,
)
from tests.server.helpers import running_app as running_core_app
from tests.tools.helpers import rtr_serve, stayrtr_export
from tests.upstream.rtr_source_helpers import free_port, running_stayrtr

pytestmark = pytest.mark.anyio


def test_differences_by_kind() -> None:
    a = Snapshot.build(
        [Vrp.parse("192.0.2.0/24", 24, 64496), Vrp.parse("2001:db8::/32", 48, 64497)],
        [Aspa(64500, (64501,)), Aspa(64510, (0,))],
    )
    b = Snapshot.build(
        [Vrp.parse("192.0.2.0/24", 24, 64496), Vrp.parse("198.51.100.0/24", 24, 64499)],
        [Aspa(64500, (64501, 64502)), Aspa(64510, (0,))],
    )
    diff = compare_snapshots(a, b)
    assert not diff.same
    assert diff.counts() == {"vrps": (1, 1), "aspas": (1, 1), "router_keys": (0, 0)}
    assert [str(r) for r in diff.only_a["vrps"]] == ["2001:db8::/32-48 AS64497"]
    assert [str(r) for r in diff.only_b["aspas"]] == ["AS64500 -> AS64501, AS64502"]
    lines = diff.lines(2)
    assert lines[0] == "vrps: 1 only in A, 1 only in B"
    assert lines[-1].startswith("... 2 more")
    assert compare_snapshots(a, a).same


def test_sides() -> None:
    assert parse_side("rtr://127.0.0.1:8323").address is not None
    assert parse_side("https://x/rpki.json").location == "https://x/rpki.json"
    assert parse_side("/tmp/a.json").location == "/tmp/a.json"
    with pytest.raises(ValueError, match="expected"):
        parse_side("ftp://x/a.json")


async def test_cache_against_its_own_export(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    write_export(path, base_export())
    other = tmp_path / "other.json"
    write_export(other, updated_export())
    async with running_core_app(app_config(path)) as app:
        url = f"rtr://127.0.0.1:{port_of(app)}"
        ran = await rtr_serve("compare", url, str(path))
        assert (ran.returncode, ran.stdout) == (0, "same: both sides hold the same set\n")
        ran = await rtr_serve("compare", url, str(other))
        assert ran.returncode == 1, ran.stderr
        assert "vrps: 3 only in A, 3 only in B" in ran.stdout
        assert "  - 10.0.0.0/8-8 AS65000" in ran.stdout
        assert "  + 100.64.0.0/10-24 AS64501" in ran.stdout
        ran = await rtr_serve("compare", url, str(other), "--format", "json")
        assert ran.returncode == 1
        doc = json.loads(ran.stdout)
        assert doc["counts"]["router_keys"] == {"only_a": 0, "only_b": 1}
        assert {"asn": 64501, "prefix": "100.64.0.0/10", "maxLength": 24} in doc["only_b"]["vrps"]
        ran = await rtr_serve("compare", url, str(other), "--max-lines", "0")
        assert ran.returncode == 1
        assert not [line for line in ran.stdout.splitlines() if line.startswith("  ")]


async def test_unreadable_side_exits_2(tmp_path: Path) -> None:
    ran = await rtr_serve("compare", str(tmp_path / "nope.json"), f"rtr://127.0.0.1:{free_port()}")
    assert ran.returncode == 2
    lines = ran.stderr.splitlines()
    assert len(lines) == 2
    assert any("cannot read" in line for line in lines)
    assert any("cannot connect" in line for line in lines)
    ran = await rtr_serve("compare", "a.json", "b.json", "--rounds", "2")
    assert ran.returncode == 2
    assert "--watch" in ran.stderr


async def test_rtr_serve_against_stayrtr(tmp_path: Path) -> None:
    """StayRTR 0.5 is read at v1 (no ASPA): same VRPs as an rtr-serve without ASPA, then not."""
    doc = stayrtr_export()
    cache = tmp_path / "stayrtr.json"
    cache.write_text(json.dumps(doc))
    ours = tmp_path / "ours.json"
    write_export(ours, export(roas=doc["roas"]))
    async with (
        running_stayrtr(cache, tmp_path / "stayrtr.log") as port,
        running_core_app(app_config(ours)) as app,
    ):
        stay, mine = f"rtr://127.0.0.1:{port}", f"rtr://127.0.0.1:{port_of(app)}"
        ran = await rtr_serve("compare", mine, stay)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        await publish_and_wait(
            app, ours, export(roas=[*doc["roas"], roa("203.0.113.0/24", 24, 64511)])
        )
        ran = await rtr_serve("compare", mine, stay)
        assert ran.returncode == 1
        assert "  - 203.0.113.0/24-24 AS64511" in ran.stdout


def _metric(text: str, series: str) -> float | None:
    """The value of ``series`` (name and labels as Prometheus prints them) in ``text``."""
    for line in text.splitlines():
        if line.split(" ")[0] == series:
            return float(line.rsplit(" ", 1)[1])
    return None


@asynccontextmanager
async def watching(
    a: str, b: str, log: Path
) -> AsyncIterator[Callable[[Callable[[str], bool]], Awaitable[str]]]:
    """Run ``compare A B --watch 0.1 --http``; yields ``until(predicate)``, which scrapes
    /metrics until ``predicate(text)`` holds and returns that text."""
    http = free_port()
    command = [
        sys.executable, "-m", "rtr_server.cli", "compare", a, b,
        "--watch", "0.1", "--rounds", "1000", "--http", f"127.0.0.1:{http}",
    ]  # fmt: skip
    with log.open("wb") as out:
        process = await anyio.open_process(command, stderr=out)
        try:
            async with httpx.AsyncClient() as client:

                async def until(predicate: Callable[[str], bool]) -> str:
                    text = ""
                    with anyio.fail_after(20):
                        while not predicate(text):
                            await anyio.sleep(0.1)
                            try:
                                text = (await client.get(f"http://127.0.0.1:{http}/metrics")).text
                            except httpx.ConnectError:
                                continue
                    return text

                yield until
        finally:
            process.terminate()
            await process.wait()


def rounds(n: int) -> Callable[[str], bool]:
    """At least ``n`` rounds have run."""
    return lambda text: (_metric(text, "rtr_compare_rounds_total") or 0) >= n


async def test_watch_serves_metrics(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    write_export(path, base_export())
    other = tmp_path / "other.json"
    write_export(other, updated_export())
    async with running_core_app(app_config(path)) as app:
        assert app.state is not None
        url = f"rtr://127.0.0.1:{port_of(app)}"
        async with watching(url, str(other), tmp_path / "watch.log") as until:
            text = await until(rounds(2))
    assert "round 1: differ (vrps -3 +3" in (tmp_path / "watch.log").read_text()
    assert _metric(text, 'rtr_compare_differences{kind="vrps",side="a"}') == 3
    assert _metric(text, 'rtr_compare_differences{kind="router_keys",side="b"}') == 1
    assert _metric(text, "rtr_compare_same") == 0
    assert _metric(text, 'rtr_compare_serial{side="a"}') == app.state.serial.value
    assert _metric(text, 'rtr_compare_serial{side="b"}') is None  # an export has none
    assert (
        _metric(text, 'rtr_compare_records{kind="vrps",side="a"}') == app.state.snapshot.vrp_count
    )
    assert _metric(text, 'rtr_compare_read_errors_total{side="a"}') == 0
    age = _metric(text, 'rtr_compare_age_seconds{side="a"}')
    assert age is not None
    assert 0 <= age < 10


async def test_cache_against_its_json_over_http(tmp_path: Path) -> None:
    """Side B an http:// export: rtr-serve's own /json, which must hold what it serves."""
    path = tmp_path / "export.json"
    write_export(path, base_export())
    async with running_http_app(http_app_config(path)) as run:
        rtr, json_url = f"rtr://127.0.0.1:{run.rtr_port}", f"{run.base}/json"
        ran = await rtr_serve("compare", rtr, json_url)
        assert (ran.returncode, ran.stdout) == (0, "same: both sides hold the same set\n")
        await publish_and_wait(run.app, path, updated_export())
        other = tmp_path / "base.json"
        write_export(other, base_export())
        ran = await rtr_serve("compare", json_url, str(other), "--format", "json")
        assert ran.returncode == 1
        assert json.loads(ran.stdout)["counts"]["vrps"] == {"only_a": 3, "only_b": 3}
        ran = await rtr_serve("compare", f"{run.base}/nothing", rtr)
        assert ran.returncode == 2
        assert "HTTP 404" in ran.stderr


async def test_expired_export_entries_are_noted_and_reference_time_keeps_them(
    tmp_path: Path,
) -> None:
    """base_export has one VRP, one router key and one ASPA that expired in 2001."""
    path = tmp_path / "export.json"
    write_export(path, base_export())
    async with running_core_app(app_config(path)) as app:
        url = f"rtr://127.0.0.1:{port_of(app)}"
        ran = await rtr_serve("compare", url, str(path))
        assert ran.returncode == 0
        (note,) = ran.stderr.splitlines()
        assert note.startswith(f"rtr-serve compare: note: B ({path}): 3 entries had expired")
        # Evaluated in 2000 the three count again: the cache (which dropped them) differs.
        ran = await rtr_serve("compare", url, str(path), "--reference-time", "2000-01-01T00:00Z")
        assert ran.returncode == 1
        assert ran.stderr == ""
        assert "vrps: 0 only in A, 1 only in B" in ran.stdout
        assert "aspas: 0 only in A, 1 only in B" in ran.stdout
        assert "router_keys: 0 only in A, 1 only in B" in ran.stdout
    ran = await rtr_serve("compare", "a.json", "b.json", "--reference-time", "yesterday")
    assert ran.returncode == 2
    assert "not an ISO 8601 time" in ran.stderr


async def test_an_export_is_read_up_to_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "export.json"
    write_export(path, base_export())
    monkeypatch.setattr(compare_sides, "MAX_EXPORT_BYTES", 1000)
    async with running_http_app(http_app_config(path)) as run:
        for side in (parse_side(f"{run.base}/json"), parse_side(str(path))):
            with pytest.raises(compare_sides.SideError, match="larger than 1000 bytes"):
                await side.read(10.0)
        monkeypatch.setattr(compare_sides, "MAX_EXPORT_BYTES", 1 << 20)
        state = await parse_side(f"{run.base}/json").read(10.0)
        assert run.app.state is not None
        assert state.snapshot == run.app.state.snapshot


async def test_watch_counts_a_failing_side_and_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    write_export(path, base_export())
    missing = tmp_path / "later.json"
    async with running_core_app(app_config(path)) as app:
        url = f"rtr://127.0.0.1:{port_of(app)}"
        async with watching(url, str(missing), tmp_path / "watch.log") as until:
            text = await until(rounds(2))
            assert (_metric(text, 'rtr_compare_read_errors_total{side="b"}') or 0) >= 2
            assert _metric(text, 'rtr_compare_read_errors_total{side="a"}') == 0
            assert _metric(text, "rtr_compare_same") is None  # never compared
            assert _metric(text, 'rtr_compare_differences{kind="vrps",side="a"}') is None
            write_export(missing, base_export())  # B appears: a later round compares
            text = await until(lambda t: _metric(t, "rtr_compare_same") == 1)
            assert _metric(text, 'rtr_compare_differences{kind="vrps",side="b"}') == 0
    assert "cannot read" in (tmp_path / "watch.log").read_text()
