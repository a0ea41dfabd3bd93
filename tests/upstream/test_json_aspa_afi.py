"""P-27: ASPAs of the legacy per-family JSON layout keep their afi (1 IPv4, 2 IPv6) to the file.

rpki-client's 2022–23 ``provider_authorizations: {ipv4: [...], ipv6: [...]}`` gives each entry a
family; the current ``aspas`` layout has none (afi 0, both families). The afi is carried by the
payload (fast and slow parse alike), stored in ``aspas.afi``, covered by the digest and brought
back by recovery; serving still merges per customer. Real SQLite files, queried directly.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from persistence.backend import ThreadedBackend
from persistence.exchange import state_digest
from persistence.sqlite_backend import SQLiteBackend
from persistence.state import StateId
from snapshot.model import Aspa
from tests.upstream.helpers import dumps, roa
from tests.upstream.test_json_duplicates import W, restarted, state
from upstream.json_format import parse_export
from upstream.source import payload_identity

pytestmark = pytest.mark.anyio

E = W + 3600


def entry(customer: int, providers: list[int]) -> dict[str, Any]:
    return {"customer_asid": customer, "providers": providers, "expires": E}


def legacy(*, ipv6_first: bool = False, current: bool = False) -> dict[str, Any]:
    """A legacy export (IPv4 then IPv6 unless ``ipv6_first``), with a current section too."""
    families = {
        "ipv4": [entry(64496, [64497]), entry(64499, [0])],
        "ipv6": [entry(64496, [0]), entry(64500, [64510, 64511]), entry(64501, [1])],
    }
    if ipv6_first:
        families = {"ipv6": families["ipv6"], "ipv4": families["ipv4"]}
    doc: dict[str, Any] = {"roas": [roa("192.0.2.0/24", 24, 64496, expires=E)]}
    if current:
        doc["aspas"] = [entry(64502, [64503])]
    doc["provider_authorizations"] = families
    return doc


def slow(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with a payload-shaped object outside the sections: the parse takes its slow path."""
    return {**doc, "extra": {"note": roa("198.51.100.0/24", 24, 1, expires=E)}}


@pytest.mark.parametrize("path", ["fast", "slow"])
@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ({}, [(64496, 1), (64499, 1), (64496, 2), (64500, 2), (64501, 2)]),
        ({"ipv6_first": True}, [(64496, 2), (64500, 2), (64501, 2), (64496, 1), (64499, 1)]),
        (
            {"current": True},
            [(64502, 0), (64496, 1), (64499, 1), (64496, 2), (64500, 2), (64501, 2)],
        ),
    ],
)
def test_each_legacy_entry_keeps_its_family(
    path: str, shape: dict[str, bool], expected: list[tuple[int, int]]
) -> None:
    doc = legacy(**shape)
    payload = parse_export(dumps(slow(doc) if path == "slow" else doc))
    afis = payload.aspa_afis or bytes(len(payload.aspas))
    got = sorted(zip((a.customer for a, _ in payload.aspas), afis, strict=True))
    assert got == sorted(expected)
    if path == "fast":  # the hook's order is the document's
        assert list(zip((a.customer for a, _ in payload.aspas), afis, strict=True)) == expected
    # Served merged per customer, whatever the family.
    assert [a.customer for a in payload.snapshot_at(W).aspas] == sorted({c for c, _ in expected})


def test_the_current_layout_has_no_afi_and_the_identity_covers_it() -> None:
    current = parse_export(dumps({"roas": [], "aspas": [entry(64496, [64497])]}))
    assert current.aspa_afis == b""
    per_family = parse_export(
        dumps({"roas": [], "provider_authorizations": {"ipv4": [entry(64496, [64497])]}})
    )
    assert per_family.aspa_afis == b"\x01"
    assert per_family.aspas == current.aspas
    assert payload_identity(per_family) != payload_identity(current)


async def test_the_family_is_stored_digested_and_recovered(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    payload = parse_export(dumps(legacy(current=True)))
    backend = ThreadedBackend(SQLiteBackend(path))
    await backend.open()
    try:
        assert backend.store_id is not None
        first = state(backend.store_id, StateId(1, 1), payload)
        assert first.sources[0].aspa_afis == payload.aspa_afis
        await backend.commit(first, None)
    finally:
        assert await backend.close()
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT customer, afi FROM aspas ORDER BY support_id").fetchall()
        (families,) = db.execute("SELECT aspa_families FROM sources").fetchone()
    finally:
        db.close()
    assert rows == [(64502, 0), (64496, 1), (64499, 1), (64496, 2), (64500, 2), (64501, 2)]
    assert families == 3

    async with restarted(path, first, payload) as (_, plan):
        assert plan.recovered["dups"].payload.aspa_afis == payload.aspa_afis
        assert plan.snapshot is not None
        assert plan.snapshot.aspas == payload.snapshot_at(W).aspas


def test_an_afi_change_alone_changes_the_digest() -> None:
    legacy_payload = parse_export(dumps(legacy()))
    current_doc = {
        "roas": legacy()["roas"],
        "aspas": [
            *legacy()["provider_authorizations"]["ipv4"],
            *legacy()["provider_authorizations"]["ipv6"],
        ],
    }
    current_payload = parse_export(dumps(current_doc))
    assert current_payload.aspas == legacy_payload.aspas
    one = state("s" * 32, StateId(1, 1), legacy_payload)
    other = state("s" * 32, StateId(1, 1), current_payload)
    assert state_digest(one) != state_digest(other)
    assert Aspa(64496, (64497,)) in {a for a, _ in legacy_payload.aspas}
