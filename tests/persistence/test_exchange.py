"""The exchange payload: round trips, the two record paths, the budget, the digest's coverage.

`exchange_states` draws states touching every field of the model (groups, active groups,
per-family ASPAs, duplicate supports, mapped IPv6 prefixes, free text with escapes and
non-ASCII); the other exchange test modules import it.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from dataclasses import fields, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from persistence import exchange
from persistence.exchange import ExchangeFormatError, encode, state_digest
from persistence.exchange_import import decode
from persistence.kinds import KIND_BITS, NOT_INCREMENTAL_METADATA
from persistence.limits import LimitExceededError, Limits
from persistence.state import (
    NEVER,
    GroupRecord,
    PersistedState,
    SourceRecord,
    StateId,
    UpstreamRef,
)
from snapshot.model import Aspa, RouterKey, pack_v4, pack_v6

ASN = st.integers(0, 0xFFFF_FFFF)
INT64 = st.integers(-(2**63), 2**63 - 1)
UINT63 = st.integers(0, 2**63 - 1)
TEXT = st.text(st.characters(codec="utf-8"), max_size=8)
KINDS = st.frozensets(st.sampled_from(["vrp", "router_key", "aspa"]))
MAPPED = 0xFFFF << 32


@st.composite
def v4_keys(draw: st.DrawFn) -> bytes:
    """One packed IPv4 VRP key."""
    length = draw(st.integers(0, 32))
    address = draw(st.integers(0, 2**32 - 1)) >> (32 - length) << (32 - length) if length else 0
    return pack_v4(address, length, draw(st.integers(length, 32)), draw(ASN))


@st.composite
def v6_keys(draw: st.DrawFn) -> bytes:
    """One packed IPv6 VRP key; often IPv4-mapped (``::ffff:a.b.c.d``)."""
    length = draw(st.integers(0, 128))
    raw = draw(st.integers(0, 2**128 - 1) | st.integers(0, 2**32 - 1).map(MAPPED.__or__))
    address = raw >> (128 - length) << (128 - length) if length else 0
    return pack_v6(address, length, draw(st.integers(length, 128)), draw(ASN))


#: Free metadata: JSON object texts (the revocation shape is drawn separately, below).
METADATA = st.dictionaries(TEXT, st.integers() | TEXT, max_size=2).map(
    lambda d: json.dumps(d, ensure_ascii=False, separators=(",", ":"))
)


@st.composite
def sources(
    draw: st.DrawFn, name: str, group: tuple[int, str], allowed: frozenset[str]
) -> SourceRecord:
    """A valid source of ``group`` (id, name) contributing only ``allowed`` kinds."""
    v4 = sorted(draw(st.sets(v4_keys(), max_size=5)), reverse=True)
    v6 = sorted(draw(st.sets(v6_keys(), max_size=5)), reverse=True)
    router_key = st.builds(
        RouterKey, st.binary(min_size=20, max_size=20), ASN, st.binary(min_size=1, max_size=30)
    )
    keys = draw(st.lists(st.tuples(router_key, INT64), max_size=3))
    capabilities = draw(KINDS)
    revoked = draw(st.booleans()) and "aspa" not in capabilities
    families = draw(st.integers(0, 3)) if "aspa" in capabilities else 0
    afi = st.sampled_from([0] + [bit for bit in (1, 2) if families & bit])
    aspa = st.builds(Aspa, st.integers(1, 2**32 - 1), st.lists(ASN, min_size=1, max_size=5))
    aspas = [] if revoked else draw(st.lists(st.tuples(aspa, INT64), max_size=3))
    afis = [draw(afi) for _ in aspas]
    v4_expires = draw(st.lists(INT64, min_size=len(v4), max_size=len(v4)))
    v6_expires = draw(st.lists(INT64, min_size=len(v6), max_size=len(v6)))
    # A duplicate support is one of the source's entries, ending no later than it (P-27).
    supports = [(4, k, e) for k, e in zip(v4, v4_expires, strict=True)]
    supports += [(6, k, e) for k, e in zip(v6, v6_expires, strict=True)]
    chosen = draw(st.lists(st.sampled_from(supports), max_size=3)) if supports else []
    vrp_dups = [(f, k, draw(st.integers(-(2**63), e))) for f, k, e in chosen]
    selected = draw(KINDS) & allowed
    present = draw(KINDS)
    if revoked:  # the retained shape of a v2 -> v1 ASPA revocation (P-33)
        selected, present = selected - {"aspa"}, present - {"aspa"}
    return SourceRecord(
        name=name,
        group=group[1],
        kind="rtr" if revoked else draw(st.sampled_from(["file", "http", "rtr"])),
        location=draw(TEXT),
        complete=draw(st.booleans()),
        capabilities=capabilities,
        selected=selected,
        accepted_at=draw(INT64),
        expires_at=draw(INT64),
        rtr_session=draw(st.none() | st.integers(0, 0xFFFF)),
        rtr_serial=draw(st.none() | ASN),
        generated_at=draw(st.none() | INT64),
        identity=draw(st.none() | TEXT),
        v4=b"".join(v4),
        v4_expires=array("q", v4_expires),
        v6=b"".join(v6),
        v6_expires=array("q", v6_expires),
        router_keys=tuple(keys),
        aspas=tuple(aspas),
        group_id=group[0],
        protocol=2 if revoked else draw(st.none() | st.integers(0, 2)),
        present=present,
        invalidated=draw(st.booleans()),
        aspa_families=families,
        aspa_afis=bytes(afis) if any(afis) else b"",
        metadata_json=NOT_INCREMENTAL_METADATA if revoked else draw(st.none() | METADATA),
        vrp_duplicates=tuple(vrp_dups),
        router_key_duplicates=tuple(draw(st.lists(st.sampled_from(keys), max_size=2)))
        if keys
        else (),
        aspa_duplicates=tuple(
            (aspas[i][0], afis[i], draw(st.integers(-(2**63), aspas[i][1])))
            for i in draw(st.lists(st.integers(0, len(aspas) - 1), max_size=2))
        )
        if aspas
        else (),
    )


@st.composite
def exchange_states(draw: st.DrawFn) -> PersistedState:
    """A valid state of up to three sources and up to three groups, every field drawn.

    Without groups no source contributes anything and there are no active groups; with
    groups, each kind's active group is drawn first and only its members contribute it.
    """
    names = draw(st.lists(TEXT, max_size=3, unique=True))
    group_names = draw(st.lists(TEXT, min_size=1, max_size=3, unique=True) | st.just([]))
    active: dict[str, str] = {}
    if group_names:
        for kind in ("vrp", "aspa", "router_key"):
            if draw(st.booleans()):
                active[kind] = draw(st.sampled_from(group_names))
        if "aspa" in active:
            for family in ("aspa_v4", "aspa_v6"):
                if draw(st.booleans()):
                    active[family] = active["aspa"]
    membership = [draw(st.integers(0, len(group_names) - 1)) if group_names else 0 for _ in names]
    drawn = tuple(
        draw(
            sources(
                name,
                (g, group_names[g] if group_names else draw(TEXT)),
                frozenset(k for k, n in active.items() if group_names and n == group_names[g]),
            )
        )
        for name, g in zip(names, membership, strict=True)
    )
    groups = tuple(
        GroupRecord(
            i,
            g,
            draw(KINDS) | {k for k, n in active.items() if n == g and k in KIND_BITS},
            tuple(sorted(s.name for s in drawn if s.group_id == i)),
        )
        for i, g in enumerate(group_names)
    )
    policy_id = draw(st.none() | TEXT)
    return PersistedState(
        store_id=draw(TEXT),
        state_id=StateId(draw(UINT63), draw(UINT63)),
        config_revision=draw(UINT63),
        serial=draw(ASN),
        session_ids=draw(st.tuples(*[st.integers(0, 0xFFFF)] * 3)),
        published_at=draw(INT64),
        package_version=draw(TEXT),
        sources=drawn,
        groups=groups,
        active_groups=tuple((k, active[k]) for k in exchange.ACTIVE_KINDS if k in active),
        policy_id=policy_id,
        policy_json=None if policy_id is None else draw(st.none() | METADATA),
        mode=draw(st.sampled_from(["online", "offline"])),
        reference_time=draw(st.none() | INT64),
        upstream=draw(st.none() | st.builds(UpstreamRef, TEXT, UINT63, UINT63)),
        config_store_id=draw(st.none() | TEXT),
        config_epoch=draw(st.none() | UINT63),
        config_identity=draw(st.none() | TEXT),
    )


def document(state: PersistedState, **options: object) -> bytes:
    """The whole document of ``state``."""
    return b"".join(encode(state, **options))  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(state=exchange_states())
def test_any_state_round_trips_and_its_digest_is_the_documents_sha256(
    state: PersistedState,
) -> None:
    doc = document(state)
    back = decode(doc)
    assert document(back) == doc
    assert state_digest(state) == hashlib.sha256(doc).digest() == state_digest(back)
    assert [s.name for s in back.sources] == sorted(s.name for s in state.sources)


@settings(max_examples=300, deadline=None)
@given(state=exchange_states())
def test_both_record_paths_give_the_same_bytes(state: PersistedState) -> None:
    assert document(state) == document(state, record_fast_path=False)


def big_state() -> PersistedState:
    """A source whose ASPA and router key are larger than the fast path's 64 KiB."""
    providers = tuple(range(4_000_000_000, 4_000_000_000 + 7_000))  # 11 octets each: > 64 KiB
    spki = bytes(range(256)) * 160  # 40,960 octets: 81,920 hex digits
    assert 11 * len(providers) > exchange.RECORD_FAST_PATH_BYTES < 2 * len(spki)
    keys = b"".join(sorted((pack_v4(i << 8, 24, 24, i) for i in range(3000)), reverse=True))
    source = SourceRecord(
        name="big",
        group="g",
        kind="file",
        complete=True,
        capabilities=frozenset({"vrp", "aspa", "router_key"}),
        selected=frozenset({"vrp", "aspa", "router_key"}),
        accepted_at=1,
        v4=keys,
        v4_expires=array("q", range(3000)),
        v6=pack_v6(MAPPED | 0xC0000200, 120, 128, 64496),
        v6_expires=array("q", [NEVER]),
        router_keys=(
            (RouterKey(b"\x01" * 20, 7, spki), NEVER),
            (RouterKey(b"\x02" * 20, 8, b"0"), 5),
        ),
        aspas=((Aspa(65000, providers), -5), (Aspa(65001, (1,)), 6)),
        aspa_afis=bytes([1, 0]),
    )
    kinds = frozenset({"vrp", "aspa", "router_key"})
    return PersistedState(
        "s",
        StateId(1, 2),
        3,
        4,
        (5, 6, 7),
        8,
        "v",
        (source,),
        groups=(GroupRecord(0, "g", kinds, ("big",)), GroupRecord(1, "h", kinds)),
        active_groups=(("vrp", "g"), ("aspa", "g"), ("router_key", "g")),
        policy_id="p",
    )


