"""Strict decoding of exchange documents, and the separate version-1 import.

Every refusal names the place in the document; version 1 and version 2 are read only by
their own path; the version-1 import keeps every time and gives ASPAs afi 0.
"""

from __future__ import annotations

from array import array
from dataclasses import replace

import pytest
from hypothesis import given, settings

from persistence.exchange import ExchangeFormatError, encode_version_1, state_digest
from persistence.exchange_import import decode, import_version_1
from persistence.limits import LimitExceededError, Limits
from persistence.state import NEVER, PersistedState
from snapshot.model import Aspa, RouterKey, pack_v4, pack_v6
from tests.persistence.test_exchange import MAPPED, big_state, document, exchange_states


def small_state() -> PersistedState:
    """A state of one source with a few records of each kind (and an IPv6-only ASPA)."""
    state = big_state()
    v4 = pack_v4(0x0A000B00, 24, 24, 11) + pack_v4(0x0A000A00, 24, 24, 10)
    source = replace(
        state.sources[0],
        v4=v4,
        v4_expires=array("q", [1, 0]),
        v6=pack_v6(MAPPED | 0xC0000200, 120, 128, 64496),
        v6_expires=array("q", [NEVER]),
        router_keys=((RouterKey(b"\xab" * 20, 8, b"\xcd\xef"), 5),),
        aspas=((Aspa(65000, (1, 2)), -5), (Aspa(65001, (1,)), 6)),
        aspa_afis=bytes([1, 0]),
    )
    return replace(
        state,
        sources=(source,),
        active_groups=(("vrp", "g"), ("aspa_v4", "g"), ("aspa_v6", "g")),
    )


def edit(old: str, new: str, doc: bytes | None = None) -> bytes:
    """The small state's document with ``old`` (which must occur once) replaced by ``new``."""
    doc = document(small_state()) if doc is None else doc
    assert doc.count(old.encode()) == 1, old
    return doc.replace(old.encode(), new.encode())


def test_the_small_document_decodes() -> None:
    doc = document(small_state())
    assert decode(doc).sources[0].afi_of(0) == 1


