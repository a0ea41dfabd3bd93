"""Properties: any small state round-trips on both backends; the digest covers every field."""

from __future__ import annotations

import itertools
import tempfile
from array import array
from dataclasses import fields, replace
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from persistence.exchange import state_digest
from persistence.state import PersistedState, SourceRecord, StateId, UpstreamRef
from persistence.state_binary import source_digest
from snapshot.model import Aspa, RouterKey, pack_v4, pack_v6
from tests.persistence.helpers import KINDS, opened
from tests.persistence.states import assert_same_state, make_state, realistic_sources

ASN = st.integers(0, 0xFFFF_FFFF)
INT64 = st.integers(-(2**63), 2**63 - 1)
UINT63 = st.integers(0, 2**63 - 1)
TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
SKI = st.binary(min_size=20, max_size=20)
SPKI = st.binary(min_size=1, max_size=40)
KIND_NAMES = st.frozensets(st.sampled_from(["vrp", "router_key", "aspa"]))


@st.composite
def v4_entries(draw: st.DrawFn) -> tuple[bytes, int]:
    """One packed IPv4 VRP key and its expiry."""
    plen = draw(st.integers(0, 32))
    address = draw(st.integers(0, 0xFFFF_FFFF)) >> (32 - plen) << (32 - plen) if plen else 0
    return pack_v4(address, plen, draw(st.integers(plen, 32)), draw(ASN)), draw(INT64)


@st.composite
def v6_entries(draw: st.DrawFn) -> tuple[bytes, int]:
    """One packed IPv6 VRP key and its expiry."""
    plen = draw(st.integers(0, 128))
    address = draw(st.integers(0, 2**128 - 1)) >> (128 - plen) << (128 - plen) if plen else 0
    return pack_v6(address, plen, draw(st.integers(plen, 128)), draw(ASN)), draw(INT64)


@st.composite
def sources(draw: st.DrawFn) -> SourceRecord:
    """A small source with arbitrary (valid) metadata and payload."""
    v4 = sorted(draw(st.lists(v4_entries(), max_size=6)), reverse=True)
    v6 = sorted(draw(st.lists(v6_entries(), max_size=6)), reverse=True)
    keys = draw(
        st.lists(
            st.tuples(
                st.builds(RouterKey, SKI, ASN, SPKI),
                INT64,
            ),
            max_size=3,
        )
    )
    aspas = draw(
        st.lists(
            st.tuples(
                st.builds(Aspa, st.integers(1, 0xFFFF_FFFF), st.lists(ASN, min_size=1, max_size=5)),
                INT64,
            ),
            max_size=3,
        )
    )
    optional = st.none() | INT64
    return SourceRecord(
        name=draw(TEXT),
        group=draw(TEXT),
        kind=draw(st.sampled_from(["file", "http", "rtr"]) | TEXT),
        location=draw(TEXT),
        complete=draw(st.booleans()),
        capabilities=draw(KIND_NAMES),
        selected=draw(KIND_NAMES),
        accepted_at=draw(INT64),
        evaluated_at=draw(INT64),
        expires_at=draw(INT64),
        rtr_session=draw(st.none() | st.integers(0, 0xFFFF)),
        rtr_serial=draw(st.none() | ASN),
        generated_at=draw(optional),
        v4=b"".join(k for k, _ in v4),
        v4_expires=array("q", [e for _, e in v4]),
        v6=b"".join(k for k, _ in v6),
        v6_expires=array("q", [e for _, e in v6]),
        router_keys=tuple(keys),
        aspas=tuple(aspas),
    )


@st.composite
def states(draw: st.DrawFn, store_id: str = "0" * 32) -> PersistedState:
    """A small state of up to three sources with distinct names."""
    return PersistedState(
        store_id=store_id,
        state_id=StateId(draw(UINT63), draw(UINT63)),
        config_revision=draw(UINT63),
        serial=draw(ASN),
        session_ids=draw(st.tuples(*[st.integers(0, 0xFFFF)] * 3)),
        published_at=draw(INT64),
        package_version=draw(TEXT),
        sources=tuple(draw(st.lists(sources(), max_size=3, unique_by=lambda s: s.name))),
        observed_at=draw(INT64),
    )


_loops = itertools.cycle(["asyncio", "trio"])


async def round_trip(kind: str, path: Path, drawn: PersistedState) -> None:
    """Commit ``drawn`` (under the new store's id) and read it back, also after reopening."""
    async with opened(kind, path) as backend:
        assert backend.store_id is not None
        state = replace(drawn, store_id=backend.store_id)
        receipt = await backend.commit(state, None)
        assert receipt.state_digest == state_digest(state)
        result = await backend.read_state()
        assert result is not None
        assert_same_state(result[1], state)
    async with opened(kind, path) as backend:
        result = await backend.read_state()
        assert result is not None
        assert_same_state(result[1], state)


@pytest.mark.parametrize("kind", KINDS)
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(drawn=states())
def test_any_state_round_trips(kind: str, tmp_path: Path, drawn: PersistedState) -> None:
    with tempfile.TemporaryDirectory(dir=tmp_path) as directory:
        anyio.run(round_trip, kind, Path(directory) / "state.db", drawn, backend=next(_loops))


