"""/json: the served set as rpki-client JSON that parses back to the same set; ETag, 304, gzip."""

from __future__ import annotations

import bz2
import gzip
import json
import time
from pathlib import Path

import pytest

from rtr_server.http.export import GZIP_LEVEL, ExportCache, encode_export
from snapshot.publisher import Publisher, SessionIds
from tests.http.helpers import http_app_config, running_http_app
from tests.server.helpers import base_export, publish_and_wait, updated_export, write_export
from tests.upstream.helpers import DATA
from upstream.json_format import parse_export

pytestmark = pytest.mark.anyio

REAL = DATA / "rpkilog" / "rpkiclient_summary_20250720T093135Z.json.bz2"
REAL_TIME = 1_753_003_893  # 2025-07-20T09:31:33Z, the export's build time


async def test_json_round_trip_etag_and_304(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    write_export(path, base_export())
    async with running_http_app(http_app_config(path)) as run:
        state = run.app.state
        assert state is not None
        response = await run.get("/json", headers={"Accept-Encoding": "identity"})
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        etag = response.headers["etag"]
        assert etag == f'"{state.session_ids.v2}-{state.serial.value}"'
        # The export parses back, through the project's own parser, to exactly the served set.
        assert parse_export(response.content).snapshot_at(0) == state.snapshot
        doc = response.json()
        assert set(doc) == {"metadata", "roas", "bgpsec_keys", "aspas"}
        assert doc["metadata"]["serial"] == state.serial.value
        assert doc["metadata"]["uniquevrps"] == len(doc["roas"]) == state.snapshot.vrp_count
        assert doc["metadata"]["session_ids"]["v2"] == state.session_ids.v2
        assert all(isinstance(r["asn"], int) for r in doc["roas"])
        assert {a["customer_asid"] for a in doc["aspas"]} == {
            a.customer for a in state.snapshot.aspas
        }

        not_modified = await run.get(
            "/json", headers={"If-None-Match": etag, "Accept-Encoding": "identity"}
        )
        assert not_modified.status_code == 304
        assert not_modified.content == b""
        assert not_modified.headers["etag"] == etag
        other = await run.get("/json", headers={"If-None-Match": '"1-2", W/' + etag})
        assert other.status_code == 304
        stale = await run.get(
            "/json", headers={"If-None-Match": '"0-0"', "Accept-Encoding": "identity"}
        )
        assert stale.status_code == 200

        head = await run.client.head("/json", headers={"Accept-Encoding": "identity"})
        assert head.status_code == 200
        assert head.content == b""
        assert int(head.headers["content-length"]) == len(response.content)
        assert run.app.http is not None
        assert run.app.http.exports.encodes == 1  # encoded once for every request above

        # A new serial: a new tag and content; the old tag no longer matches.
        serial = await publish_and_wait(run.app, path, updated_export())
        fresh = await run.get("/json", headers={"If-None-Match": etag, "Accept-Encoding": ""})
        assert fresh.status_code == 200
        assert fresh.headers["etag"] == f'"{state.session_ids.v2}-{serial}"'
        assert run.app.state is not None
        assert parse_export(fresh.content).snapshot_at(0) == run.app.state.snapshot


async def test_gzip_representation(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    write_export(path, base_export())
    async with running_http_app(http_app_config(path)) as run:
        plain = await run.get("/json", headers={"Accept-Encoding": "identity"})
        assert "content-encoding" not in plain.headers
        # httpx decodes gzip itself; read the raw bytes to see the encoding.
        async with run.client.stream(
            "GET", "/json", headers={"Accept-Encoding": "gzip"}
        ) as response:
            raw = b"".join([chunk async for chunk in response.aiter_raw()])
        assert response.headers["content-encoding"] == "gzip"
        assert response.headers["vary"] == "Accept-Encoding"
        assert gzip.decompress(raw) == plain.content
        gz_tag = response.headers["etag"]
        assert gz_tag == "W/" + plain.headers["etag"]
        refused = await run.get("/json", headers={"Accept-Encoding": "gzip;q=0"})
        assert "content-encoding" not in refused.headers
        again = await run.get("/json", headers={"Accept-Encoding": "gzip", "If-None-Match": gz_tag})
        assert again.status_code == 304
        assert again.headers["etag"] == gz_tag
        # Either tag validates either representation (weak comparison).
        cross = await run.get(
            "/json", headers={"Accept-Encoding": "identity", "If-None-Match": gz_tag}
        )
        assert cross.status_code == 304


def test_encoding_is_deterministic_and_ascending() -> None:
    publisher = Publisher(SessionIds(1, 2, 3))
    state = publisher.publish(parse_export(json.dumps(base_export())).snapshot_at(0))
    assert state is not None
    first = encode_export(state, buildtime=0)
    assert first == encode_export(state, buildtime=0)
    doc = json.loads(first)
    assert doc["metadata"]["buildtime"] == "1970-01-01T00:00:00Z"
    families = [":" in r["prefix"] for r in doc["roas"]]
    assert families == sorted(families)  # IPv4 first
    assert ExportCache.etag(state) == '"3-0"'


@pytest.mark.slow
def test_real_table_encoding_time_and_size() -> None:
    """The 723k-VRP global table: encode (plain, then gzip) and parse back; numbers printed."""
    snapshot = parse_export(bz2.decompress(REAL.read_bytes())).snapshot_at(REAL_TIME)
    state = Publisher(SessionIds(1, 2, 3)).publish(snapshot)
    assert state is not None
    started = time.perf_counter()
    body = encode_export(state, buildtime=REAL_TIME)
    encoded = time.perf_counter()
    packed = gzip.compress(body, compresslevel=GZIP_LEVEL)
    done = time.perf_counter()
    print(
        f"\n/json of {snapshot!r}: {len(body):,} bytes in {encoded - started:.2f} s; "
        f"gzip {len(packed):,} bytes in {done - encoded:.2f} s more"
    )
    assert snapshot.vrp_count == 723_521
    assert parse_export(body).snapshot_at(0) == snapshot
