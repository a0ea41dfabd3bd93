"""SLURM parsing (RFC 8416, ASPA draft): valid files, one invalid case per rule, and the §4.2
overlap checks when several files are combined."""

from __future__ import annotations

import base64
import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest

from snapshot.model import Aspa, RouterKey, Vrp
from snapshot.slurm import (
    EMPTY_POLICY,
    AspaFilter,
    BgpsecFilter,
    PrefixFilter,
    SlurmError,
    SlurmPolicy,
    covers,
    decode_base64,
    parse_slurm,
)
from snapshot.slurm_combine import combine
from tests.slurm_docs import slurm_document

SKI = bytes(range(1, 21))
SKI_B64URL = base64.urlsafe_b64encode(SKI).decode().rstrip("=")
#: Octets whose base64 has "+" and "/" (and so "-" and "_" in base64url).
SPKI = bytes([0xFB, 0xFF, 0xBF]) * 30


def b64(data: bytes) -> str:
    """Base64url without padding, as RFC 8416 writes it."""
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def parse(doc: object, name: str = "f.json") -> SlurmPolicy:
    return parse_slurm(json.dumps(doc).encode(), name)


def full_document() -> dict[str, Any]:
    """One entry of every kind and shape."""
    return slurm_document(
        prefixFilters=[
            {"prefix": "192.0.2.0/24", "comment": "everything inside"},
            {"asn": 64496},
            {"prefix": "2001:db8::/32", "asn": 64497},
        ],
        bgpsecFilters=[
            {"asn": 64496, "comment": "all keys of the AS"},
            {"SKI": SKI_B64URL},
            {"asn": 64497, "SKI": SKI_B64URL},
        ],
        aspaFilters=[{"customerAsn": 64500, "comment": "drop this ASPA"}],
        prefixAssertions=[
            {"prefix": "198.51.100.0/24", "asn": 64496},
            {"prefix": "2001:db8:1::/48", "asn": 64496, "maxPrefixLength": 56, "comment": "x"},
        ],
        bgpsecAssertions=[{"asn": 64496, "SKI": SKI_B64URL, "routerPublicKey": b64(SPKI)}],
        aspaAssertions=[{"customerAsn": 64501, "providerAsns": [64502, 64503]}],
    )


# ---------------------------------------------------------------- valid files


def test_full_document() -> None:
    policy = parse(full_document())
    net = ipaddress.ip_network
    assert policy.prefix_filters == (
        PrefixFilter(net("192.0.2.0/24"), None),
        PrefixFilter(None, 64496),
        PrefixFilter(net("2001:db8::/32"), 64497),
    )
    assert policy.prefix_filters[0].comment == "everything inside"
    assert policy.prefix_filters[2].origin == "f.json: validationOutputFilters.prefixFilters[2]"
    assert policy.bgpsec_filters == (
        BgpsecFilter(64496, None),
        BgpsecFilter(None, SKI),
        BgpsecFilter(64497, SKI),
    )
    assert policy.aspa_filters == (AspaFilter(64500),)
    assert [a.vrp for a in policy.prefix_assertions] == [
        Vrp.parse("198.51.100.0/24", 24, 64496),  # no maxPrefixLength: the prefix length
        Vrp.parse("2001:db8:1::/48", 56, 64496),
    ]
    assert [a.key for a in policy.bgpsec_assertions] == [RouterKey(SKI, 64496, SPKI)]
    assert [a.aspa for a in policy.aspa_assertions] == [Aspa(64501, (64502, 64503))]
    assert policy.summary() == (
        "prefixFilters=3, bgpsecFilters=3, aspaFilters=1, prefixAssertions=2, "
        "bgpsecAssertions=1, aspaAssertions=1"
    )


def test_empty_documents() -> None:
    assert parse(slurm_document(1)) == EMPTY_POLICY
    assert parse(slurm_document(2)) == EMPTY_POLICY
    assert EMPTY_POLICY.is_empty()
    assert EMPTY_POLICY.summary() == "empty"


