"""`build_state` (pure) records the groups, active groups and policy id (P-10, P-28, P-82)."""

from __future__ import annotations

import dataclasses
from array import array

import pytest

from persistence.state import PersistedState, StateId
from snapshot.model import pack_v4
from upstream.merge import SourceInput
from upstream.payload import NO_EXPIRY, SourcePayload
from upstream.recovery import Placeholder, build_state
from upstream.selection import PayloadKind

W = 1_800_000_000
VRP, ASPA, KEY = PayloadKind.VRP, PayloadKind.ASPA, PayloadKind.ROUTER_KEY


def source(name: str, group: str, selected: frozenset[PayloadKind]) -> SourceInput:
    payload = SourcePayload(
        v4=pack_v4(0xC0000200, 24, 24, 64496), v4_expires=array("q", [NO_EXPIRY])
    )
    return SourceInput(
        name, group, "http", f"https://{name}.example/x.json", frozenset({VRP, ASPA}), selected,
        payload, accepted_wall=W,
    )  # fmt: skip


def state(active: dict[PayloadKind, str | None]) -> PersistedState:
    return build_state(
        store_id="s" * 32,
        state_id=StateId(1, 1),
        config_revision=1,
        serial=1,
        session_ids=(1, 2, 3),
        published_wall=W,
        package_version="t",
        inputs=[source("b", "main", frozenset({VRP})), source("a", "main", frozenset({VRP}))],
        placeholders=[
            Placeholder("c", "backup", "rtr", "rtr://192.0.2.1:323", frozenset({VRP, KEY})),
            Placeholder("a", "main", "http", "https://a.example/x.json", frozenset({VRP, ASPA})),
        ],
        active=active,
        policy_id="slurm:abc",
    )


def test_groups_members_and_active_groups_come_from_the_build() -> None:
    built = state({VRP: "main", ASPA: None, KEY: "backup"})
    groups = built.groups
    assert [(g.group_id, g.name, g.source_names) for g in groups] == [
        (0, "main", ("a", "b")),  # sorted, whatever the input order
        (1, "backup", ("c",)),
    ]
    assert groups[1].kinds == frozenset({"vrp", "router_key"})
    assert built.active_groups == (("router_key", "backup"), ("vrp", "main"))
    assert {s.name: s.group_id for s in built.sources} == {"a": 0, "b": 0, "c": 1}
    assert built.policy_id == "slurm:abc"


@pytest.mark.parametrize("claimed", ["backup", "nowhere", None])
def test_the_group_that_contributed_a_kind_is_its_active_group(claimed: str | None) -> None:
    """What the sources contributed decides; an unknown name is not recorded."""
    built = state({VRP: claimed, ASPA: "nowhere", KEY: None})
    assert built.active_groups == (("vrp", "main"),)


def test_configured_groups_come_first_and_an_empty_one_is_kept() -> None:
    built = build_state(
        store_id="s" * 32,
        state_id=StateId(1, 1),
        config_revision=1,
        serial=1,
        session_ids=(1, 2, 3),
        published_wall=W,
        package_version="t",
        inputs=[source("b", "main", frozenset({VRP}))],
        groups=("spare", "main"),
        config_store_id="s" * 32,
        config_epoch=1,
        config_identity="sha256:x",
    )
    assert [(g.group_id, g.name, g.source_names) for g in built.groups] == [
        (0, "spare", ()),
        (1, "main", ("b",)),
    ]
    assert built.sources[0].group_id == 1
    assert (built.config_store_id, built.config_epoch, built.config_identity) == (
        "s" * 32,
        1,
        "sha256:x",
    )
    assert built.policy_json is None  # none given


def test_an_rtr_sources_protocol_is_stored_and_json_has_none() -> None:
    rtr = dataclasses.replace(
        source("r", "main", frozenset({VRP})), kind="rtr", location="rtr://192.0.2.1:323"
    )
    rtr = dataclasses.replace(rtr, protocol=1)
    plain = dataclasses.replace(source("j", "main", frozenset({VRP})), protocol=None)
    built = build_state(
        store_id="s" * 32,
        state_id=StateId(1, 1),
        config_revision=1,
        serial=1,
        session_ids=(1, 2, 3),
        published_wall=W,
        package_version="t",
        inputs=[rtr, plain],
    )
    assert {s.name: s.protocol for s in built.sources} == {"r": 1, "j": None}
    assert all(s.incremental_usable for s in built.sources)
