"""The piece read (`upstream.piece_reader`) against the whole-document read it stands in for.

Exports given as bytes are read in pieces, with tiny pieces here so that every document is cut
many times; the same text given as ``str`` takes the whole-document reads (typed, hooked, slow).
Both must give the same payload or the same error, also when the next export is read with the
memo of the previous one, and also for documents built to mislead the cutting (a ``roas`` key in
the metadata, a second ``roas``, strings holding entry boundaries, trailing bytes).
"""

from __future__ import annotations

import json
import random
from array import array
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapshot.packed import V4_KEY_SIZE, split_keys
from tests.upstream.test_json_properties import BAD_TYPED, Record, records
from upstream import json_format, piece_reader
from upstream.format_error import FormatError
from upstream.json_format import parse_export
from upstream.piece_reader import read_pieces
from upstream.pieces import FamilyPart, PieceMemo, assemble, family_part

SETTINGS = settings(max_examples=80, deadline=None)


@pytest.fixture(autouse=True)
def tiny_pieces() -> Iterator[None]:
    """Pieces of about 100 octets: every document is cut into many."""
    with mock.patch.object(piece_reader, "PIECE_SIZE", 100):
        yield


def layout(roas: list[dict[str, Any]], style: int, **other: Any) -> str:
    """An export with ``roas`` written one per line (rpki-client), compact, or spaced."""
    head = '{\n"metadata": {"buildtime": "2025-07-20T09:31:33Z", "roas": 3}'
    if style == 0:
        body = ",\n".join(json.dumps(e, separators=(",", ":")) for e in roas)
        text = head + ',\n"roas": [\n' + body + "\n]"
    elif style == 1:
        text = head + ',"roas":' + json.dumps(roas, separators=(",", ":"))
    else:
        text = head + ',\r\n "roas" :\t[ ' + " ,\n\t".join(json.dumps(e) for e in roas) + " ] "
    for key, value in other.items():
        text += f',\n"{key}": {json.dumps(value)}'
    return text + "\n}\n"


def outcome(data: bytes | str, memo: PieceMemo | None = None) -> object:
    """The payload, or the error message."""
    try:
        return parse_export(data, memo=memo)
    except FormatError as exc:
        return f"FormatError: {exc}"


def whole(data: bytes) -> object:
    """The payload (or error message) of the whole-document read of the same bytes."""
    with mock.patch.object(json_format, "_from_pieces", return_value=None):
        return outcome(data)


def typed_entries(recs: list[Record]) -> list[dict[str, Any]]:
    """The entries with integer ASNs and expiries: the shape the pieces are read in."""
    out = []
    for r in recs:
        entry = dict(r.entry, asn=r.vrp.asn)
        entry.setdefault("expires", 1_700_000_000)
        out.append(entry)
    return out


@SETTINGS
@given(records(), st.integers(0, 2))
def test_pieces_read_like_the_whole_document(recs: list[Record], style: int) -> None:
    text = layout(typed_entries(recs), style)
    data = text.encode()
    with mock.patch.object(json_format, "_whole", wraps=json_format._whole) as other:
        pieced = outcome(data)
    if not isinstance(pieced, str):
        assert other.call_count == 0, "a valid export of the typed shape was not read in pieces"
    assert pieced == outcome(text)
    assert pieced == whole(data)


@SETTINGS
@given(records(), st.integers(0, 2))
def test_any_entry_shape_reads_like_the_whole_document(recs: list[Record], style: int) -> None:
    """String ASNs, absent expiries: not read in pieces, and still the same payload."""
    text = layout([r.entry for r in recs], style)
    memo = PieceMemo()
    assert outcome(text.encode(), memo) == outcome(text)


@SETTINGS
@given(records(), records(), st.integers(0, 2), st.randoms(use_true_random=False))
def test_the_next_export_read_with_the_memo(
    first: list[Record], more: list[Record], style: int, rnd: random.Random
) -> None:
    """An edited export (entries dropped, added, expiries moved) read with the memo of the last."""
    before = typed_entries(first)
    after = [e for e in before if rnd.random() > 0.2]
    for entry in typed_entries(more)[:5]:
        after.insert(rnd.randint(0, len(after)), entry)
    for entry in after:
        if rnd.random() < 0.1:
            entry["expires"] += 1
    memo = PieceMemo()
    assert outcome(layout(before, style).encode(), memo) == outcome(layout(before, style))
    text = layout(after, style)
    assert outcome(text.encode(), memo) == outcome(text)
    assert outcome(text.encode(), PieceMemo()) == outcome(text)