#: (what is wrong, the edited document, the error path, a part of the message)
REFUSALS = [
    ("unknown member", edit('"mode"', '"extra":1,"mode"'), "$.extra", "unknown member"),
    ("missing member", edit('"policy":null,', ""), "$.policy", "missing member"),
    (
        "member order",
        edit('"serial":4,"session_ids":[5,6,7]', '"session_ids":[5,6,7],"serial":4'),
        "$",
        "order",
    ),
    ("duplicate member", edit('"mode":"online"', '"mode":"online","mode":"online"'), "$", "twice"),
    ("string for integer", edit('"serial":4', '"serial":"4"'), "$.serial", "expected an integer"),
    ("boolean for integer", edit('"serial":4', '"serial":true'), "$.serial", "expected an integer"),
    ("float", edit('"serial":4', '"serial":4.0'), "$", "integers only"),
    ("exponent", edit('"serial":4', '"serial":4e0'), "$", "integers only"),
    ("NaN", edit('"serial":4', '"serial":NaN'), "$", "integers only"),
    ("serial range", edit('"serial":4', '"serial":4294967296'), "$.serial", "out of range"),
    ("session range", edit("[5,6,7]", "[5,6,65536]"), "$.session_ids[2]", "out of range"),
    (
        "time range",
        edit('"published_at":8', f'"published_at":{2**63}'),
        "$.published_at",
        "out of range",
    ),
    ("mode", edit('"mode":"online"', '"mode":"sometimes"'), "$.mode", "expected one of"),
    (
        "integer for boolean",
        edit('"complete":true', '"complete":1'),
        "$.sources[0].complete",
        "true or false",
    ),
    (
        "unknown kind",
        edit('"selected":["vrp","aspa","router_key"]', '"selected":["vrp","bgp"]'),
        "$.sources[0].selected[1]",
        "unknown kind",
    ),
    (
        "kind order",
        edit('"selected":["vrp","aspa","router_key"]', '"selected":["aspa","vrp"]'),
        "$.sources[0].selected",
        "order",
    ),
    (
        "protocol range",
        edit('"protocol":null', '"protocol":3'),
        "$.sources[0].protocol",
        "out of range",
    ),
    (
        "aspa_families range",
        edit('"aspa_families":3', '"aspa_families":4'),
        "$.sources[0].aspa_families",
        "out of range",
    ),
    ("host bits", edit('"10.0.11.0/24"', '"10.0.11.1/24"'), "$.sources[0].vrps[0][0]", "host bits"),
    (
        "zero-padded IPv4",
        edit('"10.0.11.0/24"', '"10.0.011.0/24"'),
        "$.sources[0].vrps[0][0]",
        "canonical",
    ),
    (
        "hex mapped spelling",
        edit('"::ffff:192.0.2.0/120"', '"::ffff:c000:200/120"'),
        "$.sources[0].vrps[2][0]",
        "expected '::ffff:192.0.2.0'",
    ),
    (
        "max length",
        edit('"10.0.11.0/24",24', '"10.0.11.0/24",23'),
        "$.sources[0].vrps[0][1]",
        "out of range",
    ),
    (
        "VRP order",
        edit(
            '["10.0.11.0/24",24,11,1],["10.0.10.0/24",24,10,0]',
            '["10.0.10.0/24",24,10,0],["10.0.11.0/24",24,11,1]',
        ),
        "$.sources[0].vrps[1]",
        "descending",
    ),
    ("uppercase hex", edit("ab" * 20, "AB" * 20), "$.sources[0].router_keys[0][0]", "lowercase"),
    ("short SKI", edit(f'"{"ab" * 20}"', '"ab"'), "$.sources[0].router_keys[0][0]", "20 octets"),
    ("afi 0 spelled", edit("[65000,1,", "[65000,0,"), "$.sources[0].aspas[0][1]", "out of range"),
    ("providers order", edit("[1,2]", "[2,1]"), "$.sources[0].aspas[0][2]", "normal form"),
    ("customer 0", edit("[65000,1,", "[0,1,"), "$.sources[0].aspas[0][0]", "out of range"),
    (
        "lone surrogate",
        edit('"name":"big"', '"name":"b\\ud800"'),
        "$.sources[0].name",
        "not valid Unicode",
    ),
    ("odd hex", edit('"cdef"', '"cde"'), "$.sources[0].router_keys[0][2]", "lowercase"),
    ("empty SPKI", edit('"cdef"', '""'), "$.sources[0].router_keys[0]", "must not be empty"),
    (
        "group id",
        edit('"groups":[]', '"groups":[{"id":1,"name":"g","kinds":[],"sources":[]}]'),
        "$.groups[0].id",
        "expected 0",
    ),
    (
        "group members",
        edit('"groups":[]', '"groups":[{"id":0,"name":"g","kinds":[],"sources":["b","a"]}]'),
        "$.groups[0]",
        "sorted",
    ),
    ("active kind", edit('["vrp","g"]', '["bgp","g"]'), "$.active_groups[0]", "unknown kind"),
    (
        "v1 active kind",
        edit('["aspa_v4","g"],["aspa_v6","g"]', '["aspa","g"]'),
        "$.active_groups[1]",
        "unknown kind",
    ),
    (
        "upstream member",
        edit('"upstream":null', '"upstream":{"store_id":"x","epoch":1}'),
        "$.upstream.generation",
        "missing member",
    ),
    ("whitespace", edit('"serial":4', '"serial": 4'), "$", "canonical"),
    ("escaped letter", edit('"name":"big"', '"name":"\\u0062ig"'), "$", "canonical"),
    (
        "not UTF-8",
        edit('"name":"big"', '"name":"b\xff"').replace("ÿ".encode(), b"\xff"),
        "$",
        "not UTF-8",
    ),
    ("not JSON", edit('"serial":4', '"serial":'), "$", "not JSON"),
    ("wrong format", edit('"rtr-serve-exchange"', '"other"'), "$.format", "expected"),
    ("future version", edit('"version":2', '"version":3'), "$.version", "unknown version"),
]


@pytest.mark.parametrize(
    ("doc", "path", "message"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS]
)
def test_a_bad_document_is_refused_naming_the_place(doc: bytes, path: str, message: str) -> None:
    with pytest.raises(ExchangeFormatError) as caught:
        decode(doc)
    assert caught.value.path == path
    assert message in caught.value.problem