def test_records_over_64_kib_take_the_field_path_with_the_same_bytes() -> None:
    state = big_state()
    doc = document(state)
    assert doc == document(state, record_fast_path=False)
    assert document(decode(doc)) == doc
    chunks = list(encode(state))
    assert len(chunks) > 1  # streamed, not one buffer
    assert all(chunks)
    assert max(map(len, chunks)) < 3 * exchange.RECORD_FAST_PATH_BYTES


@pytest.mark.parametrize("fast", [True, False])
def test_the_budget_stops_the_stream_at_the_first_octet_over_it(fast: bool) -> None:
    state = big_state()
    size = len(document(state))
    assert document(state, limits=Limits(max_export_bytes=size), record_fast_path=fast)
    for bound in (0, 1, 100, 5_000, 40_000, 100_000, 200_000, size - 1):
        written: list[bytes] = []
        chunks = encode(state, limits=Limits(max_export_bytes=bound), record_fast_path=fast)
        with pytest.raises(LimitExceededError, match=f"max_export_bytes={bound} at "):
            written.extend(chunks)
        assert sum(map(len, written)) <= bound


@settings(max_examples=200, deadline=None)
@given(state=exchange_states(), fraction=st.floats(0, 1))
def test_both_paths_fail_the_budget_at_the_same_member(
    state: PersistedState, fraction: float
) -> None:
    bound = int(len(document(state)) * fraction) - 1
    if bound < 0:
        return
    errors = []
    for fast in (True, False):
        with pytest.raises(LimitExceededError) as caught:
            document(state, limits=Limits(max_export_bytes=bound), record_fast_path=fast)
        errors.append(str(caught.value))
    assert errors[0] == errors[1]


