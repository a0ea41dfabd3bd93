"""The block-wise walk in `compute_delta` equals a plain set difference for every block size."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snapshot import delta as delta_module
from snapshot.delta import compute_delta
from snapshot.snapshot import Snapshot, join_sorted, split_keys
from tests.snapshot.strategies import FEW, snapshots

# Three-octet keys from a tiny alphabet: long equal runs, inserts and removals at any offset.
keys = st.binary(min_size=3, max_size=3).map(lambda b: bytes(x % 3 for x in b))


@pytest.mark.parametrize("block", [1, 2, 3, 7, 256])
@FEW
@given(old=st.frozensets(keys, max_size=27), new=st.frozensets(keys, max_size=27))
def test_walk_equals_set_difference(
    block: int, old: frozenset[bytes], new: frozenset[bytes]
) -> None:
    saved = delta_module._BLOCK
    delta_module._BLOCK = block
    try:
        announce, withdraw = delta_module._set_diff(
            join_sorted(old, descending=True), join_sorted(new, descending=True), 3
        )
    finally:
        delta_module._BLOCK = saved
    assert split_keys(announce, 3) == sorted(new - old, reverse=True)
    assert split_keys(withdraw, 3) == sorted(old - new)


@pytest.mark.parametrize("block", [1, 2, 5])
@FEW
@given(a=snapshots(), b=snapshots())
def test_small_blocks_give_the_same_delta(block: int, a: Snapshot, b: Snapshot) -> None:
    expected = compute_delta(a, b)
    saved = delta_module._BLOCK
    delta_module._BLOCK = block
    try:
        assert compute_delta(a, b) == expected
    finally:
        delta_module._BLOCK = saved
