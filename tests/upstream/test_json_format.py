"""`upstream.json_format`: every export shape, rejections, de-duplication, expiry, decompression."""

from __future__ import annotations

import base64
import bz2
import gzip
import json
import lzma
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from snapshot.model import Aspa, RouterKey
from snapshot.snapshot import Snapshot
from tests.upstream.helpers import (
    SKI,
    SKI_HEX,
    SPKI,
    SPKI_B64,
    URLSAFE_SPKI,
    dumps,
    roa,
    router_key,
    ts,
    vrp,
)
from upstream.decompress import decompress
from upstream.file_source import load_file
from upstream.format_error import FormatError
from upstream.json_format import parse_entries, parse_export
from upstream.payload import NO_EXPIRY, SourcePayload
from upstream.source import check_generated

E1 = 1_790_000_000
E2 = 1_790_000_500

# ---------------------------------------------------------------- accepted shapes


def test_rpki_client_current_shape() -> None:
    """rpki-client ``-j`` since 2023: int ASNs, expires, bgpsec_keys, aspas; extras ignored."""
    doc = {
        "metadata": {
            "buildmachine": "rp1",
            "buildtime": "2025-07-20T09:31:33Z",
            "elapsedtime": 91,
            "roas": 2,
            "failedroas": 0,
            "vrps": 3,
            "uniquevrps": 2,
            "vaps": 1,
            "uniquevaps": 1,
            "bgpsec_pubkeys": 1,
            "talfiles": ["/etc/tals/ripe.tal", "/etc/tals/arin.tal"],
            "cachedir_del_files": 13,
        },
        "roas": [
            roa("192.0.2.0/24", 24, 64496, ta="ripe", expires=E1),
            roa("2001:db8::/32", 48, 64497, ta="arin", expires=E2),
            roa("192.0.2.0/24", 24, 64496, ta="arin", expires=E1 - 10),
        ],
        "bgpsec_keys": [
            {"asn": 64496, "ski": SKI_HEX, "pubkey": SPKI_B64, "ta": "arin", "expires": E1}
        ],
        "nonfunc_cas": [
            {
                "location": "rpki.example.net/repository/DEFAULT/x.cer",
                "ta": "ripe",
                "caRepository": "rsync://rpki.example.net/repository/0/",
                "rpkiManifest": "rsync://rpki.example.net/repository/0/1C80.mft",
                "ski": "1C808584929EC643220D69A77E5E050E1D09D969",
            }
        ],
        "aspas": [{"customer_asid": 64496, "expires": E2, "providers": [64498, 64497]}],
        "signedprefixlists": [
            {
                "customer_asid": 64496,
                "prefixes": ["192.0.2.0/24", "2001:db8::/32"],
                "ta": "ripe",
                "expires": E1,
            }
        ],
    }
    payload = parse_export(dumps(doc))
    assert payload.snapshot_at(0) == Snapshot.build(
        [vrp("192.0.2.0/24", 24, 64496), vrp("2001:db8::/32", 48, 64497)],
        [Aspa(64496, (64497, 64498))],
        [RouterKey(SKI, 64496, SPKI)],
    )
    assert payload.counts() == {"vrp_v4": 1, "vrp_v6": 1, "router_key": 1, "aspa": 1}
    assert payload.v4_expires == array("q", [E1])
    assert payload.v6_expires == array("q", [E2])
    assert payload.router_keys == ((RouterKey(SKI, 64496, SPKI), E1),)
    assert payload.aspas == ((Aspa(64496, (64497, 64498)), E2),)
    assert payload.generated == ts("2025-07-20T09:31:33Z")
    assert payload.earliest_expiry_after(0) == E1


def test_nonfunc_cas_with_ski_are_not_router_keys() -> None:
    """A ``ski`` key alone (non-functional CAs) is no router key, even when it carries an ASN."""
    doc = {
        "roas": [],
        "nonfunc_cas": [
            {"location": "a.cer", "ta": "ripe", "ski": SKI_HEX},
            {"location": "b.cer", "ta": "ripe", "ski": SKI_HEX, "asn": 64496},
        ],
    }
    payload = parse_export(dumps(doc))
    assert payload.router_keys == ()
    assert payload.snapshot_at(0).is_empty()


