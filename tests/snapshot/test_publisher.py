"""`SessionIds` and `Publisher` construction."""

from __future__ import annotations

import pytest

from snapshot.difflog import DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES
from snapshot.publisher import VERSIONS, Publisher, SessionIds
from snapshot.serial import Serial
from snapshot.snapshot import EMPTY


def test_session_id_per_version() -> None:
    ids = SessionIds(0x1234, 0, 0xFFFF)
    assert VERSIONS == (0, 1, 2)
    assert [ids.for_version(v) for v in VERSIONS] == [0x1234, 0, 0xFFFF]


@pytest.mark.parametrize("triple", [(1, 1, 2), (1, 2, 1), (2, 1, 1), (0, 0, 0), (7, 7, 7)])
def test_duplicate_session_ids_rejected(triple: tuple[int, int, int]) -> None:
    with pytest.raises(ValueError, match="distinct"):
        SessionIds(*triple)


@pytest.mark.parametrize("triple", [(-1, 1, 2), (1, 0x10000, 2), (1, 2, 2**32), (True, 2, 3)])
def test_out_of_range_session_ids_rejected(triple: tuple[int, int, int]) -> None:
    with pytest.raises(ValueError, match="session id"):
        SessionIds(*triple)


def test_from_random_distinct_for_every_base() -> None:
    per_version: list[set[int]] = [set(), set(), set()]
    for base in range(0x10000):
        ids = SessionIds.from_random(base.to_bytes(2, "big"))
        triple = (ids.v0, ids.v1, ids.v2)
        assert len(set(triple)) == 3, f"base {base:#06x} gives {triple}"
        assert all(0 <= t <= 0xFFFF for t in triple)
        for seen, value in zip(per_version, triple, strict=True):
            seen.add(value)
    # each version's id keeps all 16 bits of entropy: different draws, different sessions
    assert [len(seen) for seen in per_version] == [0x10000] * 3


def test_from_random_uses_the_first_two_octets() -> None:
    assert SessionIds.from_random(b"\x12\x34\xff\xee") == SessionIds.from_random(b"\x12\x34")
    assert SessionIds.from_random(b"\x12\x34") != SessionIds.from_random(b"\x12\x35")


def test_publisher_defaults() -> None:
    ids = SessionIds(1, 2, 3)
    publisher = Publisher(ids)
    assert publisher.current is None
    assert publisher.initial_serial == Serial(0)
    assert publisher.max_entries == DEFAULT_MAX_ENTRIES
    assert publisher.max_bytes == DEFAULT_MAX_BYTES
    state = publisher.publish(EMPTY)
    assert state is not None
    assert state.session_ids is ids
    assert state.difflog.max_entries == DEFAULT_MAX_ENTRIES
    assert state.difflog.max_bytes == DEFAULT_MAX_BYTES


def test_published_state_is_frozen() -> None:
    publisher = Publisher(SessionIds(1, 2, 3))
    state = publisher.publish(EMPTY)
    assert state is not None
    with pytest.raises(AttributeError):
        state.serial = Serial(9)  # type: ignore[misc]
