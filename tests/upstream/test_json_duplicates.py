"""Duplicate supports of a JSON export reach the state file, each at its own position (P-27).

A VRP or router key listed several times (any expiries) is served once with its latest expiry;
its other supports are extras of the payload, stored after the unique entries with contiguous
``support_id`` values, covered by the digest and brought back by recovery. Every ASPA entry is
its own support. Real SQLite files, queried directly.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from persistence.backend import ThreadedBackend
from persistence.exchange import state_digest
from persistence.sqlite_backend import SQLiteBackend
from persistence.state import PersistedState, StateId
from snapshot.model import pack_v4, pack_v6
from tests.upstream.helpers import SKI_HEX, SPKI_B64, dumps, roa, router_key
from upstream.json_format import parse_entries, parse_export
from upstream.merge import SourceInput
from upstream.payload import NO_EXPIRY, SourcePayload
from upstream.recovery import (
    RecoveryPlan,
    SourceIdentity,
    build_state,
    plan_recovery,
    to_payload,
)
from upstream.selection import PayloadKind

pytestmark = pytest.mark.anyio

W = 1_800_000_000
KINDS = frozenset(PayloadKind)
V4 = pack_v4(0xC0000200, 24, 24, 64496)
V4_OTHER = pack_v4(0xC6336400, 24, 24, 64497)
V6 = pack_v6(0x20010DB8 << 96, 32, 48, 64496)


def key(expires: int | None) -> dict[str, object]:
    entry: dict[str, object] = {"asn": 64496, "ski": SKI_HEX, "pubkey": SPKI_B64}
    if expires is not None:
        entry["expires"] = expires
    return entry


def aspa(providers: list[int], expires: int) -> dict[str, object]:
    return {"customer_asid": 64500, "providers": providers, "expires": expires}


def with_duplicates() -> dict[str, object]:
    return {
        "roas": [
            roa("192.0.2.0/24", 24, 64496, ta="ripe", expires=W + 100),
            roa("2001:db8::/32", 48, 64496, ta="ripe", expires=W + 50),
            roa("192.0.2.0/24", 24, "AS64496", ta="arin", expires=W + 300),  # not the fast path
            roa("198.51.100.0/24", 24, 64497, expires=W + 10),
            roa("192.0.2.0/24", 24, 64496, ta="apnic", expires=W + 100),  # same expiry too
            roa("2001:db8::/32", 48, 64496, ta="lacnic"),  # never expires
        ],
        "bgpsec_keys": [key(W + 400), key(W + 500), key(W + 450)],
        "aspas": [aspa([2, 1], W + 100), aspa([2, 1], W + 100), aspa([1, 2], W + 300)],
    }


def without_duplicates() -> dict[str, object]:
    """The same served content: each VRP and router key once, with its latest expiry."""
    return {
        "roas": [
            roa("192.0.2.0/24", 24, 64496, expires=W + 300),
            roa("198.51.100.0/24", 24, 64497, expires=W + 10),
            roa("2001:db8::/32", 48, 64496),
        ],
        "bgpsec_keys": [key(W + 500)],
        "aspas": with_duplicates()["aspas"],  # each ASPA entry is a support already
    }


EXPECTED_VRP_EXTRAS = ((4, V4, W + 100), (4, V4, W + 100), (6, V6, W + 50))
EXPECTED_KEY_EXTRAS = ((router_key(), W + 450), (router_key(), W + 400))


def test_the_parse_keeps_every_extra_support_sorted() -> None:
    payload = parse_export(dumps(with_duplicates()))
    assert payload.v4 == V4_OTHER + V4  # unique, descending, as without duplicates
    assert list(payload.v4_expires) == [W + 10, W + 300]
    assert list(payload.v6_expires) == [NO_EXPIRY]
    assert payload.router_keys == ((router_key(), W + 500),)
    assert payload.vrp_duplicates == EXPECTED_VRP_EXTRAS
    assert payload.router_key_duplicates == EXPECTED_KEY_EXTRAS
    assert len(payload.aspas) == 3  # every ASPA entry is a support
    assert payload.counts() == {"vrp_v4": 2, "vrp_v6": 1, "router_key": 1, "aspa": 1}
    # The slow path (entries walked one by one) and the entry order give the same payload.
    doc = with_duplicates()
    roas = doc["roas"]
    assert isinstance(roas, list)
    assert parse_entries(reversed(roas)).vrp_duplicates == EXPECTED_VRP_EXTRAS
    misplaced = {**doc, "extra": [roa("203.0.113.0/24", 24, 1)]}  # forces the slow path
    assert parse_export(dumps(misplaced)) == payload


def test_served_set_and_expiry_are_those_without_the_duplicates() -> None:
    dup = parse_export(dumps(with_duplicates()))
    plain = parse_export(dumps(without_duplicates()))
    assert dup != plain
    for now in (W, W + 10, W + 50, W + 99, W + 100, W + 299, W + 300, W + 450, W + 500):
        assert dup.snapshot_at(now) == plain.snapshot_at(now), now
        for kind in (None, *PayloadKind):
            assert dup.earliest_expiry_after(now, kind) == plain.earliest_expiry_after(now, kind)
    assert dup.last_expiry() == plain.last_expiry()


def source(payload: SourcePayload) -> SourceInput:
    return SourceInput(
        "dups", "main", "file", "/data/dups.json", KINDS, KINDS, payload, accepted_wall=W
    )


def state(store_id: str, state_id: StateId, payload: SourcePayload) -> PersistedState:
    return build_state(
        store_id=store_id,
        state_id=state_id,
        config_revision=1,
        serial=state_id.generation,
        session_ids=(1, 2, 3),
        published_wall=W,
        package_version="t",
        inputs=[source(payload)],
        active=dict.fromkeys(PayloadKind, "main"),
    )


def supports(path: Path) -> dict[str, list[tuple[object, ...]]]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {
            "vrps": db.execute(
                "SELECT support_id, family, prefix_length, max_length, asn, expires_at FROM vrps"
                " ORDER BY support_id"
            ).fetchall(),
            "router_keys": db.execute(
                "SELECT support_id, asn, expires_at FROM router_keys ORDER BY support_id"
            ).fetchall(),
            "aspas": db.execute(
                "SELECT support_id, customer, expires_at FROM aspas ORDER BY support_id"
            ).fetchall(),
            "aspa_providers": db.execute(
                "SELECT support_id, idx, provider FROM aspa_providers ORDER BY support_id, idx"
            ).fetchall(),
        }
    finally:
        db.close()


@asynccontextmanager
async def restarted(
    path: Path, first: PersistedState, payload: SourcePayload
) -> AsyncIterator[tuple[ThreadedBackend, RecoveryPlan]]:
    """Reopen ``path``: its state has ``first``'s digest and gives ``payload`` back; plan."""
    backend = ThreadedBackend(SQLiteBackend(path))
    await backend.open()
    try:
        read = await backend.read_state()
        assert read is not None
        header, stored = read
        assert header.state_digest == state_digest(first) == state_digest(stored)
        assert to_payload(stored.sources[0]) == payload
        identity = SourceIdentity("dups", "file", "/data/dups.json")
        yield backend, plan_recovery(header, stored, [identity], wall=W, clock_tolerance=0)
    finally:
        assert await backend.close()