def test_rpki_client_per_afi_aspas_are_merged_per_customer() -> None:
    """2022–23 ``provider_authorizations``, merged per customer.

    AS0 ("no providers in this AFI") is dropped when the other AFI has providers.
    """
    doc = {
        "metadata": {"buildtime": "2023-05-04T14:52:07Z"},
        "roas": [roa("192.0.2.0/24", 24, 64496, expires=E1)],
        "bgpsec_keys": [],
        "provider_authorizations": {
            "ipv4": [
                {"customer_asid": 64496, "expires": E1, "providers": [64497]},
                {"customer_asid": 64499, "expires": E1, "providers": [0]},
                {"customer_asid": 64500, "expires": E1, "providers": [0]},
            ],
            "ipv6": [
                {"customer_asid": 64496, "expires": E1, "providers": [0]},
                {"customer_asid": 64499, "expires": E1, "providers": [0]},
                {"customer_asid": 64500, "expires": E1, "providers": [64511, 64510]},
            ],
        },
    }
    payload = parse_export(dumps(doc))
    assert payload.snapshot_at(0).aspas == (
        Aspa(64496, (64497,)),
        Aspa(64499, (0,)),
        Aspa(64500, (64510, 64511)),
    )
    assert payload.counts()["aspa"] == 3
    assert payload.snapshot_at(E1).aspas == ()


def test_routinator_json_shape() -> None:
    """Routinator ``json``: "AS…" strings, routerKeys with SKI/routerPublicKey, aspas customer."""
    doc = {
        "metadata": {"generated": 1767225600, "generatedTime": "2026-01-01T00:00:00Z"},
        "roas": [
            {"asn": "AS64496", "prefix": "192.0.2.0/24", "maxLength": 24, "ta": "ripe"},
            {"asn": "as64497", "prefix": "2001:db8::/32", "maxLength": 48, "ta": "arin"},
            {"asn": "AS0", "prefix": "2001:7fa:0:3::/64", "maxLength": 128, "ta": "apnic"},
        ],
        "routerKeys": [
            {"asn": "AS64496", "SKI": SKI_HEX, "routerPublicKey": SPKI_B64, "ta": "arin"},
            {
                "asn": "AS64497",
                "SKI": SKI_HEX.lower(),
                "routerPublicKey": base64.urlsafe_b64encode(URLSAFE_SPKI).decode().rstrip("="),
                "ta": "ripe",
            },
        ],
        "aspas": [{"customer": "AS64496", "providers": ["AS64498", "AS64497"], "ta": "ripe"}],
    }
    payload = parse_export(dumps(doc))
    assert payload.snapshot_at(0) == Snapshot.build(
        [
            vrp("192.0.2.0/24", 24, 64496),
            vrp("2001:db8::/32", 48, 64497),
            vrp("2001:7fa:0:3::/64", 128, 0),
        ],
        [Aspa(64496, (64497, 64498))],
        [RouterKey(SKI, 64496, SPKI), RouterKey(SKI, 64497, URLSAFE_SPKI)],
    )
    assert payload.generated == 1767225600
    # No expiry anywhere: the entries never expire.
    assert payload.earliest_expiry_after(0) is None
    assert payload.snapshot_at(NO_EXPIRY - 1) == payload.snapshot_at(0)


def _source(
    not_after: str | None, chain_not_after: str | None, stale: str | None
) -> dict[str, Any]:
    src: dict[str, Any] = {"type": "roa", "uri": "rsync://example.net/x.roa", "tal": "ripe"}
    if not_after is not None:
        src["validity"] = {"notBefore": "2025-01-01T00:00:00Z", "notAfter": not_after}
    if chain_not_after is not None:
        src["chainValidity"] = {"notBefore": "2025-01-01T00:00:00Z", "notAfter": chain_not_after}
    if stale is not None:
        src["stale"] = stale
    return src


