"""`read_export`: one export file hashed and read, plain JSON streamed in blocks through the cutter.

A plain JSON export is read block by block (`BLOCK`): each block goes into the SHA-256 of the
file and into a `upstream.piece_reader.PieceCutter`, so the file's text is never held whole,
nor any structure of its ``roas`` array. A compressed export, and one that cannot be read in
pieces (another shape, an invalid entry), are read whole as before; the whole-document read
then names what is wrong. The digest is of the bytes the payload was made of: when the file
was replaced between the streamed read and the whole one, it is the digest of the second. A
large first read is split with a helper process on a second core (`upstream.split_read`).
After a read the freed heap goes back to the system (`upstream.heap.trim_heap`).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Final

from upstream.decompress import decompress
from upstream.format_error import FormatError
from upstream.heap import trim_heap
from upstream.json_format import parse_export, pieced_payload
from upstream.pieces import PieceMemo
from upstream.source import Delivery, payload_identity

__all__ = ["BLOCK", "DEFAULT_MAX_BYTES", "read_export"]

#: 1 GiB: about ten times today's largest global export, uncompressed.
DEFAULT_MAX_BYTES: Final = 1 << 30
#: Octets read at a time.
BLOCK: Final = 4 << 20
#: The magic numbers `upstream.decompress.decompress` recognises.
_COMPRESSED: Final = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00")


def read_export(
    path: Path,
    known: tuple[bytes | None, ...],
    max_aspa_providers: int,
    max_bytes: int = DEFAULT_MAX_BYTES,
    memo: PieceMemo | None = None,
    *,
    helper: bool = True,
) -> tuple[bytes, int, Delivery | None]:
    """(digest, size, delivery) of the export at ``path``; no delivery when the digest is known.

    ``memo`` holds the pieces of the last export read (`upstream.pieces`). With ``helper``, a
    large first read is split with a helper process (`upstream.split_read`).

    Raises:
        OSError: the file cannot be read.
        FormatError: the export is too large, or not a valid export.
    """
    from upstream.piece_reader import PieceCutter
    from upstream.split_read import SPLIT_MIN, SplitRead

    split: SplitRead | None = None
    try:
        with path.open("rb") as f:
            block = f.read(BLOCK)
            if block.startswith(_COMPRESSED):
                return _whole(block + f.read(), known, max_aspa_providers, max_bytes, memo)
            stated = os.fstat(f.fileno()).st_size
            if helper and not memo and SPLIT_MIN <= stated <= max_bytes:
                split = SplitRead.begin(path, f, stated)
            sha = hashlib.sha256()
            size = 0
            cutter = PieceCutter(memo)
            while block:
                sha.update(block)
                if max(size + len(block), stated) <= max_bytes:
                    if split is None:
                        cutter.feed(block)
                    else:
                        split.feed(cutter, block, size)
                size += len(block)
                block = f.read(BLOCK)
            digest = sha.digest()
        if digest in known:
            return digest, size, None
        if size > max_bytes:
            raise FormatError(f"file of {size} bytes exceeds the limit of {max_bytes} bytes")
        read = cutter.finish()
        if split is not None:
            read = split.join(read)
            if read is None:  # the helper failed, or read other bytes: alone, from the start
                split.close()
                split = None
                return read_export(path, known, max_aspa_providers, max_bytes, memo, helper=False)
    finally:
        if split is not None:
            split.close()
    payload = None if read is None else pieced_payload(read, memo, max_aspa_providers)
    del read, cutter
    if payload is None:
        return _whole(path.read_bytes(), known, max_aspa_providers, max_bytes, memo)
    trim_heap()
    return digest, size, Delivery(payload, payload_identity(payload))


def _whole(
    raw: bytes,
    known: tuple[bytes | None, ...],
    max_aspa_providers: int,
    max_bytes: int,
    memo: PieceMemo | None,
) -> tuple[bytes, int, Delivery | None]:
    """The export read whole (compressed, or not readable in pieces)."""
    digest = hashlib.sha256(raw).digest()
    size = len(raw)
    if digest in known:
        return digest, size, None
    if size > max_bytes:
        raise FormatError(f"file of {size} bytes exceeds the limit of {max_bytes} bytes")
    data = decompress(raw, max_size=max_bytes)
    del raw
    payload = parse_export(data, max_aspa_providers=max_aspa_providers, memo=memo)
    del data
    trim_heap()
    return digest, size, Delivery(payload, payload_identity(payload))
