"""The block-wise walk of `compute_delta` (`snapshot.packed.difference`) equals a plain set
difference for every block size."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snapshot import packed as packed_module
from snapshot.delta import compute_delta
from snapshot.packed import difference, join_sorted, split_keys
from snapshot.snapshot import Snapshot
from tests.snapshot.strategies import FEW, snapshots

# Three-octet keys from a tiny alphabet: long equal runs, inserts and removals at any offset.
keys = st.binary(min_size=3, max_size=3).map(lambda b: bytes(x % 3 for x in b))


@pytest.mark.parametrize("block", [1, 2, 3, 7, 256])
@FEW
@given(old=st.frozensets(keys, max_size=27), new=st.frozensets(keys, max_size=27))
def test_walk_equals_set_difference(
    block: int, old: frozenset[bytes], new: frozenset[bytes]
) -> None:
    saved = packed_module._BLOCK
    packed_module._BLOCK = block
    try:
        announce, withdraw = difference(
            join_sorted(old, descending=True), join_sorted(new, descending=True), 3
        )
    finally:
        packed_module._BLOCK = saved
    assert split_keys(announce, 3) == sorted(new - old, reverse=True)
    assert split_keys(withdraw, 3) == sorted(old - new)


@pytest.mark.parametrize("block", [1, 2, 5])
@FEW
@given(a=snapshots(), b=snapshots())
def test_small_blocks_give_the_same_delta(block: int, a: Snapshot, b: Snapshot) -> None:
    expected = compute_delta(a, b)
    saved = packed_module._BLOCK
    packed_module._BLOCK = block
    try:
        assert compute_delta(a, b) == expected
    finally:
        packed_module._BLOCK = saved