def test_routinator_jsonext_expiry_is_max_over_sources_of_min_per_source() -> None:
    """Per source the first of notAfter, chain notAfter, stale; the entry lives while any does."""
    # Source A ends at its stale time (Jan 2), source B at its chain validity end (Apr 1):
    # the entry lives until Apr 1. Any other combination of min/max gives a different answer.
    two_sources = [
        _source("2026-07-01T00:00:00Z", "2026-03-01T00:00:00Z", "2026-01-02T00:00:00Z"),
        _source("2026-05-01T00:00:00Z", "2026-04-01T00:00:00Z", "2026-06-01T00:00:00Z"),
    ]
    exception = [{"type": "exception", "path": "/etc/slurm.json", "comment": "local"}]
    doc = {
        "metadata": {"generated": 1767225600, "generatedTime": "2026-01-01T00:00:00Z"},
        "roas": [
            {"asn": "AS64496", "prefix": "192.0.2.0/24", "maxLength": 24, "source": two_sources},
            {"asn": "AS64497", "prefix": "198.51.100.0/24", "maxLength": 24, "source": exception},
            {
                "asn": "AS64498",
                "prefix": "2001:db8::/32",
                "maxLength": 32,
                "source": [_source("2026-02-01T00:00:00Z", None, None)],
            },
        ],
        "routerKeys": [
            {
                "asn": "AS64496",
                "SKI": SKI_HEX,
                "routerPublicKey": SPKI_B64,
                "source": [
                    {**_source(None, "2026-03-05T00:00:00Z", "2026-03-04T00:00:00Z"), "type": "cer"}
                ],
            }
        ],
        "aspas": [
            {
                "customer": "AS64496",
                "providers": ["AS64497"],
                "source": [
                    {
                        **_source("2026-08-01T00:00:00Z", None, "2026-02-10T00:00:00Z"),
                        "type": "aspa",
                    }
                ],
            }
        ],
    }
    payload = parse_export(dumps(doc))
    apr1 = ts("2026-04-01T00:00:00Z")
    v4 = dict(zip(_keys(payload.v4, 10), payload.v4_expires, strict=True))
    assert v4 == {
        vrp("192.0.2.0/24", 24, 64496).key(): apr1,
        vrp("198.51.100.0/24", 24, 64497).key(): NO_EXPIRY,
    }
    assert payload.v6_expires == array("q", [ts("2026-02-01T00:00:00Z")])
    assert payload.router_keys == ((router_key(64496), ts("2026-03-04T00:00:00Z")),)
    assert payload.aspas == ((Aspa(64496, (64497,)), ts("2026-02-10T00:00:00Z")),)
    assert payload.earliest_expiry_after(0) == ts("2026-02-01T00:00:00Z")
    assert payload.earliest_expiry_after(ts("2026-03-04T00:00:00Z")) == apr1
    assert payload.earliest_expiry_after(apr1) is None

    before, after = payload.snapshot_at(apr1 - 1), payload.snapshot_at(apr1)
    assert vrp("192.0.2.0/24", 24, 64496) in set(before.vrps())
    assert set(after.vrps()) == {vrp("198.51.100.0/24", 24, 64497)}
    assert after.router_keys == ()
    assert after.aspas == ()


def _keys(packed: bytes, width: int) -> list[bytes]:
    return [packed[i : i + width] for i in range(0, len(packed), width)]


@pytest.mark.parametrize("asn", ["AS13335", 13335, "as13335", "13335"])
def test_stayrtr_gortr_roas_without_expiry(asn: int | str) -> None:
    """GoRTR / StayRTR: string or int ASN, no ``expires`` (never expire), maxLength optional."""
    doc = {
        "metadata": {
            "counts": 2,
            "generated": 1677469609,
            "valid": 1677473209,
            "signature": "3045022100",
            "signatureDate": "3045022100",
        },
        "roas": [
            {"prefix": "1.0.0.0/24", "maxLength": 24, "asn": asn},
            {"prefix": "2606:4700::/32", "asn": asn},
        ],
    }
    payload = parse_export(dumps(doc))
    assert payload.snapshot_at(0) == Snapshot.build(
        [vrp("1.0.0.0/24", 24, 13335), vrp("2606:4700::/32", 32, 13335)]
    )
    assert payload.earliest_expiry_after(0) is None
    assert payload.snapshot_at(1 << 62) == payload.snapshot_at(0)
    assert payload.generated == 1677469609


@pytest.mark.parametrize("asn", [64496, "AS64496"])
@pytest.mark.parametrize(("prefix", "length"), [("10.0.0.0/8", 8), ("2001:db8::/33", 33)])
def test_missing_max_length_is_the_prefix_length(asn: int | str, prefix: str, length: int) -> None:
    payload = parse_export(dumps({"roas": [{"prefix": prefix, "asn": asn, "expires": E1}]}))
    assert list(payload.snapshot_at(0).vrps()) == [vrp(prefix, length, 64496)]


def test_fort_and_validator3_roas() -> None:
    """FORT / RIPE validator-3 ``roas`` (string ASNs, no expiry) read the same way."""
    doc = {
        "roas": [
            {"asn": "AS0", "prefix": "2001:7fa:0:3::/64", "maxLength": 128, "ta": "APNIC RPKI Root"}
        ]
    }
    assert list(parse_export(dumps(doc)).snapshot_at(0).vrps()) == [
        vrp("2001:7fa:0:3::/64", 128, 0)
    ]