async def test_duplicates_are_stored_digested_and_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    payload = parse_export(dumps(with_duplicates()))
    us = 1_000_000
    never = NO_EXPIRY
    backend = ThreadedBackend(SQLiteBackend(path))
    await backend.open()
    try:
        assert backend.store_id is not None
        store_id = backend.store_id
        first = state(store_id, StateId(1, 1), payload)
        plain = state(store_id, StateId(1, 1), parse_export(dumps(without_duplicates())))
        assert state_digest(first) != state_digest(plain)  # the digest covers the extras
        await backend.commit(first, None)
    finally:
        assert await backend.close()
    rows = supports(path)
    assert rows["vrps"] == [
        (0, 4, 24, 24, 64497, (W + 10) * us),
        (1, 4, 24, 24, 64496, (W + 300) * us),
        (2, 6, 32, 48, 64496, never),
        (3, 4, 24, 24, 64496, (W + 100) * us),
        (4, 4, 24, 24, 64496, (W + 100) * us),
        (5, 6, 32, 48, 64496, (W + 50) * us),
    ]
    assert rows["router_keys"] == [(i, 64496, (W + s) * us) for i, s in enumerate((500, 450, 400))]
    assert rows["aspas"] == [(i, 64500, (W + s) * us) for i, s in enumerate((100, 100, 300))]
    assert rows["aspa_providers"] == [(s, i, p) for s in range(3) for i, p in enumerate((1, 2))]

    # Restart: the stored state, the recovered payload and a new commit of it agree.
    async with restarted(path, first, payload) as (backend, plan):
        recovered = plan.recovered["dups"].payload
        assert recovered == payload
        assert plan.snapshot == parse_export(dumps(without_duplicates())).snapshot_at(W)
        assert state_digest(state(store_id, first.state_id, recovered)) == state_digest(first)
        await backend.commit(state(store_id, StateId(2, 1), recovered), first.state_id)
    assert supports(path) == rows


def test_recovery_caps_the_extras_like_their_entries() -> None:
    """An RTR-like source-wide end caps every support, the extras included."""
    payload = parse_export(dumps(with_duplicates()))
    capped = state("s" * 32, StateId(1, 1), payload).sources[0]
    capped = dataclasses.replace(capped, expires_at=(W + 60) * 1_000_000)
    back = to_payload(capped)
    assert back.vrp_duplicates == ((4, V4, W + 60), (4, V4, W + 60), (6, V6, W + 50))
    assert back.router_key_duplicates == ((router_key(), W + 60), (router_key(), W + 60))
    assert [e for _, e in back.aspas] == [W + 60, W + 60, W + 60]
