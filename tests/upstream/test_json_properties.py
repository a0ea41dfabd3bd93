"""Property tests: generated exports parse to what `Snapshot.build` makes of the same records.

The typed read (msgspec), the hooked read (decode hook) and the slow path (plain decode, then
walk the sections) must agree; the slow path is forced by a VRP-shaped object under an unrelated
top-level key with the typed read off. A bad entry is refused with the general read's message.
"""

from __future__ import annotations

import base64
import bz2
import ipaddress
import json
from dataclasses import dataclass
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapshot.model import Aspa, RouterKey, Vrp
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE, split_keys
from snapshot.snapshot import Snapshot
from tests.upstream.helpers import DATA
from upstream import json_format
from upstream.format_error import FormatError
from upstream.json_format import parse_export
from upstream.json_typed import decode_typed
from upstream.payload import NO_EXPIRY, SourcePayload

SETTINGS = settings(max_examples=80, deadline=None)
ASN_MAX = 2**32 - 1

V4_POOL = [0, 0x0A00_0000, 0xC000_0200, 0xFFFF_FFFF]
V6_POOL = [0, 0x2001_0DB8 << 96, (1 << 128) - 1]


@dataclass(frozen=True)
class Record:
    """One generated ``roas`` entry: the value and how it is written."""

    vrp: Vrp
    expires: int | None
    entry: dict[str, Any]


@st.composite
def vrps(draw: st.DrawFn) -> Vrp:
    v6 = draw(st.booleans())
    bits = 128 if v6 else 32
    length = draw(st.integers(0, bits))
    address = draw(st.sampled_from(V6_POOL if v6 else V4_POOL) | st.integers(0, (1 << bits) - 1))
    address &= ~((1 << (bits - length)) - 1) & ((1 << bits) - 1)
    max_length = draw(st.integers(length, bits))
    asn = draw(st.sampled_from([0, 1, 64496, ASN_MAX]) | st.integers(0, ASN_MAX))
    network: ipaddress.IPv4Network | ipaddress.IPv6Network
    if v6:
        network = ipaddress.IPv6Network((address, length))
    else:
        network = ipaddress.IPv4Network((address, length))
    return Vrp(network, max_length, asn)


def asn_texts(asn: int) -> st.SearchStrategy[int | str]:
    return st.sampled_from([asn, f"AS{asn}", f"as{asn}", str(asn)])


@st.composite
def entries_for(draw: st.DrawFn, vrp: Vrp) -> Record:
    prefix = vrp.prefix
    exploded = f"{prefix.network_address.exploded}/{prefix.prefixlen}"
    text = draw(st.sampled_from([str(prefix), exploded]))
    entry: dict[str, Any] = {"asn": draw(asn_texts(vrp.asn)), "prefix": text}
    if vrp.max_length != prefix.prefixlen or draw(st.booleans()):
        entry["maxLength"] = vrp.max_length
    expires = draw(st.none() | st.integers(1, 2000) | st.integers(1, 2**40))
    if expires is not None:
        entry["expires"] = expires
    if draw(st.booleans()):
        entry["ta"] = draw(st.sampled_from(["ripe", "arin", "apnic"]))
    return Record(vrp, expires, entry)


@st.composite
def records(draw: st.DrawFn) -> list[Record]:
    """Entries drawn from a few distinct VRPs, so that duplicates are frequent."""
    base = draw(st.lists(vrps(), min_size=1, max_size=8))
    picks = draw(st.lists(st.sampled_from(base), max_size=25))
    return [draw(entries_for(v)) for v in picks]


def expiry_model(recs: list[Record]) -> dict[bytes, int]:
    """Packed key -> latest expiry over its duplicates (no expiry = never)."""
    model: dict[bytes, int] = {}
    for r in recs:
        key = r.vrp.key()
        model[key] = max(model.get(key, -1), NO_EXPIRY if r.expires is None else r.expires)
    return model


def expiry_map(payload: SourcePayload) -> dict[bytes, int]:
    keys = split_keys(payload.v4, V4_KEY_SIZE) + split_keys(payload.v6, V6_KEY_SIZE)
    expires = list(payload.v4_expires) + list(payload.v6_expires)
    assert len(keys) == len(expires)
    out = dict(zip(keys, expires, strict=True))
    assert len(out) == len(keys), "duplicate keys in a payload"
    return out