def test_text_input_and_utf8_bom_are_accepted() -> None:
    doc = {"roas": [roa("192.0.2.0/24", 24, 64496)]}
    expected = Snapshot.build([vrp("192.0.2.0/24", 24, 64496)])
    assert parse_export(json.dumps(doc)).snapshot_at(0) == expected
    assert parse_export(b"\xef\xbb\xbf" + dumps(doc)).snapshot_at(0) == expected


def test_empty_roas_is_an_empty_payload() -> None:
    payload = parse_export(b'{"roas": []}')
    assert payload == SourcePayload()
    assert payload.snapshot_at(0).is_empty()
    assert payload.generated is None


@pytest.mark.parametrize(
    "body",
    [
        b"{}",
        b'{"error": "upstream timed out"}',
        b'{"metadata": {}, "aspas": []}',
        b'{"roas": null}',
    ],
)
def test_a_document_without_roas_is_not_an_export(body: bytes) -> None:
    """A 200 with ``{}`` or a proxy's error object must never withdraw every VRP (issue 12, 16)."""
    with pytest.raises(FormatError, match="no 'roas' section"):
        parse_export(body)


def test_generated_time_is_read_and_checked_against_the_wall_clock() -> None:
    doc = b'{"metadata": {"generatedTime": "2026-01-01T00:00:00Z"}, "roas": []}'
    generated = parse_export(doc).generated
    assert generated == 1_767_225_600
    assert check_generated(generated, wall=1_767_225_600 - 300, tolerance=300) is None
    reason = check_generated(generated, wall=1_767_225_600 - 301, tolerance=300)
    assert reason is not None
    assert "301 s after the wall clock" in reason
    assert check_generated(None, wall=0, tolerance=1) is None


def test_parse_entries_matches_parse_export() -> None:
    entries = [roa("192.0.2.0/24", 24, "AS64496"), roa("2001:db8::/32", None, 64497, expires=E1)]
    assert parse_entries(entries) == parse_export(dumps({"roas": entries}))


# ---------------------------------------------------------------- rejections

GOOD = [roa("198.51.100.0/24", 24, 64496, expires=E1), roa("2001:db8::/32", 32, 64497)]


def _roas_with(bad: object) -> dict[str, Any]:
    """Two valid entries, then ``bad`` at index 2."""
    return {"metadata": {"buildtime": "2025-07-20T09:31:33Z"}, "roas": [*GOOD, bad]}


def _keys_with(bad: dict[str, Any]) -> dict[str, Any]:
    good = {"asn": 64496, "ski": SKI_HEX, "pubkey": SPKI_B64, "expires": E1}
    return {"roas": GOOD, "bgpsec_keys": [good, bad]}


def _aspas_with(bad: dict[str, Any]) -> dict[str, Any]:
    good = {"customer_asid": 64496, "providers": [64497], "expires": E1}
    return {"roas": GOOD, "aspas": [good, bad]}


def _key(**fields: Any) -> dict[str, Any]:
    return {"asn": 64496, "ski": SKI_HEX, "pubkey": SPKI_B64, "expires": E1, **fields}