def test_version_1_has_prefix_and_bgpsec_only() -> None:
    doc = slurm_document(1, prefixFilters=[{"asn": 1}], bgpsecAssertions=[])
    assert parse(doc).prefix_filters == (PrefixFilter(None, 1),)


def test_comments_and_origins_do_not_change_equality() -> None:
    a = parse(slurm_document(prefixFilters=[{"asn": 1, "comment": "a"}]), "a.json")
    b = parse(slurm_document(prefixFilters=[{"asn": 1}]), "b.json")
    assert a == b


@pytest.mark.parametrize(
    "text",
    [
        SKI_B64URL,  # RFC 8416: base64url, no padding
        base64.urlsafe_b64encode(SKI).decode(),  # padded
        base64.b64encode(SKI).decode(),  # the standard alphabet, as the ASPA draft's example
        base64.b64encode(SKI).decode().rstrip("="),
    ],
)
def test_ski_base64_forms(text: str) -> None:
    assert parse(slurm_document(bgpsecFilters=[{"SKI": text}])).bgpsec_filters[0].ski == SKI


def test_decode_base64_alphabets() -> None:
    assert decode_base64(b64(SPKI)) == SPKI
    assert decode_base64(base64.b64encode(SPKI).decode()) == SPKI
    with pytest.raises(ValueError, match="mixes"):
        decode_base64("+-ab")
    with pytest.raises(ValueError, match="empty"):
        decode_base64("==")
    with pytest.raises(ValueError, match="not base64"):
        decode_base64("a b")


def test_routinator_aspa_spellings() -> None:
    doc = slurm_document(
        aspaFilters=[{"customerAsid": 64500}],
        aspaAssertions=[{"customerAsid": 64501, "providerSet": [64502, 64503]}],
    )
    policy = parse(doc)
    assert policy.aspa_filters == (AspaFilter(64500),)
    assert [a.aspa for a in policy.aspa_assertions] == [Aspa(64501, (64502, 64503))]
    doc = slurm_document(aspaAssertions=[{"customerAsid": 64501, "providerSet": [64503, 64502]}])
    with pytest.raises(SlurmError, match=r"aspaAssertions\[0\]\.providerSet\[1\]: 64502 after"):
        parse(doc)
    doc = slurm_document(aspaAssertions=[{"customerAsid": 0, "providerSet": [1]}])
    with pytest.raises(SlurmError, match=r"aspaAssertions\[0\]\.customerAsid: AS0 cannot be"):
        parse(doc)


def test_aspa_as0_alone_is_no_providers() -> None:
    policy = parse(slurm_document(aspaAssertions=[{"customerAsn": 7, "providerAsns": [0]}]))
    assert policy.aspa_assertions[0].aspa == Aspa(7, (0,))


def test_covers() -> None:
    net = ipaddress.ip_network
    assert covers(net("10.0.0.0/8"), net("10.1.0.0/16"))
    assert covers(net("10.0.0.0/8"), net("10.0.0.0/8"))
    assert not covers(net("10.1.0.0/16"), net("10.0.0.0/8"))
    assert not covers(net("10.0.0.0/8"), net("11.0.0.0/16"))
    assert covers(net("0.0.0.0/0"), net("255.255.255.255/32"))
    assert not covers(net("0.0.0.0/0"), net("::/0"))


def test_filter_matching() -> None:
    vrp = Vrp.parse("10.1.0.0/16", 24, 64496)
    net = ipaddress.ip_network
    assert PrefixFilter(net("10.0.0.0/8"), None).matches(vrp)
    assert PrefixFilter(net("10.0.0.0/8"), 64496).matches(vrp)
    assert not PrefixFilter(net("10.0.0.0/8"), 64497).matches(vrp)
    assert not PrefixFilter(net("10.1.0.0/24"), None).matches(vrp)  # less specific VRP
    assert PrefixFilter(None, 64496).matches(vrp)
    key = RouterKey(SKI, 64496, b"\x30")
    assert BgpsecFilter(64496, None).matches(key)
    assert BgpsecFilter(None, SKI).matches(key)
    assert not BgpsecFilter(64496, bytes(20)).matches(key)


