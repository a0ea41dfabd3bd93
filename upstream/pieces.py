"""Pieces of an export's ``roas`` array, the memo of a source's last read, and the tables of both.

A `Piece` is a run of whole ``roas`` entries as the export wrote them (`upstream.piece_reader`
cuts and reads them): the SHA-256 of its bytes and what they hold, packed. A source keeps the
pieces of its last valid export in a `PieceMemo`; its next read takes a piece whose bytes are
unchanged from there instead of decoding it again.

Each piece holds its own VRPs as packed keys, sorted descending
and unique within the piece, with their expiries and its extra supports. Pieces whose key ranges
do not overlap are laid end to end in descending order (byte strings joined, at C speed); the
pieces of a run whose ranges overlap (an export not sorted our way, or a VRP listed in two
pieces) are merged key by key. The result is exactly what reading every entry into one mapping
gives (`upstream.json_format`): each VRP once, with the latest expiry of its supports, and every
other support as an extra.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from snapshot.model import Aspa, RouterKey
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE, find, split_keys

__all__ = [
    "ANCHOR_SIZE",
    "FamilyPart",
    "Piece",
    "PieceMemo",
    "Sections",
    "VrpTables",
    "add_support",
    "assemble",
    "family_part",
]

#: Octets of a piece's start by which the next read finds it again.
ANCHOR_SIZE: Final = 64


class FamilyPart(NamedTuple):
    """The VRPs of one family in one piece.

    A piece just read holds its own keys and expiries; a remembered one whose keys lie as one
    run in the source's assembled table holds views of that table instead (`Piece.placed`), so
    the memo costs no second copy of the table.
    """

    #: Packed keys, descending, unique.
    keys: bytes | memoryview
    #: Their expiries, aligned.
    expires: array[int] | memoryview
    #: Other supports of keys in ``keys``: (key, expiry).
    extras: tuple[tuple[bytes, int], ...]

    def owned(self) -> OwnedPart:
        """The same part with keys and expiries of its own (not views of a table)."""
        expires = self.expires if isinstance(self.expires, array) else array("q")
        if not isinstance(self.expires, array):
            expires.frombytes(self.expires.cast("B"))
        return OwnedPart(bytes(self.keys), expires, self.extras)


class OwnedPart(NamedTuple):
    """A `FamilyPart` whose keys and expiries are its own (what merging works on)."""

    keys: bytes
    expires: array[int]
    extras: tuple[tuple[bytes, int], ...]


class VrpTables(NamedTuple):
    """Both families' tables and every extra support, as `upstream.payload.SourcePayload` holds."""

    v4: bytes
    v4_expires: array[int]
    v6: bytes
    v6_expires: array[int]
    #: (family 4/6, key, expiry), IPv4 first, then keys and expiries descending.
    duplicates: tuple[tuple[int, bytes, int], ...]
    #: Per part given to `assemble`, the index of its first key in its family's table when its
    #: keys lie there as one run (None: merged with another part's, or empty).
    v4_at: tuple[int | None, ...] = ()
    v6_at: tuple[int | None, ...] = ()


class Sections(NamedTuple):
    """What an export's other payload sections hold (`upstream.payload.SourcePayload`'s fields)."""

    router_keys: tuple[tuple[RouterKey, int], ...]
    router_key_duplicates: tuple[tuple[RouterKey, int], ...]
    aspas: tuple[tuple[Aspa, int], ...]
    aspa_afis: bytes


EMPTY_PART = FamilyPart(b"", array("q"), ())


def add_support(
    latest: dict[bytes, int], extras: list[tuple[bytes, int]], key: bytes, expiry: int
) -> None:
    """One more support of VRP ``key``: the latest expiry stays in ``latest``, others in ``extras``.

    Contract P-27: each support keeps its own place.
    """
    old = latest.get(key)
    if old is None:
        latest[key] = expiry
    elif expiry > old:
        latest[key] = expiry
        extras.append((key, old))
    else:
        extras.append((key, expiry))


