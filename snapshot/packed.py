"""The packed VRP key: its layouts as `struct.Struct`s, and the operations on sorted key strings.

A packed key is the VRP's address, max length, prefix length and ASN, big-endian:

* IPv4, 10 octets: address(4) max_length(1) prefix_length(1) asn(4)  (`V4`)
* IPv6, 22 octets: address(16) max_length(1) prefix_length(1) asn(4) (`V6`)

Its byte order *is* the 8210bis §11.2 wire order: keys sorted descending are the announcement
order (address, max length, prefix length, ASN all descending), ascending the withdrawal order.
A table of one family is one byte string of such keys, descending, without duplicates (see
`snapshot.snapshot`). Every module that reads or writes keys takes the layout, the sizes and the
column offsets from here, and each operation on sorted key strings exists once, here: binary
search (`find`), `splice`, the `difference` of two tables, dropping marked keys. They work on
whole byte strings (slices, strided copies, `iter_unpack`); keys never become objects. The
functions take the key width, so they serve any fixed-width sorted keys. Pure: standard library
only.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

__all__ = [
    "LAYOUTS",
    "V4",
    "V4_KEY_SIZE",
    "V6",
    "V6_KEY_SIZE",
    "KeyLayout",
    "difference",
    "drop_marked",
    "find",
    "join_sorted",
    "splice",
    "split_keys",
]


@dataclass(frozen=True, slots=True)
class KeyLayout:
    """The packed key of one address family: its two `struct.Struct` views and column offsets."""

    #: 4 or 6.
    version: int
    #: (address as bytes, max_length, prefix_length, asn): the form rows and text are made of.
    fields: struct.Struct
    #: The same octets with the address as integers: IPv4 one, IPv6 its high and low 64 bits.
    numbers: struct.Struct
    #: Octets of one key (``fields.size``).
    size: int
    #: Octets of the address, which starts the key.
    address_size: int
    #: Offsets of the max length octet, the prefix length octet and the 4 ASN octets.
    max_length_offset: int
    prefix_length_offset: int
    asn_offset: int


def _layout(version: int, address: str, address_numbers: str) -> KeyLayout:
    """The layout whose address field is ``address`` (a struct format) or ``address_numbers``."""
    fields = struct.Struct(f">{address}BBI")
    numbers = struct.Struct(f">{address_numbers}BBI")
    if numbers.size != fields.size:  # pragma: no cover - a typo in the formats below
        raise TypeError("the two views of a key layout differ in size")
    # Each offset is the size of the fields before it.
    max_length, prefix_length, asn = (struct.calcsize(f">{address}{b}") for b in ("", "B", "BB"))
    return KeyLayout(
        version, fields, numbers, fields.size, max_length, max_length, prefix_length, asn
    )


V4: Final = _layout(4, "4s", "I")
V6: Final = _layout(6, "16s", "QQ")
#: The layouts by IP version.
LAYOUTS: Final = {4: V4, 6: V6}
V4_KEY_SIZE: Final = V4.size
V6_KEY_SIZE: Final = V6.size


def split_keys(packed: bytes, width: int) -> list[bytes]:
    """Cut a packed key string into its keys."""
    return [packed[i : i + width] for i in range(0, len(packed), width)]


def join_sorted(keys: Iterable[bytes], *, descending: bool) -> bytes:
    """Sort unique keys and pack them into one byte string."""
    return b"".join(sorted(keys, reverse=descending))


def find(packed: bytes, width: int, probe: bytes) -> int:
    """The index of the first key of descending ``packed`` whose first octets are <= ``probe``.

    ``probe`` is a whole key (then the result is the key's index if it is held, else where it
    would be inserted) or the start of one, e.g. an address (the first key at or below it).
    """
    lo, hi = 0, len(packed) // width
    n = len(probe)
    while lo < hi:
        mid = (lo + hi) // 2
        if packed[mid * width : mid * width + n] > probe:
            lo = mid + 1
        else:
            hi = mid
    return lo


def splice(
    packed: bytes, width: int, removed: Iterable[bytes] = (), added: Iterable[bytes] = ()
) -> bytes:
    """Descending ``packed`` without the ``removed`` keys and with the ``added`` ones, descending.

    Equal to ``join_sorted((set(keys) - set(removed)) | set(added), descending=True)``, but with
    one binary search per change and the unchanged runs copied as slices: for changes far fewer
    than the keys. Removing a key that is not held, or adding one that is, changes nothing.
    """
    adding = set(added)
    cuts: list[int] = []
    for key in set(removed) - adding:
        at = find(packed, width, key)
        if packed[at * width : (at + 1) * width] == key:
            cuts.append(at)
    cuts.sort()
    inserts: list[bytes] = []
    at_list: list[int] = []  # where each insert goes; non-decreasing
    for key in sorted(adding, reverse=True):
        at = find(packed, width, key)
        if packed[at * width : (at + 1) * width] != key:
            inserts.append(key)
            at_list.append(at)
    if not (cuts or inserts):
        return packed
    pieces: list[bytes] = []
    previous = i = j = 0
    while i < len(inserts) or j < len(cuts):
        if i < len(inserts) and (j == len(cuts) or at_list[i] <= cuts[j]):
            pieces += (packed[previous * width : at_list[i] * width], inserts[i])
            previous = at_list[i]
            i += 1
        else:
            pieces.append(packed[previous * width : cuts[j] * width])
            previous = cuts[j] + 1
            j += 1
    pieces.append(packed[previous * width :])
    return b"".join(pieces)


#: Keys compared at once by `difference` when it walks two tables.
_BLOCK = 256


def difference(old: bytes, new: bytes, width: int) -> tuple[bytes, bytes]:
    """(added descending, removed ascending): the keys of ``new`` not in ``old`` and vice versa.

    Both are descending packed key strings. Tables change little between serials, so both are
    walked comparing whole blocks of keys (a C-level memcmp), key by key only where a block
    differs.
    """
    if old == new:
        return b"", b""
    if not old:  # a first table: all of it is added, already descending
        return new, b""
    added: list[bytes] = []
    removed: list[bytes] = []
    i = j = 0
    n, m = len(old), len(new)
    block = _BLOCK * width
    while i < n and j < m:
        if old[i : i + block] == new[j : j + block]:
            i += block
            j += block
            continue
        for _ in range(_BLOCK):
            if i >= n or j >= m:
                break
            a = old[i : i + width]
            b = new[j : j + width]
            if a == b:
                i += width
                j += width
            elif a > b:
                # Descending order: ``a`` would have come before ``b`` in ``new``.
                removed.append(a)
                i += width
            else:
                added.append(b)
                j += width
    removed.extend(split_keys(old[i:], width))
    added.extend(split_keys(new[j:], width))
    removed.reverse()
    return b"".join(added), b"".join(removed)


def drop_marked(packed: bytes, width: int, marks: bytearray) -> bytes:
    """``packed`` without the keys whose ``marks`` octet is 1 (one octet per key, 0 or 1).

    The kept keys are copied out in runs; with nothing marked ``packed`` itself is returned.
    """
    count = len(packed) // width
    if 1 not in marks:
        return packed
    parts: list[bytes] = []
    keep = 0  # start of the current run of kept keys
    while keep < count:
        drop = marks.find(1, keep)
        if drop == -1:
            drop = count
        parts.append(packed[keep * width : drop * width])
        keep = marks.find(0, drop)
        if keep == -1:
            break
    return b"".join(parts)
