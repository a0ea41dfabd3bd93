"""`upstream.split_read`: a large first read in two halves, the second read by a helper process.

Sizes are made tiny here so that a small export is split; the payload must be what one process
makes of the same bytes, whatever the helper does: it reads its half, it fails, it reads another
file (a replaced export), it never starts.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest

from tests.upstream.test_export_file import read
from tests.upstream.test_json_pieces import layout, sample_table, whole
from upstream import export_file, piece_reader, split_read
from upstream.export_file import read_export
from upstream.format_error import FormatError
from upstream.payload import SourcePayload
from upstream.piece_worker import main as worker_main
from upstream.pieces import PieceMemo


@pytest.fixture(autouse=True)
def small() -> Iterator[None]:
    with (
        mock.patch.object(split_read, "SPLIT_MIN", 1000),
        mock.patch.object(piece_reader, "PIECE_SIZE", 2048),
        mock.patch.object(export_file, "BLOCK", 4096),
    ):
        yield


def payload(path: Path, memo: PieceMemo | None = None) -> SourcePayload:
    """The payload read from ``path`` (`test_export_file.read`: its digest and size checked)."""
    got = read(path, memo)
    assert isinstance(got, SourcePayload), got
    return got


@pytest.fixture
def export(tmp_path: Path) -> Path:
    path = tmp_path / "export.json"
    path.write_text(layout(sample_table(3000), 0, aspas=[{"customer_asid": 1, "providers": [2]}]))
    return path


def test_a_first_read_is_split_and_reads_like_one_process(export: Path) -> None:
    with mock.patch.object(split_read.SplitRead, "join", autospec=True,
                           side_effect=split_read.SplitRead.join) as join:  # fmt: skip
        memo = PieceMemo()
        got = payload(export, memo)
    assert join.call_count == 1
    assert got == whole(export.read_bytes())
    assert got.aspas  # the document after the array came from the helper
    # The next read reuses the pieces of both halves, in this process alone.
    with mock.patch.object(split_read.SplitRead, "begin") as begin:
        assert payload(export, memo) == got
    assert begin.call_count == 0


def test_the_helper_half_is_used(export: Path) -> None:
    """The entries of the second half come from the helper: this process decodes about half."""
    decoded: list[int] = []

    def counted(span: memoryview) -> object:
        piece = real(span)
        decoded.append(0 if piece is None else piece.count)
        return piece

    real = piece_reader._decoded
    with mock.patch.object(piece_reader, "_decoded", side_effect=counted):
        memo = PieceMemo()
        payload(export, memo)
    assert 1000 < sum(decoded) < 2000  # of 3000
    assert sum(p.count for p in memo.pieces) == 3000


def test_a_helper_that_read_another_file_is_not_believed(export: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text(layout(sample_table(2000)[::-1], 0))
    real_popen = subprocess.Popen

    def elsewhere(args: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        return real_popen([*args[:-2], str(other), args[-1]], **kwargs)  # type: ignore[call-overload,no-any-return]

    with mock.patch("subprocess.Popen", side_effect=elsewhere) as popen:
        got = payload(export)
    assert popen.call_count == 1
    assert got == whole(export.read_bytes())


@pytest.mark.parametrize(
    "command", [[sys.executable, "-c", "import sys; sys.exit(1)"], ["/nonexistent/python"]]
)
def test_a_helper_that_fails_changes_nothing(export: Path, command: list[str]) -> None:
    real_popen = subprocess.Popen

    def failing(args: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        return real_popen(command, **kwargs)  # type: ignore[call-overload,no-any-return]

    with mock.patch("subprocess.Popen", side_effect=failing):
        assert payload(export) == whole(export.read_bytes())


def test_a_bad_entry_in_either_half_is_named_as_by_the_whole_read(tmp_path: Path) -> None:
    for at in (100, 2900):
        table = sample_table(3000)
        table[at] = {"asn": 1, "prefix": "192.0.2.1/24", "expires": 5}
        path = tmp_path / f"bad{at}.json"
        path.write_text(layout(table, 0))
        with pytest.raises(FormatError, match=rf"roas\[{at}\]: prefix='192.0.2.1/24'"):
            read_export(path, (), 10_000, memo=PieceMemo())


def test_the_worker_refuses_bad_arguments_and_a_part_that_is_no_array(export: Path) -> None:
    assert worker_main(["only-one"]) == 2
    assert worker_main([str(export), "x"]) == 2
    assert worker_main([str(export), "0"]) == 1  # offset 0: the document's head, not entries