def test_a_document_over_the_budget_is_refused_before_parsing() -> None:
    doc = document(small_state())
    assert decode(doc, limits=Limits(max_export_bytes=len(doc)))
    with pytest.raises(LimitExceededError, match="max_export_bytes"):
        decode(doc, limits=Limits(max_export_bytes=len(doc) - 1))


def v1_state() -> PersistedState:
    """A state version 1 can express: every ASPA for both families, a mapped IPv6 VRP."""
    state = small_state()
    source = replace(
        state.sources[0],
        aspa_afis=b"",
        v6=pack_v6(MAPPED | 0xC0000201, 128, 128, 64496),
        v6_expires=array("q", [1_767_225_600_000_000]),
    )
    return replace(state, sources=(source,))


def test_the_version_1_import_is_a_separate_explicit_path() -> None:
    v1 = b"".join(encode_version_1(v1_state()))
    v2 = document(v1_state())
    assert b'"::ffff:c000:201/128"' in v1
    assert b'"::ffff:192.0.2.1/128"' in v2
    assert b'["aspa","g"]' in v1
    with pytest.raises(ExchangeFormatError, match=r"\$\.version: a version 1 document: import it"):
        decode(v1)
    with pytest.raises(ExchangeFormatError, match=r"\$\.version: a version 2 document"):
        import_version_1(v2)


def test_the_version_1_import_keeps_every_time_and_covers_both_aspa_families() -> None:
    original = v1_state()
    imported = import_version_1(b"".join(encode_version_1(original)))
    source, before = imported.sources[0], original.sources[0]
    assert [source.afi_of(i) for i in range(len(source.aspas))] == [0, 0]
    assert source.aspa_families == 3
    assert dict(imported.active_groups) == {"vrp": "g", "aspa_v4": "g", "aspa_v6": "g"}
    assert list(source.v4_expires) == list(before.v4_expires)
    assert list(source.v6_expires) == list(before.v6_expires)
    assert [e for _, e in source.aspas] == [e for _, e in before.aspas]
    assert [e for _, e in source.router_keys] == [e for _, e in before.router_keys]
    assert (source.accepted_at, source.expires_at, source.generated_at) == (
        before.accepted_at,
        before.expires_at,
        before.generated_at,
    )
    assert source.evaluated_at == source.accepted_at  # nothing later than the document says
    assert imported.published_at == original.published_at
    # The same state as version 2 (the v1 import granted both families explicitly).
    assert state_digest(imported) == state_digest(original)


def test_version_1_cannot_express_single_family_aspas() -> None:
    with pytest.raises(ExchangeFormatError, match="version 1 has no single-family ASPAs"):
        b"".join(encode_version_1(small_state()))
    per_family = replace(v1_state(), active_groups=(("aspa_v4", "a"), ("aspa_v6", "b")))
    with pytest.raises(ExchangeFormatError, match="per-family ASPA groups"):
        b"".join(encode_version_1(per_family))


def test_a_version_1_document_with_an_afi_is_refused() -> None:
    v1 = b"".join(encode_version_1(v1_state()))
    bad = v1.replace(b"[65000,[1,2]", b"[65000,null,[1,2]")
    with pytest.raises(ExchangeFormatError, match=r"aspas\[0\]: expected 3 elements"):
        import_version_1(bad)


@settings(max_examples=100, deadline=None)
@given(state=exchange_states())
def test_any_version_1_expressible_state_round_trips_through_the_import(
    state: PersistedState,
) -> None:
    flattened = replace(
        state,
        sources=tuple(
            replace(
                s,
                aspa_afis=b"",
                aspa_families=3 if "aspa" in s.capabilities else 0,
                aspa_duplicates=tuple((a, 0, e) for a, _, e in s.aspa_duplicates),
            )
            for s in state.sources
        ),
        active_groups=tuple(p for p in state.active_groups if p[0] not in {"aspa_v4", "aspa_v6"}),
    )
    v1 = b"".join(encode_version_1(flattened))
    assert state_digest(import_version_1(v1)) == state_digest(flattened)


def test_never_is_kept_as_written() -> None:
    doc = document(small_state())
    assert str(NEVER).encode() in doc
    assert decode(doc).sources[0].v6_expires[0] == NEVER