@dataclass(frozen=True, slots=True)
class Piece:
    """Whole ``roas`` entries of an export, from the first one's ``{`` to the last one's ``}``."""

    #: SHA-256 of the piece's bytes.
    digest: bytes
    #: Its length in octets.
    size: int
    #: Its first `ANCHOR_SIZE` octets (all of them in a shorter piece).
    anchor: bytes
    #: Entries in it.
    count: int
    v4: FamilyPart
    v6: FamilyPart

    def placed(self, tables: VrpTables, v4_at: int | None, v6_at: int | None) -> Piece:
        """This piece with views of ``tables`` where its keys lie there as one run.

        ``v4_at``/``v6_at``: the index of its first key of that family in ``tables`` (None:
        merged with another piece's keys, so the piece keeps its own part).
        """
        v4 = _view(self.v4, tables.v4, tables.v4_expires, v4_at, V4_KEY_SIZE)
        v6 = _view(self.v6, tables.v6, tables.v6_expires, v6_at, V6_KEY_SIZE)
        return Piece(self.digest, self.size, self.anchor, self.count, v4, v6)


def _view(
    part: FamilyPart, table: bytes, expires: array[int], at: int | None, width: int
) -> FamilyPart:
    """``part`` as views of ``table`` and ``expires`` from key index ``at`` on."""
    count = len(part.keys) // width
    if at is None or not count:
        return part
    keys = memoryview(table)[at * width : (at + count) * width]
    return FamilyPart(keys, memoryview(expires)[at : at + count], part.extras)


class PieceMemo:
    """The pieces of the last valid export one source read, in the export's order.

    Owned by the source and used by one read at a time (its worker thread). It is a memo, never
    a source of truth: a piece is taken from it only when the new bytes have the same SHA-256,
    and a piece's content depends on its bytes alone.
    """

    __slots__ = ("_by_anchor", "_pieces", "sections")

    def __init__(self) -> None:
        """Empty: the first read decodes every piece."""
        self._pieces: tuple[Piece, ...] = ()
        self._by_anchor: dict[bytes, int] = {}
        #: The other payload sections of the last export: (SHA-256 of their raw JSON, the ASPA
        #: provider cap they were read under, what they hold).
        self.sections: tuple[bytes, int, Sections] | None = None

    @property
    def pieces(self) -> tuple[Piece, ...]:
        """The pieces, in the export's order."""
        return self._pieces

    def at_anchor(self, start: bytes) -> int | None:
        """The index of the piece whose anchor is ``start`` (None: no such piece)."""
        return self._by_anchor.get(start)

    def replace(self, pieces: Sequence[Piece]) -> None:
        """Keep ``pieces`` (the export just read) instead of the previous ones."""
        self._pieces = tuple(pieces)
        self._by_anchor = {p.anchor: i for i, p in enumerate(self._pieces)}

    def clear(self) -> None:
        """Forget every piece and the sections (the export was read another way)."""
        self.replace(())
        self.sections = None

    def __len__(self) -> int:
        """The number of pieces held."""
        return len(self._pieces)


def family_part(vrps: dict[bytes, int], extras: list[tuple[bytes, int]]) -> FamilyPart:
    """The part of one family from its unique keys (with their latest expiry) and extras."""
    if not vrps and not extras:
        return EMPTY_PART
    keys = sorted(vrps, reverse=True)
    return FamilyPart(b"".join(keys), array("q", map(vrps.__getitem__, keys)), tuple(extras))


def assemble(v4_parts: Sequence[FamilyPart], v6_parts: Sequence[FamilyPart]) -> VrpTables:
    """The tables of the pieces' parts (any order) and their extras, sorted."""
    v4, v4_expires, v4_extras, v4_at = _family(v4_parts, V4_KEY_SIZE)
    v6, v6_expires, v6_extras, v6_at = _family(v6_parts, V6_KEY_SIZE)
    duplicates = [(4, k, e) for k, e in v4_extras] + [(6, k, e) for k, e in v6_extras]
    # IPv4 first (as `json_format._extra_order`), then by key and expiry, all descending.
    duplicates.sort(key=lambda d: (d[0] == 4, d[1], d[2]), reverse=True)
    return VrpTables(v4, v4_expires, v6, v6_expires, tuple(duplicates), v4_at, v6_at)


#: Keys of one part that may overlap the next before their whole run is merged at once.
_MAX_OVERLAP: Final = 4096


