"""`SessionIds`, `Publisher` construction, and a `Continuation` taken up by the first publish."""

from __future__ import annotations

import pytest

from snapshot.difflog import DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES
from snapshot.model import Vrp
from snapshot.publisher import VERSIONS, Continuation, Publisher, SessionIds
from snapshot.serial import Serial
from snapshot.snapshot import EMPTY, Snapshot


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


def _snap(asn: int) -> Snapshot:
    return Snapshot.build(vrps=[Vrp.parse("192.0.2.0/24", 24, asn)])


def test_a_continuation_is_taken_up_for_the_same_content_only() -> None:
    old = Continuation(SessionIds(7, 8, 9), Serial(41), _snap(64496).digest())
    same = Publisher(SessionIds(1, 2, 3), continuation=old)
    first = same.publish(_snap(64496))
    assert first is not None
    assert (first.session_ids, first.serial, same.continued) == (old.session_ids, Serial(41), True)
    assert same.continuation is None
    second = same.publish(_snap(64497))  # later publishes go on in the continued session
    assert second is not None
    assert (second.session_ids, second.serial) == (old.session_ids, Serial(42))
    assert second.delta_since(Serial(41)) is not None

    other = Publisher(SessionIds(1, 2, 3), continuation=old)
    state = other.publish(_snap(64497))
    assert state is not None
    assert (state.session_ids, state.serial, other.continued) == (
        SessionIds(1, 2, 3),
        Serial(0),
        False,
    )
    again = other.publish(_snap(64496))  # the old content later: no continuation any more
    assert again is not None
    assert again.session_ids == SessionIds(1, 2, 3)


def test_a_continuation_needs_other_fresh_ids() -> None:
    old = Continuation(SessionIds(7, 8, 9), Serial(41), _snap(64496).digest())
    with pytest.raises(ValueError, match="differ from the continued"):
        Publisher(SessionIds(1, 9, 3), continuation=old)
