"""P-02/P-10/P-26/P-27/P-28/P-33/P-37 on real files: schema 2's shape, its digests and its rules.

Both backends: the ``store_meta`` row holds exactly the contract's fields and its
``meta_digest`` is the SHA-256 of their canonical JSON array; duplicate supports keep their own
``support_id``; an ASPA's ``afi`` and the per-family coverage round-trip; the v2 -> v1
revocation shape is stored and read back, and recovery makes it no Serial Query base; the
shape rules (`persistence.state.check_source`, `check_state`) refuse what no valid state holds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from persistence.exchange import state_digest
from persistence.meta_digest import sealed
from persistence.schema import STORE_META_FIELDS, VERSIONS_JSON
from persistence.state import (
    NOT_INCREMENTAL_METADATA,
    GroupRecord,
    PersistedState,
    SourceRecord,
    StateId,
)
from snapshot.model import Aspa
from tests.persistence.helpers import opened, raw
from tests.persistence.states import T0, US, assert_same_state, make_state, realistic_sources
from upstream.recovery import SourceIdentity, plan_recovery

pytestmark = pytest.mark.anyio


def revoked(source: SourceRecord) -> SourceRecord:
    """``source`` (an RTR version-2 source) after a v2 -> v1 ASPA revocation (P-33)."""
    return replace(
        source,
        capabilities=source.capabilities - {"aspa"},
        selected=source.selected - {"aspa"},
        present=source.present - {"aspa"},
        aspas=(),
        aspa_afis=b"",
        aspa_families=0,
        metadata_json=NOT_INCREMENTAL_METADATA,
    )


def revoked_state(store_id: str, state_id: StateId) -> PersistedState:
    http, rtr, empty = realistic_sources()
    state = make_state(store_id, state_id)
    return replace(state, sources=(http, revoked(rtr), empty))


async def test_store_meta_holds_the_contracts_fields_and_their_canonical_digest(
    kind: str, tmp_path: Path
) -> None:
    path = tmp_path / "state.db"
    async with opened(kind, path) as backend:
        assert backend.store_id is not None
        state = make_state(backend.store_id, StateId(3, 4))
        await backend.commit(state, None)
    with raw(kind, path) as db:
        cursor = db.execute("SELECT * FROM store_meta")
        names = [d[0] for d in cursor.description]
        (row,) = cursor.fetchall()
    assert names == ["singleton", *STORE_META_FIELDS]
    values = dict(zip(names, row, strict=True))
    assert values["singleton"] == 1
    assert values["versions_json"] == VERSIONS_JSON
    assert (values["config_store_id"], values["config_epoch"]) == ("c" * 32, 7)
    assert values["policy_id"] == state.policy_id
    assert values["mode"] == "online"
    assert values["upstream_store_id"] is None
    assert bytes(values["state_digest"]) == state_digest(state)
    # The canonical JSON array of every field but itself (and the singleton), digests in hex.
    fields = [
        v.hex() if isinstance(v, bytes | bytearray) else v
        for name, v in values.items()
        if name not in {"singleton", "meta_digest"}
    ]
    text = json.dumps(fields, separators=(",", ":"), ensure_ascii=False)
    assert bytes(values["meta_digest"]) == hashlib.sha256(text.encode()).digest()


async def test_duplicate_supports_keep_their_own_positions(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    async with opened(kind, path) as backend:
        assert backend.store_id is not None
        state = make_state(backend.store_id, StateId(1, 1))
        await backend.commit(state, None)
        result = await backend.read_state()
    assert result is not None
    assert_same_state(result[1], state)
    http = state.sources[0]
    with raw(kind, path) as db:
        vrps = db.execute(
            "SELECT support_id, family, asn, expires_at FROM vrps WHERE source_id = 0"
            " ORDER BY support_id"
        ).fetchall()
        aspas = db.execute(
            "SELECT support_id, customer, afi FROM aspas WHERE source_id = 0 ORDER BY support_id"
        ).fetchall()
        keys = db.execute(
            "SELECT count(*), count(DISTINCT ski) FROM router_keys WHERE source_id = 0"
        ).fetchone()
    # Contiguous from 0 per payload family; the duplicates after the records, not merged.
    assert [r[0] for r in vrps] == list(range(http.vrp_count + len(http.vrp_duplicates)))
    assert [(r[1], r[3]) for r in vrps[-2:]] == [(f, e) for f, _, e in http.vrp_duplicates]
    assert vrps[-2][2] == vrps[1][2]  # a second support of a VRP already present
    assert [(r[1], r[2]) for r in aspas] == [
        (64496, 0),
        (65000, 0),
        (0xFFFF_FFFF, 2),
        (0xFFFF_FFFF, 2),
    ]
    assert tuple(keys) == (3, 2)


async def test_the_revocation_shape_round_trips_and_recovers_without_an_incremental_base(
    kind: str, tmp_path: Path
) -> None:
    path = tmp_path / "state.db"
    async with opened(kind, path) as backend:
        assert backend.store_id is not None
        state = revoked_state(backend.store_id, StateId(1, 1))
        await backend.commit(state, None)
        result = await backend.read_state()
    assert result is not None
    header, got = result
    assert_same_state(got, state)
    rtr = got.sources[1]
    assert not rtr.incremental_usable
    assert (rtr.protocol, rtr.rtr_session, rtr.aspas, rtr.aspa_families) == (2, 0xBEEF, (), 0)
    identities = [SourceIdentity(s.name, s.kind, s.location) for s in got.sources]
    wall = header.written_at / US
    assert wall < rtr.expires_at / US
    plan = plan_recovery(header, got, identities, wall=wall, clock_tolerance=300)
    recovered = plan.recovered["rtr-upstream"]
    # The remaining life is kept, but there is no session to send a Serial Query under.
    assert (recovered.rtr_session, recovered.rtr_serial) == (None, None)
    assert recovered.expires_at == rtr.expires_at / US
    assert plan.recovered["ripe-http"].rtr_session is None
    assert "starts with a Reset" in " ".join(plan.notes)


def test_an_incremental_rtr_source_recovers_its_session() -> None:
    state = make_state("s" * 32, StateId(1, 1))

    header = sealed(state, state_digest(state), T0 + 60 * US)
    identities = [SourceIdentity(s.name, s.kind, s.location) for s in state.sources]
    plan = plan_recovery(header, state, identities, wall=T0 / US + 60, clock_tolerance=300)
    assert plan.recovered["rtr-upstream"].rtr_session == 0xBEEF


BAD_SOURCES: dict[str, Callable[[SourceRecord], SourceRecord]] = {
    "families-without-aspa": lambda s: replace(s, capabilities=frozenset({"vrp"})),
    "afi-outside-families": lambda s: replace(s, aspa_families=1),
    "afi-out-of-range": lambda s: replace(s, aspa_afis=bytes([0, 0, 3])),
    "afis-per-aspa": lambda s: replace(s, aspa_afis=bytes([0, 1])),
    "revocation-with-aspas": lambda s: replace(
        s, kind="rtr", protocol=2, metadata_json=NOT_INCREMENTAL_METADATA
    ),
    "revocation-of-json": lambda s: replace(revoked(s), kind="http", protocol=None),
    "revocation-of-v1": lambda s: replace(revoked(s), kind="rtr", protocol=1),
    "other-not-incremental": lambda s: replace(
        revoked(s),
        kind="rtr",
        protocol=2,
        metadata_json='{"rtr":{"incremental_usable":false,"x":1}}',
    ),
    "metadata-no-object": lambda s: replace(s, metadata_json="[1]"),
    "protocol-3": lambda s: replace(s, protocol=3),
}


@pytest.mark.parametrize("change", sorted(BAD_SOURCES))
def test_a_source_no_valid_state_holds_is_refused(change: str) -> None:
    http = realistic_sources()[0]
    with pytest.raises(ValueError, match=f"source {http.name}"):
        BAD_SOURCES[change](http)


def _groups(state: PersistedState, *groups: GroupRecord) -> PersistedState:
    return replace(state, groups=groups)


BAD_STATES: dict[str, Callable[[PersistedState], PersistedState]] = {
    "a-source-in-no-group": lambda st: replace(st, sources=st.sources[:2]),
    "group-ids-not-in-order": lambda st: _groups(st, st.groups[1], st.groups[0], st.groups[2]),
    "a-group-name-twice": lambda st: _groups(
        st, *st.groups[:2], GroupRecord(2, "primary", frozenset())
    ),
    "member-of-another-group": lambda st: _groups(
        st,
        replace(st.groups[0], source_names=("ripe-http",)),
        replace(st.groups[1], source_names=("local-file", "rtr-upstream")),
        st.groups[2],
    ),
    "active-group-of-another-kind": lambda st: replace(
        st, active_groups=(*st.active_groups[:3], ("vrp", "spare"))
    ),
    "active-group-unknown": lambda st: replace(st, active_groups=(("vrp", "nowhere"),)),
    "selected-outside-the-active-group": lambda st: replace(
        st, active_groups=tuple(a for a in st.active_groups if a[0] != "router_key")
    ),
    "aggregate-aspa-that-disagrees": lambda st: replace(
        st, active_groups=(*st.active_groups, ("aspa", "spare"))
    ),
    "active-groups-without-groups": lambda st: replace(st, groups=()),
    "policy-json-without-id": lambda st: replace(st, policy_id=None),
    "unknown-mode": lambda st: replace(st, mode="later"),
}


@pytest.mark.parametrize("change", sorted(BAD_STATES))
def test_a_state_whose_groups_disagree_is_refused(change: str) -> None:
    state = make_state("s" * 32, StateId(1, 1))
    with pytest.raises(ValueError):
        BAD_STATES[change](state)


def test_a_consistent_regrouping_is_accepted() -> None:
    """Per-family ASPA active groups, an aggregate only where both agree, empty groups kept."""
    state = make_state("s" * 32, StateId(1, 1))
    agreed = replace(state, active_groups=(*state.active_groups, ("aspa", "primary")))
    assert ("aspa", "primary") in agreed.active_groups
    assert agreed.groups[2].source_names == ()
    assert state_digest(agreed) != state_digest(state)


def test_aspa_families_default_from_the_capabilities() -> None:
    http, rtr, empty = realistic_sources()
    assert (http.aspa_families, rtr.aspa_families, empty.aspa_families) == (3, 1, 0)
    assert http.present == http.capabilities
    assert [http.afi_of(i) for i in range(3)] == [0, 0, 2]
    assert Aspa(64496, (64497,)) is not None