def _family(
    parts: Sequence[FamilyPart], width: int
) -> tuple[bytes, array[int], list[tuple[bytes, int]], tuple[int | None, ...]]:
    """One family's table, expiries, extras (unsorted) and each part's place in the table.

    The parts are taken by their largest key, descending, and grouped into runs whose key
    ranges overlap. A part alone in its run is appended as it is (its place is where its first
    key went); the parts of a run are merged (`_run_table`; they have no place of their own).
    """
    extras: list[tuple[bytes, int]] = [x for part in parts for x in part.extras]
    tops = {i: bytes(p.keys[:width]) for i, p in enumerate(parts) if len(p.keys)}
    runs: list[list[int]] = []
    low = b""  # the smallest key of the current run
    for i in sorted(tops, key=tops.__getitem__, reverse=True):
        bottom = bytes(parts[i].keys[-width:])
        if runs and tops[i] >= low:
            runs[-1].append(i)
            low = min(low, bottom)
        else:
            runs.append([i])
            low = bottom
    blobs: list[bytes | memoryview] = []
    expires = array("q")
    at: list[int | None] = [None] * len(parts)
    for run in runs:
        if len(run) == 1:
            part = parts[run[0]]
            at[run[0]] = len(expires)
            blobs.append(part.keys)
            expires.frombytes(memoryview(part.expires).cast("B"))
        else:
            keys, run_expires = _run_table([parts[i].owned() for i in run], width, extras)
            blobs.append(keys)
            expires.extend(run_expires)
    return b"".join(blobs), expires, extras, tuple(at)


def _run_table(
    run: Sequence[OwnedPart], width: int, extras: list[tuple[bytes, int]]
) -> tuple[bytes, array[int]]:
    """One table of the overlapping parts of ``run``; demoted supports go to ``extras``.

    In a sorted export the parts of a run overlap by a few keys where two pieces meet (the
    export breaks ties of one address otherwise than our order, or lists a VRP on both sides):
    only those keys are merged, the rest is copied in slices. When some part overlaps more than
    `_MAX_OVERLAP` keys (an unsorted export) the whole run is merged key by key instead.
    """
    found: list[tuple[bytes, int]] = []
    blobs: list[bytes] = []
    expires = array("q")
    carry_keys, carry_expires = run[0].keys, run[0].expires
    for part in run[1:]:
        top = part.keys[:width]
        if top < carry_keys[-width:]:
            blobs.append(carry_keys)
            expires.extend(carry_expires)
            carry_keys, carry_expires = part.keys, part.expires
            continue
        cut = find(carry_keys, width, top)  # the carry's keys above ``top`` go out as they are
        if len(carry_keys) // width - cut > _MAX_OVERLAP:
            return _merge(run, width, extras)
        blobs.append(carry_keys[: cut * width])
        expires.extend(carry_expires[:cut])
        tail = OwnedPart(carry_keys[cut * width :], carry_expires[cut:], ())
        low = tail.keys[-width:]
        # The part's keys at or above the tail's lowest overlap it; the others follow it.
        head = find(part.keys, width, low)
        head += part.keys[head * width : (head + 1) * width] == low
        if head > _MAX_OVERLAP:
            return _merge(run, width, extras)
        overlap = OwnedPart(part.keys[: head * width], part.expires[:head], ())
        merged_keys, merged_expires = _merge((tail, overlap), width, found)
        carry_keys = merged_keys + part.keys[head * width :]
        carry_expires = merged_expires + part.expires[head:]
    blobs.append(carry_keys)
    expires.extend(carry_expires)
    extras += found
    return b"".join(blobs), expires


def _merge(
    run: Sequence[OwnedPart], width: int, extras: list[tuple[bytes, int]]
) -> tuple[bytes, array[int]]:
    """The parts of ``run`` as one table, key by key; demoted supports go to ``extras``."""
    keys = [key for part in run for key in split_keys(part.keys, width)]
    expires = array("q")
    for part in run:
        expires.extend(part.expires)
    latest = dict(zip(keys, expires, strict=True))
    if len(latest) < len(keys):  # some VRP in two parts: the latest expiry stays
        latest = {}
        for key, expiry in zip(keys, expires, strict=True):
            add_support(latest, extras, key, expiry)
    order = sorted(latest, reverse=True)
    return b"".join(order), array("q", map(latest.__getitem__, order))
