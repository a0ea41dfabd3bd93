"""The packed key module: layouts round-trip, and every operation on sorted key strings agrees
with the naive computation on sorted lists and sets."""

from __future__ import annotations

import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from snapshot.model import Vrp, pack_v4, pack_v6
from snapshot.packed import (
    LAYOUTS,
    V4,
    V4_KEY_SIZE,
    V6,
    V6_KEY_SIZE,
    KeyLayout,
    difference,
    drop_marked,
    find,
    join_sorted,
    splice,
    split_keys,
)
from tests.snapshot.strategies import SETTINGS

# Keys over a tiny alphabet: many equal prefixes, neighbours and collisions.
WIDTH = 3
keys = st.binary(min_size=WIDTH, max_size=WIDTH).map(lambda b: bytes(x % 3 for x in b))
key_sets = st.frozensets(keys, max_size=27)
# Probes: a whole key, the start of one (an address), or nothing.
probes = st.binary(max_size=WIDTH).map(lambda b: bytes(x % 4 for x in b))

asns = st.integers(0, 2**32 - 1)
layouts = st.sampled_from([V4, V6])


def descending(keys: frozenset[bytes] | set[bytes]) -> bytes:
    return b"".join(sorted(keys, reverse=True))


def test_layouts() -> None:
    assert (V4_KEY_SIZE, V6_KEY_SIZE) == (10, 22) == (V4.size, V6.size)
    assert LAYOUTS == {4: V4, 6: V6}
    for layout, address_size in ((V4, 4), (V6, 16)):
        assert layout.fields.size == layout.numbers.size == layout.size
        assert layout.address_size == layout.max_length_offset == address_size
        assert layout.prefix_length_offset == address_size + 1
        assert layout.asn_offset == address_size + 2 == layout.size - 4


@SETTINGS
@given(
    layout=layouts,
    address=st.binary(min_size=16, max_size=16),
    max_length=st.integers(0, 255),
    length=st.integers(0, 255),
    asn=asns,
)
def test_pack_unpack_round_trip(
    layout: KeyLayout, address: bytes, max_length: int, length: int, asn: int
) -> None:
    address = address[: layout.address_size]
    key = layout.fields.pack(address, max_length, length, asn)
    assert layout.fields.unpack(key) == (address, max_length, length, asn)
    # The column offsets point where the struct puts the fields.
    assert key[: layout.address_size] == address
    assert key[layout.max_length_offset] == max_length
    assert key[layout.prefix_length_offset] == length
    assert key[layout.asn_offset :] == asn.to_bytes(4, "big")
    # The integer view reads the same octets.
    *number, max_again, length_again, asn_again = layout.numbers.unpack(key)
    value = number[0] if len(number) == 1 else number[0] << 64 | number[1]
    assert value == int.from_bytes(address, "big")
    assert (max_again, length_again, asn_again) == (max_length, length, asn)
    assert layout.numbers.pack(*number, max_length, length, asn) == key
    assert list(layout.fields.iter_unpack(key * 3)) == [(address, max_length, length, asn)] * 3


@SETTINGS
@given(
    address=st.integers(0, 2**128 - 1),
    length=st.integers(0, 128),
    extra=st.integers(0, 128),
    asn=asns,
)
def test_model_keys_round_trip(address: int, length: int, extra: int, asn: int) -> None:
    v6 = address >> (128 - length) << (128 - length) if length else 0
    max6 = min(128, length + extra)
    assert Vrp.from_key(pack_v6(v6, length, max6, asn)) == Vrp(
        ipaddress.IPv6Network((v6, length)), max6, asn
    )
    length4 = min(length, 32)
    v4 = (address & 0xFFFF_FFFF) >> (32 - length4) << (32 - length4) if length4 else 0
    max4 = min(32, length4 + extra)
    key = pack_v4(v4, length4, max4, asn)
    assert V4.fields.unpack(key) == (v4.to_bytes(4, "big"), max4, length4, asn)
    assert Vrp.from_key(key) == Vrp(ipaddress.IPv4Network((v4, length4)), max4, asn)


@SETTINGS
@given(held=key_sets)
def test_split_join_round_trip(held: frozenset[bytes]) -> None:
    packed = join_sorted(held, descending=True)
    assert split_keys(packed, WIDTH) == sorted(held, reverse=True)
    assert join_sorted(split_keys(packed, WIDTH), descending=False) == b"".join(sorted(held))


@SETTINGS
@given(held=key_sets, probe=probes)
def test_find_agrees_with_a_linear_search(held: frozenset[bytes], probe: bytes) -> None:
    ordered = sorted(held, reverse=True)
    expected = next((i for i, k in enumerate(ordered) if k[: len(probe)] <= probe), len(ordered))
    assert find(descending(held), WIDTH, probe) == expected


@SETTINGS
@given(held=key_sets, key=keys)
def test_find_locates_held_keys(held: frozenset[bytes], key: bytes) -> None:
    packed = descending(held)
    at = find(packed, WIDTH, key)
    assert (packed[at * WIDTH : (at + 1) * WIDTH] == key) == (key in held)


@SETTINGS
@given(held=key_sets, removed=key_sets, added=key_sets)
def test_splice_agrees_with_set_operations(
    held: frozenset[bytes], removed: frozenset[bytes], added: frozenset[bytes]
) -> None:
    # Removals of keys not held, additions of keys held and keys in both are all drawn.
    result = splice(descending(held), WIDTH, removed, added)
    assert split_keys(result, WIDTH) == sorted((held - removed) | added, reverse=True)


@SETTINGS
@given(held=key_sets, removed=key_sets, added=key_sets)
def test_splice_takes_any_iterables(
    held: frozenset[bytes], removed: frozenset[bytes], added: frozenset[bytes]
) -> None:
    packed = descending(held)
    as_sets = splice(packed, WIDTH, set(removed), dict.fromkeys(added))
    assert splice(packed, WIDTH, iter(sorted(removed)), list(added) * 2) == as_sets
    assert splice(packed, WIDTH, added=added) == descending(held | added)
    assert splice(packed, WIDTH, removed) == descending(held - removed)
    assert splice(packed, WIDTH) is packed


@SETTINGS
@given(old=key_sets, new=key_sets)
def test_difference_agrees_with_set_difference(
    old: frozenset[bytes], new: frozenset[bytes]
) -> None:
    added, removed = difference(descending(old), descending(new), WIDTH)
    assert split_keys(added, WIDTH) == sorted(new - old, reverse=True)
    assert split_keys(removed, WIDTH) == sorted(old - new)


@SETTINGS
@given(held=key_sets, data=st.data())
def test_drop_marked_agrees_with_a_filter(held: frozenset[bytes], data: st.DataObject) -> None:
    ordered = sorted(held, reverse=True)
    marks = data.draw(
        st.lists(st.sampled_from([0, 1]), min_size=len(ordered), max_size=len(ordered))
    )
    packed = b"".join(ordered)
    kept = drop_marked(packed, WIDTH, bytearray(marks))
    assert split_keys(kept, WIDTH) == [k for k, m in zip(ordered, marks, strict=True) if not m]
    if 1 not in marks:
        assert kept is packed
