"""`SourcePayload.snapshot_at` with some entries expired: the right keys, and no key as an object.

Splitting the global table into one bytes object per key held about 90 MB at once at every
rebuild after an expiry; the expired keys are now marked and the others copied out in runs.
"""

from __future__ import annotations

import tracemalloc
from array import array

from snapshot.packed import V4_KEY_SIZE, split_keys
from upstream.payload import SourcePayload

COUNT = 200_000


def table() -> SourcePayload:
    keys = [
        (i << 8).to_bytes(4, "big") + b"\x18\x18" + (64496).to_bytes(4, "big")
        for i in range(COUNT, 0, -1)
    ]
    # Expiries 100 .. 106 in runs (entries of one manifest expire together).
    expires = array("q", (100 + (i // 1000) % 7 for i in range(COUNT)))
    return SourcePayload(b"".join(keys), expires)


def test_the_keys_valid_at_a_time_are_kept_in_order() -> None:
    payload = table()
    keys = split_keys(payload.v4, V4_KEY_SIZE)
    for now in (99, 100, 103, 106):
        want = b"".join(k for k, e in zip(keys, payload.v4_expires, strict=True) if now < e)
        assert payload.snapshot_at(now).v4 == want
    assert payload.snapshot_at(50).v4 is payload.v4  # nothing expired: the same bytes


def test_expiry_takes_no_object_per_key() -> None:
    payload = table()
    tracemalloc.start()
    try:
        snapshot = payload.snapshot_at(100)  # a seventh of the keys expired, in 29 runs
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert snapshot.v4_count == COUNT - sum(1 for i in range(COUNT) if (i // 1000) % 7 == 0)
    # The kept runs and their join (twice the result) and a mark per key (27 MB when every key
    # became an object).
    assert peak < 2 * len(payload.v4) + 3 * COUNT, peak
