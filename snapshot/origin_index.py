"""Finding the VRPs that cover a route: a snapshot's prepared index, or a search of its packed keys.

An `OriginIndex` is built once, from a snapshot's two packed key strings, by whoever makes the
snapshot (`Snapshot.prepare`, in the build thread before the snapshot is published); it is never
written afterwards, so any number of queries may read it at once. It holds one dict per family
from ``network << 8 | prefix_length`` to the VRPs there, so a lookup is at most 33 (IPv4) or
129 (IPv6) dict probes, fewer in practice (only lengths that occur in the table are probed).

`covering_in_packed` answers the same question without an index, by binary search of the packed
keys themselves (one search per distinct covering network): slower per query, but it needs no
build and writes nothing. It serves snapshots that were never prepared. Pure: standard library.
"""

from __future__ import annotations

from dataclasses import dataclass

from snapshot.packed import LAYOUTS, V4, V6, find

__all__ = ["Covering", "FamilyIndex", "OriginIndex", "covering_in_packed"]

#: The VRPs covering a route: (prefix length, ``max_length << 32 | asn``) pairs, in any order.
Covering = list[tuple[int, int]]

#: (network, prefix length) -> one packed ``max_length << 32 | asn`` or a tuple of several.
_Table = dict[int, int | tuple[int, ...]]


def _add(table: _Table, key: int, value: int) -> None:
    old = table.get(key)
    if old is None:
        table[key] = value
    elif isinstance(old, int):
        table[key] = (old, value)
    else:
        table[key] = (*old, value)


@dataclass(frozen=True, slots=True)
class FamilyIndex:
    """The VRPs of one address family, keyed by ``network << 8 | prefix_length``.

    ``packed`` is the key string it was built from (a later snapshot with the same string reuses
    the index). The table is filled by `build` and only read afterwards.
    """

    bits: int
    lengths: tuple[int, ...]  # prefix lengths present in the table, ascending
    table: _Table
    packed: bytes

    @classmethod
    def build(cls, packed: bytes, version: int) -> FamilyIndex:
        """Index the packed keys of IP ``version`` (4 or 6)."""
        table: _Table = {}
        if version == 4:
            for address, max_length, length, asn in V4.numbers.iter_unpack(packed):
                _add(table, address << 8 | length, max_length << 32 | asn)
        else:
            for high, low, max_length, length, asn in V6.numbers.iter_unpack(packed):
                _add(table, (high << 64 | low) << 8 | length, max_length << 32 | asn)
        lengths = tuple(sorted({key & 0xFF for key in table}))
        return cls(LAYOUTS[version].address_size * 8, lengths, table, packed)

    def covering(self, address: int, route_length: int) -> Covering:
        """The VRPs covering the route ``address``/``route_length`` (address as an integer)."""
        bits = self.bits
        table = self.table
        found: Covering = []
        for length in self.lengths:
            if length > route_length:
                break
            shift = bits - length
            hit = table.get((address >> shift << shift) << 8 | length)
            if hit is None:
                continue
            if isinstance(hit, int):
                found.append((length, hit))
            else:
                found.extend((length, value) for value in hit)
        return found


@dataclass(frozen=True, slots=True)
class OriginIndex:
    """The origin-validation index of one snapshot: one `FamilyIndex` per address family."""

    v4: FamilyIndex
    v6: FamilyIndex

    @classmethod
    def build(cls, v4: bytes, v6: bytes, like: OriginIndex | None = None) -> OriginIndex:
        """Index both families; a family whose keys equal ``like``'s reuses its index."""
        four = like.v4 if like is not None and like.v4.packed == v4 else FamilyIndex.build(v4, 4)
        six = like.v6 if like is not None and like.v6.packed == v6 else FamilyIndex.build(v6, 6)
        return cls(four, six)

    def family(self, version: int) -> FamilyIndex:
        """The index of IP ``version`` (4 or 6)."""
        return self.v4 if version == 4 else self.v6


def covering_in_packed(packed: bytes, version: int, address: int, route_length: int) -> Covering:
    """The VRPs of ``packed`` (descending keys of IP ``version``) covering the route, unindexed.

    A VRP covers the route when its prefix length is at most the route's and the route's
    address cut to that length is the VRP's network. Each distinct such network is looked up
    once by binary search; the keys with that address are adjacent (the address leads the key).
    """
    layout = LAYOUTS[version]
    width = layout.size
    size = layout.address_size
    bits = size * 8
    found: Covering = []
    previous = -1
    for length in range(route_length + 1):
        shift = bits - length
        network = address >> shift << shift
        if network == previous:
            continue  # the networks only grow with the length: a repeat follows its first
        previous = network
        probe = network.to_bytes(size, "big")
        at = find(packed, width, probe) * width
        while packed[at : at + size] == probe:
            vrp_length = packed[at + layout.prefix_length_offset]
            cut = bits - vrp_length
            if vrp_length <= route_length and address >> cut << cut == network:
                asn = int.from_bytes(packed[at + layout.asn_offset : at + width], "big")
                found.append((vrp_length, packed[at + layout.max_length_offset] << 32 | asn))
            at += width
    return found