REJECTED: list[tuple[str, dict[str, Any], list[str]]] = [
    ("v4 host bits", _roas_with(roa("10.0.0.1/8", 8, 1)), ["roas[2]", "prefix", "10.0.0.1/8"]),
    (
        "v6 host bits",
        _roas_with(roa("2001:db8::1/32", 32, 1)),
        ["roas[2]", "prefix", "2001:db8::1/32"],
    ),
    (
        "v4 host bits, string ASN",
        _roas_with(roa("10.0.0.1/8", 8, "AS1")),
        ["roas[2]", "prefix", "10.0.0.1/8"],
    ),
    ("maxLength < length", _roas_with(roa("10.0.0.0/16", 12, 1)), ["roas[2]", "ength=12"]),
    ("maxLength > 32", _roas_with(roa("10.0.0.0/16", 33, 1)), ["roas[2]", "ength=33"]),
    ("maxLength > 128", _roas_with(roa("2001:db8::/32", 129, 1)), ["roas[2]", "ength=129"]),
    ("maxLength text", _roas_with(roa("10.0.0.0/16", "24", 1)), ["roas[2]", "maxLength='24'"]),
    ("maxLength float", _roas_with(roa("10.0.0.0/16", 24.0, 1)), ["roas[2]", "maxLength=24.0"]),
    ("ASN too big", _roas_with(roa("10.0.0.0/8", 8, 1 << 32)), ["roas[2]", "asn=4294967296"]),
    (
        "ASN too big text",
        _roas_with(roa("10.0.0.0/8", 8, "AS4294967296")),
        ["roas[2]", "asn=4294967296"],
    ),
    ("ASN negative", _roas_with(roa("10.0.0.0/8", 8, -1)), ["roas[2]", "asn=-1"]),
    ("ASN ASx", _roas_with(roa("10.0.0.0/8", 8, "ASx")), ["roas[2]", "asn='ASx'"]),
    ("ASN bool", _roas_with(roa("10.0.0.0/8", 8, True)), ["roas[2]", "asn=True"]),
    ("ASN float", _roas_with(roa("10.0.0.0/8", 8, 1.0)), ["roas[2]", "asn=1.0"]),
    ("no slash", _roas_with(roa("10.0.0.0", 8, 1)), ["roas[2]", "prefix='10.0.0.0'"]),
    ("bad prefix text", _roas_with(roa("10.0.0.0-8", 8, 1)), ["roas[2]", "prefix='10.0.0.0-8'"]),
    ("bad length", _roas_with(roa("10.0.0.0/x", 8, 1)), ["roas[2]", "prefix='10.0.0.0/x'"]),
    ("v4 length > 32", _roas_with(roa("10.0.0.0/33", 33, 1)), ["roas[2]", "33"]),
    ("bad IPv4", _roas_with(roa("10.0.0.256/24", 24, 1)), ["roas[2]", "prefix='10.0.0.256/24'"]),
    ("bad IPv6", _roas_with(roa("2001:db8:::/32", 32, 1)), ["roas[2]", "prefix='2001:db8:::/32'"]),
    ("prefix not text", _roas_with({"prefix": 167772160, "asn": 1}), ["roas[2]", "167772160"]),
    ("missing prefix", _roas_with({"asn": 1, "maxLength": 8}), ["roas[2]", "missing", "prefix"]),
    ("missing asn", _roas_with({"prefix": "10.0.0.0/8"}), ["roas[2]", "missing", "asn"]),
    ("entry not an object", _roas_with("10.0.0.0/8"), ["roas[2]", "10.0.0.0/8"]),
    ("expires float", _roas_with(roa("10.0.0.0/8", 8, 1, expires=1.5)), ["roas[2]", "1.5"]),
    (
        "expires text",
        _roas_with(roa("10.0.0.0/8", 8, 1, expires="soon")),
        ["roas[2]", "expires='soon'"],
    ),
    (
        "ASPA customer 0",
        _aspas_with({"customer_asid": 0, "providers": [64497], "expires": E1}),
        ["aspas[1]", "customer", "=0"],
    ),
    (
        "ASPA empty providers",
        _aspas_with({"customer_asid": 64499, "providers": [], "expires": E1}),
        ["aspas[1]", "providers=[]"],
    ),
    (
        "ASPA provider out of range",
        _aspas_with({"customer_asid": 64499, "providers": [1 << 32], "expires": E1}),
        ["aspas[1]", "providers=4294967296"],
    ),
    (
        "ASPA providers not a list",
        _aspas_with({"customer_asid": 64499, "providers": "AS1", "expires": E1}),
        ["aspas[1]", "providers='AS1'"],
    ),
    (
        "ASPA customer text",
        _aspas_with({"customer": "ASx", "providers": ["AS1"]}),
        ["aspas[1]", "customer='ASx'"],
    ),
    ("SKI not hex", _keys_with(_key(ski="ZZ" * 20)), ["bgpsec_keys[1]", "ski='" + "ZZ" * 20]),
    ("SKI not text", _keys_with(_key(ski=12)), ["bgpsec_keys[1]", "ski=12"]),
    ("pubkey bad base64", _keys_with(_key(pubkey="!!!!")), ["bgpsec_keys[1]", "pubkey='!!!!'"]),
    ("pubkey 5 chars", _keys_with(_key(pubkey="MFkwE")), ["bgpsec_keys[1]", "pubkey='MFkwE'"]),
    ("pubkey empty", _keys_with(_key(pubkey="")), ["bgpsec_keys[1]", "spki"]),
    ("key ASN", _keys_with(_key(asn="AS-1")), ["bgpsec_keys[1]", "asn='AS-1'"]),
]