def test_the_state_digest_uses_the_given_limits() -> None:
    state = big_state()
    with pytest.raises(LimitExceededError):
        state_digest(state, limits=Limits(max_export_bytes=1000))
    assert state_digest(state) == state_digest(state, limits=Limits(max_export_bytes=1 << 40))


def test_invalid_unicode_is_refused_naming_the_member() -> None:
    state = big_state()
    bad = replace(state, sources=(replace(state.sources[0], location="x\ud800"),))
    with pytest.raises(ExchangeFormatError, match=r"\$\.sources\[0\]\.location: not valid Unicode"):
        document(bad)
    # Precedence: the first failing member in document order decides the error.
    position = document(replace(bad, sources=(replace(bad.sources[0], location=""),))).index(
        b'"location"'
    )
    with pytest.raises(LimitExceededError, match=r"\$\.sources\[0\]\.(name|group|kind)"):
        document(bad, limits=Limits(max_export_bytes=position - 20))
    with pytest.raises(ExchangeFormatError):
        document(bad, limits=Limits(max_export_bytes=position + 12))


class Text(str):
    """A str subclass whose ``str()`` lies: its text is what counts."""

    __slots__ = ()

    def __str__(self) -> str:
        return "something else"


def test_a_str_subclass_is_written_as_its_text() -> None:
    state = big_state()
    named = replace(state, package_version=Text("1.2.3"))
    assert document(named) == document(replace(state, package_version="1.2.3"))


