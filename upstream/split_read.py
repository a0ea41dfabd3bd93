"""`SplitRead`: a large first read in two halves, the second read by a helper on another core.

Decoding and packing every entry is Python work, bound to one core. A first read (nothing in the
source's memo to reuse) of an export of at least `SPLIT_MIN` octets is therefore cut at the
entry boundary nearest its middle: this process cuts and reads the first half of the ``roas``
array (fed up to that entry's ``}``, then ``]``), the helper the rest, at the same time. The
helper hashes what it read; this process hashes the same range as it streams the file for its
own digest, and takes the helper's pieces only when both digests match (a file replaced in
between is read again, alone). Any failure of the helper (it cannot start, exits with an error,
takes longer than `HELPER_TIMEOUT`, its half does not read in pieces) means the same: the read
is done again in this process, so the result never depends on the helper.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path
from typing import BinaryIO, Final

from upstream.piece_reader import PieceCutter, PieceRead
from upstream.piece_worker import Half

__all__ = ["HELPER_TIMEOUT", "SPLIT_MIN", "SplitRead"]

#: Exports at least this large are read by two processes at their first read.
SPLIT_MIN: Final = 32 << 20
#: Seconds the helper gets (it needs about one for a million entries).
HELPER_TIMEOUT: Final = 120.0
#: Octets around the middle searched for an entry boundary.
_WINDOW: Final = 1 << 20
#: An entry boundary: ``}``, a comma, ``{`` (whitespace anywhere between).
_CUT: Final = re.compile(rb"\}[ \t\n\r]*,[ \t\n\r]*\{")
#: The directory holding this package (the helper imports it from there too).
_PACKAGES: Final = str(Path(__file__).resolve().parent.parent)


class SplitRead:
    """One split read: where the first half ends, the helper reading the second."""

    def __init__(self, cut_end: int, start: int, process: subprocess.Popen[bytes]) -> None:
        """``cut_end``: just after the first half's last ``}``; ``start``: the second's ``{``."""
        self.cut_end = cut_end
        self.start = start
        self.process = process
        #: SHA-256 of the octets from ``start`` on, as this process read them.
        self._sha = hashlib.sha256()
        self._closed = False

    @classmethod
    def begin(cls, path: Path, f: BinaryIO, size: int) -> SplitRead | None:
        """Start the helper on the second half of ``path`` (open as ``f``, ``size`` octets).

        None when no entry boundary lies near the middle or the helper cannot start.
        """
        middle = size // 2
        boundary = _CUT.search(os.pread(f.fileno(), _WINDOW, middle))
        if boundary is None:
            return None
        start = middle + boundary.end() - 1
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGES, env.get("PYTHONPATH")) if p)
        try:
            process = subprocess.Popen(  # noqa: S603 (this interpreter, our module, our file)
                [sys.executable, "-m", "upstream.piece_worker", str(path), str(start)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
            )
        except OSError:
            return None
        return cls(middle + boundary.start() + 1, start, process)

    def feed(self, cutter: PieceCutter, block: bytes, at: int) -> None:
        """``block`` (at offset ``at``): the first half's part to ``cutter``, the rest hashed."""
        end = at + len(block)
        if at < self.cut_end:
            cutter.feed(block[: self.cut_end - at])
        if not self._closed and end >= self.cut_end:
            cutter.feed(b"]")  # the first half's array ends with its last entry
            self._closed = True
        if end > self.start:
            self._sha.update(memoryview(block)[max(0, self.start - at) :])

    def join(self, first: PieceRead | None) -> PieceRead | None:
        """Both halves as one read; None when either could not be read or the bytes differ."""
        try:
            out, _ = self.process.communicate(timeout=HELPER_TIMEOUT)
        except subprocess.TimeoutExpired:
            return None
        if first is None or self.process.returncode != 0:
            return None
        try:
            # The pickle of our own helper, over its pipe: no other party writes it.
            half = pickle.loads(out)  # noqa: S301
        except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError):
            return None
        if not isinstance(half, Half) or half.digest != self._sha.digest():
            return None
        return PieceRead(first.pieces + half.pieces, first.head, half.tail, first.reused)

    def close(self) -> None:
        """End the helper if it still runs (idempotent)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate()