@pytest.mark.parametrize(
    ("doc", "needles"),
    [(doc, needles) for _, doc, needles in REJECTED],
    ids=[r[0] for r in REJECTED],
)
def test_invalid_entry_rejects_whole_export(doc: dict[str, Any], needles: list[str]) -> None:
    """One bad entry rejects everything; the message names section[index], field and value."""
    with pytest.raises(FormatError) as info:
        parse_export(dumps(doc))
    message = str(info.value)
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"[1, 2]", "top level"),
        (b'"roas"', "top level"),
        (b"null", "top level"),
        (b"{", "JSON"),
        (b'{"roas": [}', "JSON"),
        (b"", "JSON"),
        (b'{"roas": {}}', "'roas' must be a list"),
        (b'{"roas": "10.0.0.0/8"}', "'roas' must be a list"),
        (b'{"roas": [], "aspas": {"64496": [64497]}}', "'aspas' must be a list"),
        (b'{"roas": [], "bgpsec_keys": 1}', "'bgpsec_keys' must be a list"),
        (b'{"roas": [], "provider_authorizations": []}', "'provider_authorizations' must be"),
        (b'{"roas": [], "provider_authorizations": {"ipv4": {}}}', "provider_authorizations.ipv4"),
        (b'{"aspas": []}', "no 'roas' section"),
        (b'{"roas": []}\xff', "UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "JSON"),
    ],
)
def test_malformed_documents(data: bytes, needle: str) -> None:
    with pytest.raises(FormatError) as info:
        parse_export(data)
    assert needle in str(info.value)


def test_error_after_a_vrp_shaped_object_outside_roas_names_the_right_index() -> None:
    """BUG: the index comes from a counter of every VRP-shaped object in the whole document.

    A VRP-shaped object in an unrelated key before ``roas`` shifts it, so the bad entry (the
    second of ``roas``) is reported as ``roas[2]``.
    """
    doc = {
        "extra": [{"prefix": "203.0.113.0/24", "asn": 64496}],
        "roas": [roa("192.0.2.0/24", 24, 64496, expires=E1), roa("10.0.0.1/8", 8, 1, expires=E1)],
    }
    with pytest.raises(FormatError) as info:
        parse_export(dumps(doc))
    assert "roas[1]" in str(info.value)
    assert "roas[2]" not in str(info.value)


def test_invalid_payload_shaped_object_under_unknown_key_is_ignored() -> None:
    """BUG: unknown keys are documented as ignored, but the decode hook validates (and rejects)
    VRP-, ASPA- and key-shaped objects wherever they are, so one odd object under an unrelated key
    throws away the whole export (and is blamed on ``roas[1]``, which does not exist)."""
    doc = {
        "roas": [roa("192.0.2.0/24", 24, 64496, expires=E1)],
        "extra": [
            {"prefix": "not a prefix", "asn": 1},
            {"customer": 0, "providers": []},
            {"ski": "00", "pubkey": "!"},
        ],
    }
    payload = parse_export(dumps(doc))
    assert payload.snapshot_at(0) == Snapshot.build([vrp("192.0.2.0/24", 24, 64496)])


def test_ski_of_wrong_length_is_reported_as_written() -> None:
    """BUG: a 19-octet SKI is reported as ``ski=b'\\xab\\xab…'``, not the hex text of the file."""
    short = "AB" * 19
    with pytest.raises(FormatError) as info:
        parse_export(dumps(_keys_with(_key(ski=short))))
    message = str(info.value)
    assert "bgpsec_keys[1]" in message
    assert short in message


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        pytest.param(
            {
                "roas": [],
                "routerKeys": [
                    {"asn": "AS64496", "SKI": SKI_HEX, "routerPublicKey": SPKI_B64},
                    {"asn": "AS64496", "SKI": "XY", "routerPublicKey": SPKI_B64},
                ],
            },
            "routerKeys[1]",
            id="routinator-routerKeys",
        ),
        pytest.param(
            {
                "roas": [],
                "provider_authorizations": {
                    "ipv4": [{"customer_asid": 64496, "providers": [64497]}],
                    "ipv6": [{"customer_asid": 0, "providers": [64497]}],
                },
            },
            "ipv6[0]",
            id="per-afi-ipv6",
        ),
    ],
)
def test_error_names_the_section_as_written_in_the_document(
    doc: dict[str, Any], needle: str
) -> None:
    """BUG: errors are labelled with rpki-client's current section names whatever the document
    says: a Routinator ``routerKeys`` entry is called ``bgpsec_keys[1]``, and the first
    ``provider_authorizations.ipv6`` entry is called ``aspas[1]``; neither exists in the file."""
    with pytest.raises(FormatError) as info:
        parse_export(dumps(doc))
    assert needle in str(info.value)