# ---------------------------------------------------------------- invalid files


def test_not_json() -> None:
    with pytest.raises(SlurmError, match=r"^f\.json: not valid JSON: Expecting"):
        parse_slurm(b"{", "f.json")


def test_top_level_not_object() -> None:
    with pytest.raises(SlurmError, match=r"^f\.json: the document must be a JSON object$"):
        parse([])


def test_duplicate_member() -> None:
    text = b'{"slurmVersion": 2, "slurmVersion": 2}'
    with pytest.raises(SlurmError, match="'slurmVersion' appears twice"):
        parse_slurm(text, "f.json")


def test_nan_is_not_a_number() -> None:
    text = json.dumps(slurm_document(prefixFilters=[{"asn": 1}])).replace("1}", "NaN}")
    with pytest.raises(SlurmError, match="NaN is not a JSON number"):
        parse_slurm(text, "f.json")


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """Set (or with `...` delete) the member at a dotted path with [i] indices."""
    parts = path.replace("[", ".").replace("]", "").split(".")
    target: Any = doc
    for part in parts[:-1]:
        target = target[int(part)] if part.isdigit() else target[part]
    last = parts[-1]
    if value is ...:
        del target[last]
    elif last.isdigit():
        target[int(last)] = value
    else:
        target[last] = value
    return doc


F = "validationOutputFilters"
A = "locallyAddedAssertions"