@SETTINGS
@given(records(), st.integers(0, 2**41))
def test_generated_roas_parse_like_snapshot_build(recs: list[Record], now: int) -> None:
    doc = {"metadata": {"buildmachine": "hypothesis"}, "roas": [r.entry for r in recs]}
    payload = parse_export(json.dumps(doc).encode())
    assert payload.snapshot_at(0) == Snapshot.build(r.vrp for r in recs)
    model = expiry_model(recs)
    assert expiry_map(payload) == model
    # Packed strings are sorted descending, like a snapshot's.
    assert payload.v4 == Snapshot.build(r.vrp for r in recs if r.vrp.is_ipv4).v4
    alive = [Vrp.from_key(k) for k, e in model.items() if now < e]
    assert payload.snapshot_at(now) == Snapshot.build(alive)
    later = [e for e in model.values() if e > now and e != NO_EXPIRY]
    assert payload.earliest_expiry_after(now) == (min(later) if later else None)


SKIS = [bytes(20), bytes.fromhex("510F485D29A29DB7B515F9C478F8ED3CB7AA7D23"), b"\xff" * 20]
SPKIS = [b"\x30\x59\x30\x13", b"\xfb\xff\xbf", bytes(range(91))]


@st.composite
def router_key_entries(draw: st.DrawFn) -> tuple[RouterKey, dict[str, Any]]:
    key = RouterKey(
        draw(st.sampled_from(SKIS)),
        draw(st.sampled_from([1, 64496, ASN_MAX])),
        draw(st.sampled_from(SPKIS)),
    )
    ski = key.ski.hex()
    entry: dict[str, Any]
    if draw(st.booleans()):  # rpki-client
        entry = {"asn": key.asn, "ski": ski.upper(), "pubkey": base64.b64encode(key.spki).decode()}
    else:  # Routinator
        entry = {
            "asn": f"AS{key.asn}",
            "SKI": ski,
            "routerPublicKey": base64.urlsafe_b64encode(key.spki).decode().rstrip("="),
        }
    if draw(st.booleans()):
        entry["expires"] = draw(st.integers(1, 2**40))
    return key, entry


@st.composite
def aspa_entries(draw: st.DrawFn) -> tuple[Aspa, dict[str, Any]]:
    customer = draw(st.sampled_from([1, 64496, ASN_MAX]))
    providers = draw(st.lists(st.sampled_from([0, 1, 2, 64497, ASN_MAX]), min_size=1, max_size=5))
    entry: dict[str, Any]
    if draw(st.booleans()):
        entry = {"customer_asid": customer, "providers": providers}
    else:
        entry = {"customer": f"AS{customer}", "providers": [f"AS{p}" for p in providers]}
    if draw(st.booleans()):
        entry["expires"] = draw(st.integers(1, 2**40))
    return Aspa(customer, tuple(providers)), entry


@SETTINGS
@given(
    records(),
    st.lists(router_key_entries(), max_size=4),
    st.lists(aspa_entries(), max_size=4),
    st.booleans(),
)
def test_slow_path_agrees_with_fast_path(
    recs: list[Record],
    keys: list[tuple[RouterKey, dict[str, Any]]],
    aspas: list[tuple[Aspa, dict[str, Any]]],
    per_afi: bool,
) -> None:
    doc: dict[str, Any] = {"metadata": {"generated": 1_700_000_000}}
    doc["roas"] = [r.entry for r in recs]
    doc["bgpsec_keys" if keys and "ski" in keys[0][1] else "routerKeys"] = [e for _, e in keys]
    if per_afi:
        half = len(aspas) // 2
        doc["provider_authorizations"] = {
            "ipv4": [e for _, e in aspas[:half]],
            "ipv6": [e for _, e in aspas[half:]],
        }
    else:
        doc["aspas"] = [e for _, e in aspas]
    slow_doc = {**doc, "extra": [{"prefix": "192.0.2.0/24", "asn": 64496}]}

    with (
        mock.patch.object(json_format, "_slow_path", wraps=json_format._slow_path) as spy,
        mock.patch("upstream.json_typed.decode_typed", wraps=decode_typed) as typed,
    ):
        fast = parse_export(json.dumps(doc))
        assert spy.call_count == 0, "a well-formed document took the slow path"
        # The typed read skips a stray payload-shaped object outside the sections (or, for
        # entries it does not take, the hooked read sends the document the slow way).
        assert parse_export(json.dumps(slow_doc)) == fast
        spy.reset_mock()
        typed.side_effect = lambda data: None  # the hooked read alone
        hooked = parse_export(json.dumps(doc))
        assert spy.call_count == 0, "a well-formed document took the slow path"
        slow = parse_export(json.dumps(slow_doc))
        assert spy.call_count == 1, "the slow path was not taken"

    assert slow == fast
    assert hooked == fast
    assert fast.generated == 1_700_000_000
    assert fast.snapshot_at(0) == Snapshot.build(
        (r.vrp for r in recs), (a for a, _ in aspas), (k for k, _ in keys)
    )