def test_escapes_and_non_ascii_follow_the_canonical_rules() -> None:
    state = replace(big_state(), package_version='a"\\\n\x01\x7fé€😀\u2028')
    doc = document(state)
    assert '"package_version":"a\\"\\\\\\n\\u0001\x7fé€😀\u2028"'.encode() in doc
    assert document(decode(doc)) == doc


#: For every field of the model, another valid value (the digest must change).
STATE_CHANGES = {
    "store_id": "other",
    "state_id": StateId(9, 9),
    "config_revision": 99,
    "serial": 99,
    "session_ids": (9, 9, 9),
    "published_at": 99,
    "package_version": "other",
    "sources": None,  # its first source's accepted_at: see `changed_state`
    "groups": None,  # a third, empty group
    "active_groups": (("vrp", "g"), ("aspa", "g"), ("aspa_v4", "g"), ("router_key", "g")),
    "policy_id": "q",
    "policy_json": "{}",
    "mode": "offline",
    "reference_time": 5,
    "upstream": UpstreamRef("u", 1, 2),
    "config_store_id": "c",
    "config_epoch": 3,
    "config_identity": "i",
}
STATE_EXCLUDED = {"observed_at": 12345, "recovered_from": StateId(1, 1)}
SOURCE_CHANGES = {
    "name": "other",
    "group": "h",  # with its group_id: both say which group the source is in
    "kind": "http",
    "complete": False,
    "capabilities": frozenset({"vrp", "router_key"}),
    "selected": frozenset({"vrp"}),
    "accepted_at": 2,
    "location": "elsewhere",
    "expires_at": 99,
    "rtr_session": 1,
    "rtr_serial": 1,
    "generated_at": 1,
    "identity": "id",
    "v4": pack_v4(0, 0, 0, 0),
    "v4_expires": None,
    "v6": pack_v6(MAPPED | 0xC0000201, 128, 128, 1),
    "v6_expires": None,
    "router_keys": (),
    "aspas": ((Aspa(1, (2,)), 3), (Aspa(65001, (1,)), 6)),
    "group_id": 1,
    "protocol": 2,
    "present": frozenset({"aspa"}),
    "invalidated": True,
    "aspa_families": 1,
    "aspa_afis": bytes([2, 2]),
    "metadata_json": '{"x":1}',
    "vrp_duplicates": ((4, pack_v4(0, 0, 0, 0), 1),),
    "router_key_duplicates": ((RouterKey(b"\x02" * 20, 8, b"0"), 5),),
    "aspa_duplicates": ((Aspa(65001, (1,)), 2, 6),),
}
SOURCE_EXCLUDED = {"evaluated_at": 777}