def sample_table(n: int) -> list[dict[str, Any]]:
    return [
        {"asn": 64496 + i % 7, "prefix": f"10.{i >> 8}.{i & 255}.0/24", "maxLength": 24,
         "ta": "ripe", "expires": 1_700_000_000 + i % 3}
        for i in range(n)
    ]  # fmt: skip


def test_a_small_change_decodes_few_pieces() -> None:
    table = sample_table(3000)
    memo = PieceMemo()
    first = parse_export(layout(table, 0).encode(), memo=memo)
    pieces = len(memo)
    assert pieces > 100
    changed = table[:1000] + table[1001:2000] + [dict(table[2000], expires=1)] + table[2001:]
    changed.insert(500, {"asn": 1, "prefix": "192.0.2.0/24", "ta": "x", "expires": 5})
    data = layout(changed, 0).encode()
    read = read_pieces(data, memo)
    assert read is not None
    assert read.reused >= pieces - 6  # a changed piece is decoded, the cut then finds the rest
    second = parse_export(data, memo=memo)
    assert second == parse_export(data.decode())
    assert second != first


def test_the_memo_holds_views_of_the_payload_not_a_copy() -> None:
    memo = PieceMemo()
    payload = parse_export(layout(sample_table(3000), 0).encode(), memo=memo)
    views = [p.v4.keys for p in memo.pieces]
    assert len(views) > 100
    assert all(isinstance(v, memoryview) and v.obj is payload.v4 for v in views)
    expires = [p.v4.expires for p in memo.pieces]
    assert all(isinstance(e, memoryview) and e.obj is payload.v4_expires for e in expires)


def test_the_memo_is_kept_when_an_export_is_refused_and_emptied_after_another_read() -> None:
    table = sample_table(200)
    memo = PieceMemo()
    parse_export(layout(table, 0).encode(), memo=memo)
    held = memo.pieces
    bad = [*table, {"asn": 1, "prefix": "192.0.2.1/24", "expires": 5}]
    with pytest.raises(FormatError, match=r"roas\[200\]: prefix='192.0.2.1/24'"):
        parse_export(layout(bad, 0).encode(), memo=memo)
    assert memo.pieces == held
    other = [dict(e, asn=f"AS{e['asn']}") for e in table]  # Routinator's ASNs: not in pieces
    parse_export(layout(other, 0).encode(), memo=memo)
    assert len(memo) == 0
    assert memo.sections is None


MISLEADING = [
    # A "roas" array in the metadata, before the real one.
    '{"metadata": {"roas": [{"asn": 1, "prefix": "192.0.2.0/24", "expires": 1}]}, "roas": []}',
    '{"metadata": {"roas": []}, "roas": [{"asn": 1, "prefix": "192.0.2.0/24", "expires": 1}]}',
    # A second top-level "roas": the last one counts.
    '{"roas": [{"asn": 1, "prefix": "192.0.2.0/24", "expires": 1}], "roas": []}',
    '{"roas": [], "roas": [{"asn": 1, "prefix": "192.0.2.0/24", "expires": 1}]}',
    # Entry boundaries inside strings.
    (
        '{"roas": [{"asn": 1, "prefix": "192.0.2.0/24", "ta": "a},{\\"asn\\": 2", "expires": 1},'
        ' {"asn": 2, "prefix": "192.0.3.0/24", "ta": "}]", "expires": 1}]}'
    ),
    # Trailing bytes, a byte order mark, a truncated document, not an object.
    '{"roas": [{"asn": 1, "prefix": "192.0.2.0/24", "expires": 1}]} x',
    '\ufeff{"roas": [{"asn": 1, "prefix": "192.0.2.0/24", "expires": 1}]}',
    '{"roas": [{"asn": 1, "prefix": "192.0.2.0/24", "expires": 1}',
    '[{"roas": [{"asn": 1, "prefix": "192.0.2.0/24", "expires": 1}]}]',
    # Payload-shaped objects outside the payload sections; an entry with a nested array.
    '{"metadata": {"x": {"asn": 1, "prefix": "192.0.2.0/24"}}, "roas": []}',
    '{"roas": [{"asn": 1, "prefix": "192.0.2.0/24", "expires": 1, "source": [{"a": []}]}]}',
    # A bad section beside good pieces.
    '{"roas": [{"asn": 1, "prefix": "192.0.2.0/24", "expires": 1}], "aspas": {}}',
]