#: Entries of the typed shape (str prefix, int asn and expires) that the parse must refuse.
BAD_TYPED = [
    {"prefix": "192.0.2.1/24", "asn": 64496, "expires": 1},  # host bits set
    {"prefix": "192.0.2.0/24", "asn": 64496, "expires": 1, "maxLength": 23},  # below length
    {"prefix": "192.0.2.0/24", "asn": 64496, "expires": 1, "maxLength": 33},  # above 32
    {"prefix": "192.0.2.0/33", "asn": 64496, "expires": 1},
    {"prefix": "192.0.2.0", "asn": 64496, "expires": 1},
    {"prefix": "192.0.2.300/24", "asn": 64496, "expires": 1},
    {"prefix": "2001:db8::/129", "asn": 64496, "expires": 1},
    {"prefix": "192.0.2.0/24", "asn": 2**32, "expires": 1},
    {"prefix": "192.0.2.0/24", "asn": -1, "expires": 1},
    {"prefix": "192.0.2.0/24", "asn": 64496, "expires": 1, "maxLength": -1},
]


@SETTINGS
@given(records(), st.sampled_from(BAD_TYPED), st.integers(0, 20))
def test_a_bad_entry_is_refused_with_the_message_of_the_general_read(
    recs: list[Record], bad: dict[str, Any], at: int
) -> None:
    """The typed read takes no entry the general read refuses, and the error is the same."""
    roas = [r.entry for r in recs]
    roas.insert(min(at, len(roas)), bad)
    text = json.dumps({"roas": roas})
    try:
        parse_export(text)
    except FormatError as exc:
        typed_error = str(exc)
    else:
        raise AssertionError(f"{bad} was accepted")
    with (
        mock.patch("upstream.json_typed.decode_typed", return_value=None),
        pytest.raises(FormatError) as general,
    ):
        parse_export(text)
    assert str(general.value) == typed_error
    assert f"roas[{min(at, len(roas) - 1)}]" in typed_error


def test_the_real_table_takes_the_typed_read() -> None:
    """rpki-client's export is of the typed shape: read in pieces, no fall-back, same payload."""
    real = DATA / "rpkilog" / "rpkiclient_summary_20250720T093135Z.json.bz2"
    data = bz2.decompress(real.read_bytes())
    with (
        mock.patch.object(json_format, "_hooked", wraps=json_format._hooked) as hooked,
        mock.patch("upstream.json_typed.decode_typed", wraps=decode_typed) as whole,
    ):
        typed = parse_export(data)
    assert whole.call_count == 0  # no whole-document read: pieces only
    assert hooked.call_count == 2  # the small rest only: its metadata, its other sections
    assert all(len(call.args[0]) < 100_000 for call in hooked.call_args_list)
    with mock.patch.object(json_format, "_from_pieces", return_value=None):
        assert parse_export(data) == typed  # the whole-document typed read
    with (
        mock.patch.object(json_format, "_from_pieces", return_value=None),
        mock.patch("upstream.json_typed.decode_typed", return_value=None),
    ):
        assert parse_export(data) == typed
    counts = typed.counts()
    assert counts["vrp_v4"] + counts["vrp_v6"] > 700_000
