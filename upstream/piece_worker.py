"""The second half of a large first read, in a helper process: ``python -m upstream.piece_worker``.

`upstream.export_file.read_export` splits the ``roas`` array of a large export at an entry
boundary when it has no pieces to reuse (a first read): it cuts and reads the first half itself
and runs this on the second, on another core. Given the file and the offset of the entry that
starts the second half, this reads from there to the end, cuts and reads that part of the array
like `upstream.piece_reader.PieceCutter` (it is one, fed ``"roas":[`` first), and writes to
standard output a pickle of `Half`: its pieces, the document after the array, and the SHA-256 and
length of the octets it read (the caller hashed the same range of the same file: a file replaced
meanwhile shows as another digest, and the caller reads again on its own). Exit status 0 when it
wrote a `Half`, 1 when the part cannot be read in pieces (nothing written), 2 on a usage error.
"""

from __future__ import annotations

import hashlib
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from upstream.piece_reader import PieceCutter
from upstream.pieces import Piece

__all__ = ["OPENING", "Half", "main", "read_half"]

#: What the part is fed behind: it starts inside the array.
OPENING: Final = b'"roas":['
#: Octets read at a time.
_BLOCK: Final = 4 << 20


@dataclass(frozen=True, slots=True)
class Half:
    """The second half of an export's ``roas`` array, read in pieces."""

    pieces: list[Piece]
    #: The document after the array's ``]``.
    tail: bytes
    #: SHA-256 and length of the octets read (from the start offset to the end of the file).
    digest: bytes
    size: int


def read_half(path: Path, start: int) -> Half | None:
    """The pieces of ``path`` from offset ``start`` (an entry's ``{``) to the array's end."""
    cutter = PieceCutter()
    cutter.feed(OPENING)
    sha = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        f.seek(start)
        while block := f.read(_BLOCK):
            sha.update(block)
            size += len(block)
            cutter.feed(block)
    read = cutter.finish()
    if read is None:
        return None
    return Half(read.pieces, read.tail, sha.digest(), size)


def main(argv: list[str] | None = None) -> int:
    """Read the half named by ``argv`` (path, start offset); write its pickle to stdout."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or not args[1].isdigit():
        print("usage: python -m upstream.piece_worker PATH START", file=sys.stderr)  # noqa: T201
        return 2
    half = read_half(Path(args[0]), int(args[1]))
    if half is None:
        return 1
    pickle.dump(half, sys.stdout.buffer, protocol=pickle.HIGHEST_PROTOCOL)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    # Run under the module's own name, so that the pickle names upstream.piece_worker.Half.
    from upstream.piece_worker import main as run

    sys.exit(run())