INVALID: list[tuple[str, Any, str]] = [
    # (path to change, new value or ... to delete, expected message after "f.json: ")
    ("slurmVersion", 3, "slurmVersion: must be 1 (RFC 8416) or 2 (with ASPA), got 3"),
    ("slurmVersion", True, "slurmVersion: must be 1 (RFC 8416) or 2 (with ASPA), got True"),
    ("slurmVersion", ..., "slurmVersion: missing"),
    ("extra", 1, "extra: unknown member (known: slurmVersion, validationOutputFilters, "),
    (F, ..., "validationOutputFilters: missing"),
    (F, [], "validationOutputFilters: must be an object, got an array"),
    (f"{F}.aspaFilters", ..., f"{F}.aspaFilters: missing"),
    (f"{F}.aspaFilter", [], f"{F}.aspaFilter: unknown member (known: prefixFilters, "),
    (f"{A}.aspaAssertions", None, f"{A}.aspaAssertions: must be an array, got null"),
    # prefix filters
    (f"{F}.prefixFilters[0].prefix", "192.0.2.1/24", "prefixFilters[0].prefix: '192.0.2.1/24': "),
    (f"{F}.prefixFilters[0].prefix", "192.0.2.0", "[0].prefix: must be a prefix such as "),
    (f"{F}.prefixFilters[0].prefix", 3232235520, "[0].prefix: must be a prefix such as "),
    (f"{F}.prefixFilters[0].prefix", "2001:db8::/129", "[0].prefix: '2001:db8::/129': "),
    (f"{F}.prefixFilters[0].prefix", "fe80::%1/64", "[0].prefix: must be a prefix such as "),
    (f"{F}.prefixFilters[0].comment", 5, "prefixFilters[0].comment: must be a string, got 5"),
    (f"{F}.prefixFilters[1]", {"comment": "x"}, "prefixFilters[1]: a prefix filter needs 'prefix'"),
    (f"{F}.prefixFilters[1]", 64496, "prefixFilters[1]: must be an object, got 64496"),
    (f"{F}.prefixFilters[1].asn", "AS64496", "prefixFilters[1].asn: must be a number (an ASN)"),
    (f"{F}.prefixFilters[1].asn", 2**32, "prefixFilters[1].asn: ASN must be an integer in 0.."),
    (f"{F}.prefixFilters[1].asn", -1, "prefixFilters[1].asn: ASN must be an integer in 0.."),
    (f"{F}.prefixFilters[1].asn", 64496.0, "prefixFilters[1].asn: must be a number (an ASN)"),
    (f"{F}.prefixFilters[1].asn", False, "prefixFilters[1].asn: must be a number (an ASN)"),
    (f"{F}.prefixFilters[1].maxPrefixLength", 24, "prefixFilters[1].maxPrefixLength: unknown"),
    # BGPsec filters
    (f"{F}.bgpsecFilters[1]", {}, "bgpsecFilters[1]: a BGPsec filter needs 'asn', 'SKI' or both"),
    (f"{F}.bgpsecFilters[1].SKI", "AAAA", "bgpsecFilters[1].SKI: decodes to 3 octets; an SKI"),
    (f"{F}.bgpsecFilters[1].SKI", "!!", "bgpsecFilters[1].SKI: '!!' is not base64"),
    (f"{F}.bgpsecFilters[1].SKI", 7, "bgpsecFilters[1].SKI: must be a base64 string, got 7"),
    (f"{F}.bgpsecFilters[1].ski", "x", "bgpsecFilters[1].ski: unknown member"),
    # ASPA filters
    (f"{F}.aspaFilters[0].customerAsn", ..., "aspaFilters[0].customerAsn: missing"),
    (f"{F}.aspaFilters[0].customerAsid", 1, "aspaFilters[0].customerAsid: give 'customerAsn' or"),
    (f"{F}.aspaFilters[0].customerASN", 1, "aspaFilters[0].customerASN: unknown member"),
    # prefix assertions
    (f"{A}.prefixAssertions[0].asn", ..., "prefixAssertions[0].asn: missing"),
    (f"{A}.prefixAssertions[0].prefix", ..., "prefixAssertions[0].prefix: missing"),
    (f"{A}.prefixAssertions[1].maxPrefixLength", 47, "maxPrefixLength: 47 is outside 48..128"),
    (f"{A}.prefixAssertions[1].maxPrefixLength", 129, "maxPrefixLength: 129 is outside 48..128"),
    (f"{A}.prefixAssertions[0].maxPrefixLength", 33, "maxPrefixLength: 33 is outside 24..32"),
    (f"{A}.prefixAssertions[0].maxPrefixLength", "24", "maxPrefixLength: '24' is outside 24..32"),
    # BGPsec assertions
    (f"{A}.bgpsecAssertions[0].routerPublicKey", ..., "bgpsecAssertions[0].routerPublicKey: miss"),
    (f"{A}.bgpsecAssertions[0].SKI", ..., "bgpsecAssertions[0].SKI: missing"),
    (f"{A}.bgpsecAssertions[0].asn", ..., "bgpsecAssertions[0].asn: missing"),
    (f"{A}.bgpsecAssertions[0].routerPublicKey", "", "routerPublicKey: is empty"),
    # ASPA assertions
    (f"{A}.aspaAssertions[0].providerAsns", [], "aspaAssertions[0].providerAsns: must be a non-"),
    (f"{A}.aspaAssertions[0].providerAsns", 64502, "[0].providerAsns: must be a non-empty array"),
    (f"{A}.aspaAssertions[0].providerAsns", [64503, 64502], "providerAsns[1]: 64502 after 64503"),
    (f"{A}.aspaAssertions[0].providerAsns", [64502, 64502], "providerAsns[1]: 64502 after 64502"),
    (
        f"{A}.aspaAssertions[0].providerAsns",
        [64501],
        "providerAsns[0]: the customer AS64501 cannot",
    ),
    (f"{A}.aspaAssertions[0].providerAsns", [1, "2"], "providerAsns[1]: must be an ASN, got '2'"),
    (f"{A}.aspaAssertions[0].providerAsns", [2**32], "providerAsns[0]: must be an ASN, got 4294"),
    (f"{A}.aspaAssertions[0].customerAsn", 0, "aspaAssertions[0].customerAsn: AS0 cannot be an"),
    (f"{A}.aspaAssertions[0].providerSet", [1], "aspaAssertions[0].providerSet: give 'providerAs"),
    (f"{A}.aspaAssertions[0].providerAsns", ..., "aspaAssertions[0].providerAsns: missing"),
    (f"{A}.aspaAssertions[0].customerAsn", ..., "aspaAssertions[0].customerAsn: missing"),
    (f"{A}.aspaAssertions[0].providers", [1], "aspaAssertions[0].providers: unknown member"),
]


