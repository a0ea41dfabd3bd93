"""The query API: RFC 6811 validity and ASPA path verification against the served set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rtr_server.http.queries import parse_path
from snapshot.queries import Direction, verify_as_path
from tests.http.helpers import Running, http_app_config, running_http_app
from tests.server.helpers import aspa, export, roa, write_export

pytestmark = pytest.mark.anyio

DOC = export(
    roas=[
        roa("192.0.2.0/24", 24, 64496),
        roa("192.0.2.0/24", 26, 64497),
        roa("198.51.100.0/24", 24, 0),
        roa("2001:db8::/32", 48, 64498),
    ],
    aspas=[
        aspa(64500, [64501]),
        aspa(64501, [64502]),
        aspa(64502, [0]),  # no providers
    ],
)


@pytest.fixture
def doc_path(tmp_path: Path) -> Path:
    path = tmp_path / "export.json"
    write_export(path, DOC)
    return path


def vrp(prefix: str, max_length: int, asn: int) -> dict[str, Any]:
    return {"asn": f"AS{asn}", "prefix": prefix, "max_length": max_length}


VALIDITY_CASES = {
    "valid": (
        "/api/v1/validity/AS64496/192.0.2.0/24",
        "valid",
        None,
        {
            "matched": [vrp("192.0.2.0/24", 24, 64496)],
            "unmatched_as": [vrp("192.0.2.0/24", 26, 64497)],
            "unmatched_length": [],
        },
    ),
    "invalid-length": (
        "/api/v1/validity/AS64496/192.0.2.0/25",
        "invalid",
        "length",
        {
            "matched": [],
            "unmatched_as": [vrp("192.0.2.0/24", 26, 64497)],
            "unmatched_length": [vrp("192.0.2.0/24", 24, 64496)],
        },
    ),
    "invalid-as": (
        "/api/v1/validity/as64499/192.0.2.0/24",
        "invalid",
        "as",
        {
            "matched": [],
            "unmatched_as": [vrp("192.0.2.0/24", 24, 64496), vrp("192.0.2.0/24", 26, 64497)],
            "unmatched_length": [],
        },
    ),
    "as0-never-matches": (
        "/api/v1/validity/AS0/198.51.100.0/24",
        "invalid",
        "as",
        {"matched": [], "unmatched_as": [vrp("198.51.100.0/24", 24, 0)], "unmatched_length": []},
    ),
    "not-found": (
        "/api/v1/validity/AS64496/203.0.113.0/24",
        "not-found",
        None,
        {"matched": [], "unmatched_as": [], "unmatched_length": []},
    ),
    "ipv6-in-path": (
        "/api/v1/validity/AS64498/2001:db8:1::/48",
        "valid",
        None,
        {"matched": [vrp("2001:db8::/32", 48, 64498)], "unmatched_as": [], "unmatched_length": []},
    ),
    "query-form": (
        "/api/v1/validity?asn=64498&prefix=2001%3Adb8%3A%3A%2F49",
        "invalid",
        "length",
        {"matched": [], "unmatched_as": [], "unmatched_length": [vrp("2001:db8::/32", 48, 64498)]},
    ),
}


async def test_validity(doc_path: Path) -> None:
    async with running_http_app(http_app_config(doc_path)) as run:
        assert run.app.state is not None
        for name, (url, state, reason, vrps) in VALIDITY_CASES.items():
            response = await run.get(url)
            assert response.status_code == 200, (name, response.text)
            body = response.json()
            assert body["serial"] == run.app.state.serial.value
            route = body["validated_route"]
            validity = route["validity"]
            assert validity["state"] == state, name
            assert validity.get("reason") == reason, name
            assert validity["VRPs"] == vrps, name
            assert validity["description"]
        route = (await run.get("/api/v1/validity/AS64496/192.0.2.0/24")).json()["validated_route"]
        assert route["route"] == {"origin_asn": "AS64496", "prefix": "192.0.2.0/24"}


@pytest.mark.parametrize(
    ("url", "mentions"),
    [
        ("/api/v1/validity/AS64496/192.0.2.1/24", "host bits"),
        ("/api/v1/validity/ASX/192.0.2.0/24", "not an AS number"),
        ("/api/v1/validity/AS4294967296/192.0.2.0/24", "asn"),
        ("/api/v1/validity/AS64496", "prefix: missing"),
        ("/api/v1/validity/AS64496/not-a-prefix", "not-a-prefix"),
        ("/api/v1/validity?asn=AS1", "prefix: missing"),
    ],
)
async def test_validity_bad_requests(doc_path: Path, url: str, mentions: str) -> None:
    async with running_http_app(http_app_config(doc_path)) as run:
        response = await run.get(url)
        assert response.status_code == 400
        assert mentions in response.json()["error"]


async def aspa_query(run: Running, query: str) -> dict[str, Any]:
    response = await run.get("/api/v1/aspa?" + query)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_aspa_path_verification(doc_path: Path) -> None:
    async with running_http_app(http_app_config(doc_path)) as run:
        # Neighbour first: 64500 (origin) -> its provider 64501 -> its provider 64502.
        up = await aspa_query(run, "path=AS64502,AS64501,AS64500")
        assert up["state"] == "valid"
        assert up["direction"] == "upstream"
        assert up["path"] == ["AS64502", "AS64501", "AS64500"]
        assert up["hops"] == [
            {
                "customer": "AS64500",
                "provider": "AS64501",
                "up": "Provider+",
                "down": "Not Provider+",
            },
            {
                "customer": "AS64501",
                "provider": "AS64502",
                "up": "Provider+",
                "down": "Not Provider+",
            },
        ]
        assert up["ramps"]["length"] == 3
        # 64501 does not list 64500 as a provider: a route leak.
        assert (await aspa_query(run, "path=AS64500,AS64501"))["state"] == "invalid"
        assert (await aspa_query(run, "path=64503,64500"))["state"] == "invalid"
        # Nobody attested anything: unknown.
        assert (await aspa_query(run, "path=AS65001,AS65002"))["state"] == "unknown"
        # Prepends collapse.
        prepended = await aspa_query(run, "path=AS64501,AS64501,AS64500")
        assert prepended["state"] == "valid"
        assert len(prepended["hops"]) == 1
        # An AS_SET makes the path invalid; it is shown as a sorted list.
        with_set = await aspa_query(run, "path=AS64501,%7BAS2%20AS1%7D")
        assert with_set["state"] == "invalid"
        assert with_set["path"] == ["AS64501", ["AS1", "AS2"]]
        assert "hops" not in with_set
        # The first AS must be the neighbour when one is named.
        named = await aspa_query(run, "path=AS64501,AS64500&neighbor=AS64999")
        assert (named["state"], named["neighbor_as"]) == ("invalid", "AS64999")
        # Downstream (from a provider) agrees with the library on a few paths.
        assert run.app.state is not None
        snapshot = run.app.state.snapshot
        for path in ([64501, 64500], [64500, 64501, 64502], [64502, 64503, 64500]):
            text = ",".join(f"AS{a}" for a in path)
            got = await aspa_query(run, f"path={text}&direction=downstream")
            assert got["state"] == verify_as_path(snapshot, path, Direction.DOWNSTREAM).value


@pytest.mark.parametrize(
    ("query", "mentions"),
    [
        ("path=", "path: missing"),
        ("direction=upstream", "path: missing"),
        ("path=AS1,ASX", "not an AS number"),
        ("path=AS1&direction=sideways", "direction"),
        ("path=AS1,%7BAS2", "not closed"),
        ("path=AS1&neighbor=foo", "neighbor"),
    ],
)
async def test_aspa_bad_requests(doc_path: Path, query: str, mentions: str) -> None:
    async with running_http_app(http_app_config(doc_path)) as run:
        response = await run.get("/api/v1/aspa?" + query)
        assert response.status_code == 400
        assert mentions in response.json()["error"]


def test_parse_path() -> None:
    assert parse_path("AS1, as2 ,3") == [1, 2, 3]
    assert parse_path("{AS1;AS2},AS3") == [frozenset({1, 2}), 3]
    assert parse_path("AS3,{1 2, 4}") == [3, frozenset({1, 2, 4})]
    with pytest.raises(ValueError, match="empty AS_SET"):
        parse_path("{}")
    with pytest.raises(ValueError, match="after an AS_SET"):
        parse_path("{1}2")
    with pytest.raises(ValueError, match="more than"):
        parse_path(",".join(["1"] * 600))
