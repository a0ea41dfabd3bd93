"""`upstream.export_file.read_export`: an export file streamed in blocks through the piece cutter.

Blocks and pieces are made tiny here so that every cut and every piece boundary falls across
blocks; the payload must be what the whole-document read makes of the same bytes, and the
digest the SHA-256 of the file.
"""

from __future__ import annotations

import bz2
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.upstream.test_json_pieces import layout, sample_table, typed_entries
from tests.upstream.test_json_properties import Record, records
from upstream import export_file, json_format, piece_reader
from upstream.export_file import read_export
from upstream.format_error import FormatError
from upstream.json_format import parse_export
from upstream.pieces import PieceMemo


@pytest.fixture(autouse=True)
def tiny() -> Iterator[None]:
    with (
        mock.patch.object(piece_reader, "PIECE_SIZE", 64),
        mock.patch.object(piece_reader, "RESYNC_WINDOW", 256),
        mock.patch.object(export_file, "BLOCK", 37),
    ):
        yield


def whole(data: bytes) -> object:
    with mock.patch.object(json_format, "_from_pieces", return_value=None):
        try:
            return parse_export(data)
        except FormatError as exc:
            return f"FormatError: {exc}"


def read(path: Path, memo: PieceMemo | None = None) -> object:
    try:
        digest, size, delivery = read_export(path, (), 10_000, memo=memo)
    except FormatError as exc:
        return f"FormatError: {exc}"
    data = path.read_bytes()
    assert digest == hashlib.sha256(data).digest()
    assert size == len(data)
    assert delivery is not None
    return delivery.payload


@settings(max_examples=60, deadline=None)
@given(records(), records(), st.integers(0, 2))
def test_a_streamed_export_reads_like_the_whole_document(
    first: list[Record], second: list[Record], style: int
) -> None:
    memo = PieceMemo()
    with _scratch() as path:
        for recs in (first, first + second, second):
            path.write_text(layout(typed_entries(recs), style))
            assert read(path, memo) == whole(path.read_bytes())


def test_unchanged_pieces_come_from_the_memo(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    table = sample_table(1000)
    path.write_text(layout(table, 0))
    memo = PieceMemo()
    read(path, memo)
    before = memo.pieces
    table[500] = dict(table[500], expires=7)
    path.write_text(layout(table, 0))
    with mock.patch.object(piece_reader, "_decoded", wraps=piece_reader._decoded) as decoded:
        assert read(path, memo) == whole(path.read_bytes())
    assert 0 < decoded.call_count <= 3
    kept = {p.digest for p in before}
    assert sum(p.digest in kept for p in memo.pieces) >= len(before) - 3


def test_a_known_digest_delivers_nothing(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    path.write_text(layout(sample_table(50), 0))
    digest = hashlib.sha256(path.read_bytes()).digest()
    assert read_export(path, (digest,), 10_000) == (digest, path.stat().st_size, None)


def test_compressed_and_other_shapes_are_read_whole(tmp_path: Path) -> None:
    table = sample_table(100)
    path = tmp_path / "export.json.bz2"
    path.write_bytes(bz2.compress(layout(table, 0).encode()))
    memo = PieceMemo()
    assert read(path, memo) == whole(layout(table, 0).encode())
    other: list[dict[str, Any]] = [dict(e, asn=f"AS{e['asn']}") for e in table]
    path = tmp_path / "routinator.json"
    path.write_text(json.dumps({"roas": other}))
    with mock.patch.object(export_file, "_whole", wraps=export_file._whole) as whole_read:
        assert read(path, memo) == whole(path.read_bytes())
    assert whole_read.call_count == 1


def test_a_bad_entry_is_named_as_by_the_whole_read(tmp_path: Path) -> None:
    table = [*sample_table(300), {"asn": 1, "prefix": "192.0.2.1/24", "expires": 5}]
    path = tmp_path / "export.json"
    path.write_text(layout(table, 0))
    message = read(path)
    assert message == whole(path.read_bytes())
    assert "roas[300]: prefix='192.0.2.1/24'" in str(message)


def test_the_size_limit_counts_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    path.write_text(layout(sample_table(300), 0))
    size = path.stat().st_size
    with pytest.raises(FormatError, match=f"file of {size} bytes exceeds the limit of 1000 bytes"):
        read_export(path, (), 10_000, 1000)


class _scratch:  # noqa: N801 (a context manager used like a function)
    """A scratch file for hypothesis examples (pytest's tmp_path is one per test)."""

    def __enter__(self) -> Path:
        import tempfile

        self._dir = tempfile.TemporaryDirectory()
        return Path(self._dir.name) / "export.json"

    def __exit__(self, *exc: object) -> None:
        self._dir.cleanup()