@pytest.mark.parametrize("text", MISLEADING)
def test_misleading_documents_read_like_the_whole_document(text: str) -> None:
    data = text.encode()
    memo = PieceMemo()
    assert outcome(data, memo) == whole(data)
    with mock.patch.object(piece_reader, "PIECE_SIZE", 1):
        assert outcome(data, memo) == whole(data)


#: Entries of the typed shape that must be refused (`test_json_properties.BAD_TYPED`, and more).
BAD = [
    *BAD_TYPED,
    {"prefix": "192.0.2.0\u0000/24", "asn": 64496, "expires": 1},  # NUL: not an address
    {"prefix": "0.0.0.0/33", "asn": 64496, "expires": 1},
    {"prefix": "0.0.0.0/24", "asn": 64496, "expires": 1, "maxLength": -200},
    {"prefix": "::/0", "asn": 64496, "expires": 1, "maxLength": 129},
    {"prefix": "2001:db8::1/64", "asn": 64496, "expires": 1},
    {"prefix": "2001:db8::/32", "asn": -5, "expires": 1},
]


@SETTINGS
@given(records(), st.sampled_from(BAD), st.integers(0, 20))
def test_a_bad_entry_in_a_piece_is_named_as_by_the_whole_read(
    recs: list[Record], bad: dict[str, Any], at: int
) -> None:
    roas = typed_entries(recs)
    roas.insert(min(at, len(roas)), bad)
    data = layout(roas, 0).encode()
    error = outcome(data, PieceMemo())
    assert isinstance(error, str), f"{bad} was accepted"
    assert error == whole(data)
    assert f"roas[{min(at, len(roas) - 1)}]" in error


@st.composite
def family_parts(draw: st.DrawFn) -> list[dict[bytes, list[int]]]:
    """Supports by key for a few parts; keys overlap between parts (and repeat within one)."""
    pool = [bytes([a, 0, 0, 0, 24, 24, 0, 0, 0, b]) for a in range(4) for b in range(3)]
    parts = []
    for _ in range(draw(st.integers(0, 5))):
        keys = draw(st.lists(st.sampled_from(pool), max_size=10))
        part: dict[bytes, list[int]] = {}
        for key in keys:
            part.setdefault(key, []).append(draw(st.integers(0, 3)))
        parts.append(part)
    return parts


def as_part(supports: dict[bytes, list[int]]) -> FamilyPart:
    vrps: dict[bytes, int] = {}
    extras: list[tuple[bytes, int]] = []
    for key, times in supports.items():
        ordered = sorted(times, reverse=True)
        vrps[key] = ordered[0]
        extras += [(key, t) for t in ordered[1:]]
    return family_part(vrps, extras)


@SETTINGS
@given(family_parts(), st.integers(0, 3))
def test_assembled_tables_hold_every_support_once(
    parts: list[dict[bytes, list[int]]], overlap: int
) -> None:
    with mock.patch("upstream.pieces._MAX_OVERLAP", overlap):
        tables = assemble([as_part(p) for p in parts], [])
    everything: dict[bytes, list[int]] = {}
    for part in parts:
        for key, times in part.items():
            everything.setdefault(key, []).extend(times)
    keys = sorted(everything, reverse=True)
    assert tables.v4 == b"".join(keys)
    assert tables.v4_expires == array("q", [max(everything[k]) for k in keys])
    extras = sorted(
        ((k, t) for k in keys for t in sorted(everything[k], reverse=True)[1:]), reverse=True
    )
    assert [(k, t) for _, k, t in tables.duplicates] == extras
    assert all(len(k) == V4_KEY_SIZE for k in split_keys(tables.v4, V4_KEY_SIZE))