@pytest.mark.parametrize(("path", "value", "message"), INVALID, ids=[i[0] for i in INVALID])
def test_invalid(path: str, value: Any, message: str) -> None:
    doc = _set(full_document(), path, value)
    with pytest.raises(SlurmError) as caught:
        parse(doc)
    text = str(caught.value)
    assert text.startswith("f.json: "), text
    assert message in text, text


def test_aspa_members_need_version_2() -> None:
    doc = slurm_document(1)
    doc[F]["aspaFilters"] = []
    with pytest.raises(SlurmError, match=r"f\.json: validationOutputFilters\.aspaFilters: unknown"):
        parse(doc)


def test_too_many_aspa_providers() -> None:
    doc = slurm_document(
        aspaAssertions=[{"customerAsn": 1, "providerAsns": list(range(2, 16_400))}]
    )
    with pytest.raises(SlurmError, match=r"providerAsns: more than 16380 providers"):
        parse(doc)


# ---------------------------------------------------------------- combining files


def one(name: str, **members: list[Any]) -> SlurmPolicy:
    return parse(slurm_document(2, **members), name)


def test_combine_concatenates_in_order() -> None:
    a = one(
        "a", prefixFilters=[{"asn": 1}], aspaAssertions=[{"customerAsn": 5, "providerAsns": [6]}]
    )
    b = one("b", prefixFilters=[{"asn": 2}], prefixAssertions=[{"prefix": "10.0.0.0/8", "asn": 3}])
    both = combine([a, b])
    assert [f.asn for f in both.prefix_filters] == [1, 2]
    assert [x.vrp for x in both.prefix_assertions] == [Vrp.parse("10.0.0.0/8", 8, 3)]
    assert [x.aspa for x in both.aspa_assertions] == [Aspa(5, (6,))]
    assert combine([a]) is a
    assert combine([]) == EMPTY_POLICY


def test_overlap_within_one_file_is_allowed() -> None:
    a = one(
        "a",
        prefixFilters=[{"prefix": "10.0.0.0/8"}],
        prefixAssertions=[{"prefix": "10.1.0.0/16", "asn": 1}],
        bgpsecFilters=[{"asn": 1}],
        bgpsecAssertions=[{"asn": 1, "SKI": SKI_B64URL, "routerPublicKey": b64(SPKI)}],
    )
    assert combine([a, one("b")]).prefix_filters == a.prefix_filters


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("10.0.0.0/8", "10.0.0.0/8"),
        ("10.0.0.0/8", "10.255.255.0/24"),
        ("10.255.255.0/24", "10.0.0.0/8"),
        ("0.0.0.0/0", "192.0.2.0/24"),
        ("2001:db8::/32", "2001:db8:ffff::/48"),
    ],
)
def test_prefix_overlap_between_files(first: str, second: str) -> None:
    a = one("a.json", prefixFilters=[{"prefix": "172.16.0.0/12"}, {"prefix": first}])
    b = one("b.json", prefixAssertions=[{"prefix": second, "asn": 1}])
    with pytest.raises(SlurmError) as caught:
        combine([one("c.json"), a, b])
    filter_text = f"a.json: validationOutputFilters.prefixFilters[1] ({first})"
    assertion_text = f"b.json: locallyAddedAssertions.prefixAssertions[0] ({second})"
    wider = ipaddress.ip_network(first).num_addresses >= ipaddress.ip_network(second).num_addresses
    outer, inner = (filter_text, assertion_text) if wider else (assertion_text, filter_text)
    assert str(caught.value) == f"SLURM files overlap (RFC 8416 §4.2): {outer} and {inner}"


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("10.0.0.0/9", "10.128.0.0/9"),  # adjacent
        ("10.0.0.0/8", "::/0"),  # other family, same numbers
        ("0.0.0.0/0", "::/0"),
    ],
)
def test_disjoint_prefixes_do_not_overlap(first: str, second: str) -> None:
    a = one("a", prefixFilters=[{"prefix": first}])
    b = one("b", prefixFilters=[{"prefix": second}])
    assert len(combine([a, b]).prefix_filters) == 2