@settings(max_examples=100, deadline=None)
@given(a=states(), b=states())
def test_digest_equal_exactly_when_content_equal(a: PersistedState, b: PersistedState) -> None:
    def content(s: PersistedState) -> object:
        head = [getattr(s, f.name) for f in fields(s) if f.name not in {"sources", *NOT_DIGESTED}]
        return head, [source_fields(x) for x in sorted(s.sources, key=lambda x: x.name)]

    assert (state_digest(a) == state_digest(b)) == (content(a) == content(b))
    assert state_digest(a) == state_digest(replace(a))


def source_fields(source: SourceRecord) -> list[object]:
    """Every field of a source as comparable values."""
    values: list[object] = []
    for f in fields(source):
        if f.name in SOURCE_NOT_DIGESTED:
            continue
        value = getattr(source, f.name)
        values.append(value.tolist() if isinstance(value, array) else value)
    return values


BASE = make_state("s" * 32, StateId(1, 1))
HEADER_CHANGES = {
    "store_id": "t" * 32,
    "state_id": StateId(1, 2),
    "config_revision": 4,
    "serial": 43,
    "session_ids": (1, 0x7FFF, 0xFFFE),
    "published_at": BASE.published_at + 1,
    "package_version": "0.0.1-test",
    "sources": (*BASE.sources[:2], replace(BASE.sources[2], location="/elsewhere.json")),
    "groups": (*BASE.groups[:2], replace(BASE.groups[2], name="spare-2")),
    "active_groups": BASE.active_groups[1:],
    "policy_id": "sha256:" + "1" * 64,
    "policy_json": '{"slurmVersion":1}',
    "mode": "offline",
    "reference_time": 0,
    "upstream": UpstreamRef("u" * 32, 1, 2),
    "config_store_id": "d" * 32,
    "config_epoch": 3,
    "config_identity": "sha256:" + "2" * 64,
}
#: Fields that are deliberately no part of the content (and so of the digest).
NOT_DIGESTED = {
    "observed_at": BASE.published_at + 3_600_000_000,
    "recovered_from": StateId(0, 9),  # in the header digest instead
}
#: `BASE` without its groups: a source's name or group may change without leaving its group.
FLAT = replace(BASE, groups=(), active_groups=())
first = realistic_sources()[0]
SOURCE_NOT_DIGESTED = {"evaluated_at": first.evaluated_at + 3_600_000_000}
SOURCE_CHANGES = {
    "name": "ripe-http2",
    "group": "secondary",
    "kind": "file",
    "location": "https://rpki.example.net/other.json",
    "complete": False,
    "capabilities": frozenset({"vrp", "aspa"}),
    "selected": frozenset({"vrp", "aspa"}),
    "accepted_at": first.accepted_at + 1,
    "expires_at": 0,
    "rtr_session": 0,
    "rtr_serial": 0,
    "generated_at": None,
    "identity": "sha256:" + "0" * 64,
    "v4": first.v4[:-1] + bytes([first.v4[-1] ^ 1]),
    "v4_expires": array("q", [*first.v4_expires[:-1], first.v4_expires[-1] - 1]),
    "v6": first.v6[:-1] + bytes([first.v6[-1] ^ 1]),
    "v6_expires": array("q", [first.v6_expires[0] - 1, *first.v6_expires[1:]]),
    "router_keys": first.router_keys[:1],
    "aspas": (*first.aspas[:2], (Aspa(0xFFFF_FFFF, (1, 2, 3, 4, 5)), first.aspas[2][1])),
    "group_id": 1,
    "protocol": 2,
    "present": frozenset({"vrp"}),
    "invalidated": True,
    "aspa_families": 2,
    "aspa_afis": bytes([0, 2, 0]),
    "metadata_json": '{"format":"other"}',
    "vrp_duplicates": first.vrp_duplicates[:1],
    "router_key_duplicates": first.router_keys[1:],
    "aspa_duplicates": ((first.aspas[0][0], 2, 7),),
}


def test_the_change_lists_cover_every_field() -> None:
    assert set(HEADER_CHANGES) | set(NOT_DIGESTED) == {f.name for f in fields(PersistedState)}
    assert set(SOURCE_CHANGES) | set(SOURCE_NOT_DIGESTED) == {f.name for f in fields(SourceRecord)}


@pytest.mark.parametrize(("name", "value"), HEADER_CHANGES.items())
def test_digest_covers_every_state_field(name: str, value: object) -> None:
    assert state_digest(replace(BASE, **{name: value})) != state_digest(BASE)  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "value"), NOT_DIGESTED.items())
def test_digest_leaves_out_the_observed_time(name: str, value: object) -> None:
    assert state_digest(replace(BASE, **{name: value})) == state_digest(BASE)  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "value"), SOURCE_CHANGES.items())
def test_digest_covers_every_source_field(name: str, value: object) -> None:
    changed = replace(first, **{name: value})  # type: ignore[arg-type]
    state = replace(FLAT, sources=(changed, *FLAT.sources[1:]))
    assert state_digest(state) != state_digest(FLAT)
    assert source_digest(changed) != source_digest(first)


@pytest.mark.parametrize(("name", "value"), SOURCE_NOT_DIGESTED.items())
def test_digest_leaves_out_a_sources_evaluation_time(name: str, value: object) -> None:
    changed = replace(first, **{name: value})  # type: ignore[arg-type]
    state = replace(BASE, sources=(changed, *BASE.sources[1:]))
    assert state_digest(state) == state_digest(BASE)
    assert source_digest(changed) == source_digest(first)
    assert source_digest(changed) == source_digest(first)
