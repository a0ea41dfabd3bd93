"""P-09: capturing a state for commit is O(sources): it shares the payload, converting nothing.

`upstream.recovery.build_state` gives each record the payload's own packed keys and, for the
expiries, router keys and ASPAs, `persistence.deferred.Deferred` views over the payload's
sequences: nothing is converted to stored microseconds until the digest or the rows read an
element (on the persister's thread). What is stored is what an eager conversion gives.
"""

from __future__ import annotations

import pickle
from array import array
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from persistence.backend import ThreadedBackend
from persistence.deferred import Deferred
from persistence.exchange import state_digest
from persistence.sqlite_backend import SQLiteBackend
from persistence.state import NEVER, StateId
from tests.upstream.helpers import SKI_HEX, SPKI_B64, dumps, roa
from tests.upstream.test_json_duplicates import W, state
from upstream.json_format import parse_export
from upstream.payload import NO_EXPIRY
from upstream.recovery import to_payload

pytestmark = pytest.mark.anyio

US = 1_000_000


def export(count: int) -> bytes:
    roas = [
        roa(f"10.{i >> 8 & 255}.{i & 255}.0/24", 24, 64496 + i, expires=W + i) for i in range(count)
    ]
    roas += [roa("2001:db8::/32", 48, 64496, expires=W + 7)]
    roas.append({"prefix": "192.0.2.0/24", "maxLength": 24, "asn": 1, "expires": W + 5})
    roas.append({"prefix": "192.0.2.0/24", "maxLength": 24, "asn": 1, "expires": W + 9})
    keys = [{"asn": 64496, "ski": SKI_HEX, "pubkey": SPKI_B64, "expires": W + 11}]
    aspas = [{"customer_asid": 64500, "providers": [1, 2], "expires": W + 13}]
    return dumps({"roas": roas, "bgpsec_keys": keys, "aspas": aspas})


def test_the_capture_shares_the_payload_and_converts_nothing() -> None:
    payload = parse_export(export(5000))
    record = state("s" * 32, StateId(1, 1), payload).sources[0]
    assert record.v4 is payload.v4
    assert record.v6 is payload.v6
    views = [
        record.v4_expires,
        record.v6_expires,
        record.router_keys,
        record.aspas,
        record.vrp_duplicates,
    ]
    assert all(isinstance(v, Deferred) and not v.is_built for v in views)
    # Counting builds nothing either.
    assert record.vrp_count == 5002
    assert len(record.aspas) == 1
    assert not any(v.is_built for v in views if isinstance(v, Deferred))


def test_the_views_hold_what_an_eager_conversion_gives() -> None:
    payload = parse_export(export(300))
    record = state("s" * 32, StateId(1, 1), payload).sources[0]
    assert record.v4_expires == array("q", [e * US for e in payload.v4_expires])
    assert list(record.v6_expires) == [(W + 7) * US]
    assert record.router_keys == tuple((k, e * US) for k, e in payload.router_keys)
    assert record.aspas[0][1] == (W + 13) * US
    assert record.vrp_duplicates == ((4, payload.vrp_duplicates[0][1], (W + 5) * US),)
    assert isinstance(record.v4_expires, Deferred)
    assert record.v4_expires.is_built
    # A copy for another process is the built items themselves.
    assert pickle.loads(pickle.dumps(record.v4_expires)) == record.v4_expires
    assert to_payload(record) == payload


def test_an_entry_without_expiry_is_stored_as_never() -> None:
    doc = {"roas": [{"prefix": "192.0.2.0/24", "maxLength": 24, "asn": 1}]}
    payload = parse_export(dumps(doc))
    assert list(payload.v4_expires) == [NO_EXPIRY]
    record = state("s" * 32, StateId(1, 1), payload).sources[0]
    assert list(record.v4_expires) == [NEVER]


async def test_the_commit_builds_and_stores_the_microseconds(tmp_path: Path) -> None:
    payload = parse_export(export(2000))
    backend = ThreadedBackend(SQLiteBackend(tmp_path / "state.db"))
    await backend.open()
    try:
        assert backend.store_id is not None
        captured = state(backend.store_id, StateId(1, 1), payload)
        eager = state(backend.store_id, StateId(1, 1), payload)
        for view in (eager.sources[0].v4_expires, eager.sources[0].aspas):
            assert isinstance(view, Deferred)
            view.items()
        receipt = await backend.commit(captured, None)
        assert receipt.state_digest == state_digest(eager)
        read = await backend.read_state()
        assert read is not None
        stored = read[1].sources[0]
        assert stored.v4_expires == captured.sources[0].v4_expires
        assert stored.aspas == captured.sources[0].aspas
    finally:
        assert await backend.close()


@given(
    expiries=st.lists(
        st.one_of(st.integers(-(2**40), 2**62), st.just(NEVER), st.integers(NEVER - 10, NEVER)),
        max_size=40,
    ),
    cap=st.one_of(st.just(NEVER), st.integers(-(2**40), NEVER)),
)
def test_recovered_expiries_are_each_entry_capped_by_its_source(
    expiries: list[int], cap: int
) -> None:
    """A recovered VRP ends at its own stored expiry or its source's, whichever is first."""
    record = replace(
        state("s" * 32, StateId(1, 1), parse_export(export(0))).sources[0],
        v4=b"\x00" * (10 * len(expiries)),
        v4_expires=array("q", expiries),
        v6=b"",
        v6_expires=array("q"),
        vrp_duplicates=(),
        expires_at=cap,
    )
    expected = [NO_EXPIRY if min(e, cap) >= NEVER else min(e, cap) // US for e in expiries]
    assert list(to_payload(record).v4_expires) == expected