def test_asn_only_prefix_filters_do_not_overlap() -> None:
    # §4.2 is about addresses: the same origin ASN in two files is no conflict.
    a = one("a", prefixFilters=[{"asn": 64496}])
    b = one("b", prefixFilters=[{"asn": 64496}], prefixAssertions=[{"prefix": "::/0", "asn": 1}])
    assert len(combine([a, b]).prefix_filters) == 2


def test_deep_nesting_overlap_found_below_unrelated_siblings() -> None:
    a = one("a", prefixFilters=[{"prefix": "10.0.0.0/8"}])
    b = one(
        "b",
        prefixFilters=[{"prefix": "9.0.0.0/8"}, {"prefix": "11.0.0.0/8"}],
        prefixAssertions=[{"prefix": f"10.{i}.0.0/16", "asn": 1} for i in (5, 200)],
    )
    with pytest.raises(SlurmError, match=r"a: validationOutputFilters\.prefixFilters\[0\] \(10\."):
        combine([a, b])


def test_bgpsec_asn_overlap() -> None:
    a = one("a", bgpsecFilters=[{"SKI": SKI_B64URL}, {"asn": 64496}])
    b = one("b", bgpsecAssertions=[{"asn": 64496, "SKI": SKI_B64URL, "routerPublicKey": b64(SPKI)}])
    with pytest.raises(SlurmError) as caught:
        combine([a, b])
    assert str(caught.value) == (
        "SLURM files overlap (RFC 8416 §4.2): BGPsec ASN 64496 is used in "
        "a: validationOutputFilters.bgpsecFilters[1] and in "
        "b: locallyAddedAssertions.bgpsecAssertions[0]"
    )
    # An SKI-only filter names no ASN: no conflict.
    assert combine([one("a", bgpsecFilters=[{"SKI": SKI_B64URL}]), b]).bgpsec_assertions


def test_aspa_customer_overlap() -> None:
    a = one("a", aspaFilters=[{"customerAsn": 64500}])
    b = one("b", aspaAssertions=[{"customerAsn": 64500, "providerAsns": [1]}])
    with pytest.raises(SlurmError, match=r"ASPA customer 64500 is used in a: .*aspaFilters\[0\]"):
        combine([a, b])
    c = one("c", aspaAssertions=[{"customerAsn": 64501, "providerAsns": [64500]}])
    assert combine([a, c]).aspa_assertions == c.aspa_assertions  # a provider is no customer


def test_readme_example_parses() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("### SLURM") :]
    start = section.index("```json\n") + len("```json\n")
    example = section[start : section.index("\n```", start)]
    policy = parse_slurm(example, "README")
    assert policy.summary() == (
        "prefixFilters=3, bgpsecFilters=2, aspaFilters=1, prefixAssertions=2, "
        "bgpsecAssertions=1, aspaAssertions=1"
    )