def regrouped(
    state: PersistedState, sources: tuple[SourceRecord, ...], **changes: object
) -> PersistedState:
    """``state`` with ``sources`` (and ``changes``), its groups' members recomputed."""
    groups = tuple(
        replace(g, source_names=tuple(sorted(s.name for s in sources if s.group_id == i)))
        for i, g in enumerate(state.groups)
    )
    return replace(state, sources=sources, groups=groups, **changes)  # type: ignore[arg-type]


def changed_state(state: PersistedState, name: str, value: object) -> PersistedState:
    """``state`` with ``name`` changed to ``value`` (or, for None, as the change list says)."""
    if name == "sources":
        value = (replace(state.sources[0], accepted_at=12),)
    elif name == "groups":
        value = (*state.groups, GroupRecord(len(state.groups), "empty", frozenset()))
    return replace(state, **{name: value})  # type: ignore[arg-type]


def changed_source(state: PersistedState, name: str, value: object) -> PersistedState:
    """``state`` with its first source's ``name`` changed, kept valid.

    A family's keys change with their expiries; a move to group ``h`` changes the group and
    its id (and the active groups); fewer capabilities drop the ASPA families.
    """
    source = state.sources[0]
    changes: dict[str, object] = {name: value}
    moved: dict[str, object] = {}
    if name in {"v4", "v6"}:
        changes[f"{name}_expires"] = array("q", [1])
    elif name in {"v4_expires", "v6_expires"}:
        changes[name] = array("q", [e - 1 for e in getattr(source, name)])
    elif name in {"group", "group_id"}:
        changes = {"group": "h", "group_id": 1}
        moved["active_groups"] = tuple((k, "h") for k, _ in state.active_groups)
    elif name == "capabilities":
        changes.update(aspa_families=0, aspa_afis=b"")
    return regrouped(state, (replace(source, **changes),), **moved)  # type: ignore[arg-type]


def test_the_change_lists_cover_every_field_of_the_model() -> None:
    assert {f.name for f in fields(PersistedState)} == set(STATE_CHANGES) | set(STATE_EXCLUDED)
    assert {f.name for f in fields(SourceRecord)} == set(SOURCE_CHANGES) | set(SOURCE_EXCLUDED)


@pytest.mark.parametrize(("name", "value"), STATE_CHANGES.items(), ids=list(STATE_CHANGES))
def test_the_digest_covers_every_state_field(name: str, value: object) -> None:
    state = big_state()
    assert state_digest(state) == state_digest(big_state())  # deterministic
    assert state_digest(changed_state(state, name, value)) != state_digest(state)


@pytest.mark.parametrize(("name", "value"), SOURCE_CHANGES.items(), ids=list(SOURCE_CHANGES))
def test_the_digest_covers_every_source_field(name: str, value: object) -> None:
    state = big_state()
    assert state_digest(changed_source(state, name, value)) != state_digest(state)


@pytest.mark.parametrize(
    ("name", "value"),
    [*STATE_EXCLUDED.items(), *SOURCE_EXCLUDED.items()],
    ids=["observed_at", "recovered_from", "evaluated_at"],
)
def test_the_digest_leaves_out_the_write_and_observation_times(name: str, value: object) -> None:
    state = big_state()
    if name in SOURCE_EXCLUDED:
        other = replace(state, sources=(replace(state.sources[0], **{name: value}),))  # type: ignore[arg-type]
    else:
        other = replace(state, **{name: value})  # type: ignore[arg-type]
    assert state_digest(other) == state_digest(state)


def test_the_source_order_does_not_change_the_digest() -> None:
    a, b = replace(big_state().sources[0], name="a"), replace(big_state().sources[0], name="b")
    one = regrouped(big_state(), (a, b))
    assert state_digest(one) == state_digest(regrouped(one, (b, a)))