# ---------------------------------------------------------------- dedup and expiry


@pytest.mark.parametrize("asn", [64496, "AS64496"])
def test_duplicates_are_served_once_with_the_latest_expiry(asn: int | str) -> None:
    doc = {
        "roas": [
            roa("192.0.2.0/24", 24, asn, ta="ripe", expires=100),
            roa("192.0.2.0/24", 24, asn, ta="arin", expires=300),
            roa("192.0.2.0/24", 24, 64496, ta="apnic", expires=200),
            roa("2001:db8::/32", 48, asn, ta="ripe", expires=50),
            roa("2001:db8::/32", 48, asn, ta="lacnic"),  # no expiry: lives forever
            roa("2001:db8::/32", 48, asn, ta="afrinic", expires=70),
        ],
        "bgpsec_keys": [
            {"asn": 64496, "ski": SKI_HEX, "pubkey": SPKI_B64, "expires": 400},
            {"asn": 64496, "ski": SKI_HEX.lower(), "pubkey": SPKI_B64, "expires": 500},
            {"asn": 64496, "ski": SKI_HEX, "pubkey": SPKI_B64, "expires": 450},
        ],
        "aspas": [
            {"customer_asid": 64500, "providers": [2, 1], "expires": 100},
            {"customer_asid": 64500, "providers": [3, 1], "expires": 300},
        ],
    }
    payload = parse_export(dumps(doc))
    assert payload.counts() == {"vrp_v4": 1, "vrp_v6": 1, "router_key": 1, "aspa": 1}
    assert payload.v4_expires == array("q", [300])
    assert payload.v6_expires == array("q", [NO_EXPIRY])
    assert payload.router_keys == ((router_key(), 500),)
    assert payload.snapshot_at(0) == Snapshot.build(
        [vrp("192.0.2.0/24", 24, 64496), vrp("2001:db8::/32", 48, 64496)],
        [Aspa(64500, (1, 2, 3))],
        [router_key()],
    )
    # At 299 the VRP still lives through its ARIN copy; at 300 it is gone.
    assert payload.snapshot_at(299).v4_count == 1
    assert payload.snapshot_at(300).v4_count == 0
    assert payload.snapshot_at(10**12).v6_count == 1
    # ASPAs of one customer: each record lives on its own, the union is served.
    assert payload.snapshot_at(150).aspas == (Aspa(64500, (1, 3)),)
    assert payload.snapshot_at(499).router_keys == (router_key(),)
    assert payload.snapshot_at(500).router_keys == ()


def test_expired_entries_are_not_in_the_snapshot() -> None:
    """An entry is valid while ``now < expires``: at ``expires`` it is gone."""
    doc = {
        "roas": [
            roa("192.0.2.0/24", 24, 64496, expires=100),
            roa("198.51.100.0/24", 24, 64496, expires=200),
            roa("2001:db8::/32", 32, 64496, expires=100),
            roa("2001:db8:1::/48", 48, 64496, expires=300),
        ],
        "bgpsec_keys": [{"asn": 64496, "ski": SKI_HEX, "pubkey": SPKI_B64, "expires": 100}],
        "aspas": [{"customer_asid": 64496, "providers": [64497], "expires": 100}],
    }
    payload = parse_export(dumps(doc))
    full = payload.snapshot_at(99)
    assert full.counts() == {"vrp_v4": 2, "vrp_v6": 2, "router_key": 1, "aspa": 1}
    at_100 = payload.snapshot_at(100)
    assert at_100 == Snapshot.build(
        [vrp("198.51.100.0/24", 24, 64496), vrp("2001:db8:1::/48", 48, 64496)]
    )
    assert payload.snapshot_at(200) == Snapshot.build([vrp("2001:db8:1::/48", 48, 64496)])
    assert payload.snapshot_at(300).is_empty()
    # Counts include expired entries.
    assert payload.counts()["vrp_v4"] == 2


def test_earliest_expiry_after() -> None:
    doc = {
        "roas": [
            roa("192.0.2.0/24", 24, 64496, expires=300),
            roa("198.51.100.0/24", 24, 64496),
            roa("2001:db8::/32", 32, 64496, expires=200),
        ],
        "bgpsec_keys": [{"asn": 64496, "ski": SKI_HEX, "pubkey": SPKI_B64, "expires": 250}],
        "aspas": [{"customer_asid": 64496, "providers": [64497], "expires": 100}],
    }
    payload = parse_export(dumps(doc))
    assert payload.earliest_expiry_after(0) == 100
    assert payload.earliest_expiry_after(99) == 100
    assert payload.earliest_expiry_after(100) == 200
    assert payload.earliest_expiry_after(200) == 250
    assert payload.earliest_expiry_after(250) == 300
    assert payload.earliest_expiry_after(300) is None
    assert SourcePayload().earliest_expiry_after(0) is None


def test_iso_dates_are_accepted_for_expires() -> None:
    doc = {"roas": [roa("192.0.2.0/24", 24, 64496, expires="2026-01-01T00:00:00Z")]}
    assert parse_export(dumps(doc)).v4_expires == array("q", [ts("2026-01-01T00:00:00Z")])


def test_generated_from_metadata() -> None:
    doc = b'{"metadata": {"generated": 5, "buildtime": "x"}, "roas": []}'
    assert parse_export(doc).generated == 5
    buildtime = b'{"metadata": {"buildtime": "2023-10-01T00:05:43Z"}, "roas": []}'
    assert parse_export(buildtime).generated == ts("2023-10-01T00:05:43Z")
    assert parse_export(b'{"metadata": {"generated": "garbage"}, "roas": []}').generated is None
    assert parse_export(b'{"metadata": [], "roas": []}').generated is None


def test_aspa_provider_limit() -> None:
    doc = {"roas": [], "aspas": [{"customer_asid": 64496, "providers": list(range(1, 12))}]}
    assert parse_export(dumps(doc), max_aspa_providers=11).counts()["aspa"] == 1
    with pytest.raises(FormatError, match=r"aspas\[0\].*more than 10"):
        parse_export(dumps(doc), max_aspa_providers=10)


# ---------------------------------------------------------------- decompression

SMALL_DOC = {
    "roas": [roa(f"10.{i}.0.0/16", 24, 64496 + i, expires=E1) for i in range(40)],
    "aspas": [{"customer_asid": 64496, "providers": [64497], "expires": E1}],
}
COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "json": bytes,
    "json.gz": gzip.compress,
    "json.bz2": bz2.compress,
    "json.xz": lzma.compress,
}


@pytest.mark.parametrize("suffix", sorted(COMPRESSORS))
def test_decompress_by_magic_number(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"export.{suffix}"
    path.write_bytes(COMPRESSORS[suffix](dumps(SMALL_DOC)))
    raw = path.read_bytes()
    assert (raw == dumps(SMALL_DOC)) == (suffix == "json")
    assert decompress(raw) == dumps(SMALL_DOC)
    expected = parse_export(dumps(SMALL_DOC))
    assert parse_export(decompress(raw)) == expected
    assert load_file(path) == expected
    assert expected.counts()["vrp_v4"] == 40


def test_decompress_leaves_other_data_alone() -> None:
    assert decompress(b"") == b""
    assert decompress(b"\x1f") == b"\x1f"
    assert decompress(b"BZ") == b"BZ"


@pytest.mark.parametrize(
    ("compress", "how"),
    [
        (gzip.compress, "truncated"),
        (bz2.compress, "truncated"),
        (lzma.compress, "truncated"),
        (bz2.compress, "damaged"),
        (lzma.compress, "damaged"),
        (gzip.compress, "damaged"),
    ],
    ids=[
        "gz-truncated",
        "bz2-truncated",
        "xz-truncated",
        "bz2-damaged",
        "xz-damaged",
        "gz-damaged",
    ],
)
def test_corrupt_compressed_data_is_a_format_error(
    compress: Callable[[bytes], bytes], how: str
) -> None:
    """Any corrupt compressed input is a `FormatError`.

    BUG (gz-damaged): a damaged deflate stream raises ``zlib.error``, which `decompress` does not
    catch; it escapes `FileSource.check` too (see test_file_source).
    """
    packed = compress(dumps(SMALL_DOC))
    if how == "truncated":
        bad = packed[: len(packed) // 2]
    else:
        bad = packed[:20] + bytes(b ^ 0xFF for b in packed[20:60]) + packed[60:]
    with pytest.raises(FormatError, match="corrupt"):
        decompress(bad)
