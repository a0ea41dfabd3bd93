"""RFC 1982 serial arithmetic (SERIAL_BITS = 32) and session id checks, clause by clause."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snapshot.serial import Serial, check_session_id
from tests.snapshot.strategies import SETTINGS

TOP = 2**32 - 1
HALF = 2**31

EDGES = [0, 1, HALF - 2, HALF - 1, HALF, HALF + 1, TOP - 1, TOP]
serial_values = st.sampled_from(EDGES) | st.integers(0, TOP)


def reference_lt(a: int, b: int) -> bool:
    """The spec's one-liner (rtr-spec.md §5.3)."""
    d = (b - a) & 0xFFFFFFFF
    return d != 0 and d < 0x80000000


# ---------------------------------------------------------------- construction


@pytest.mark.parametrize("value", [-1, 2**32, 2**40, True, False, 1.0, "1", None])
def test_invalid_values_rejected(value: object) -> None:
    with pytest.raises(ValueError, match="outside"):
        Serial(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, 1, HALF, TOP])
def test_valid_values(value: int) -> None:
    s = Serial(value)
    assert s.value == value
    assert int(s) == value
    assert str(s) == str(value)
    assert s == Serial(value)
    assert hash(s) == hash(Serial(value))


def test_no_plain_ordering_operators() -> None:
    """Serials must be compared with RFC 1982 rules, never with ``<`` (stayrtr's bug)."""
    a: Any = Serial(1)
    with pytest.raises(TypeError):
        _ = a < Serial(2)
    with pytest.raises(TypeError):
        _ = a + 1


# ---------------------------------------------------------------- addition (§3.1)


@pytest.mark.parametrize(
    ("start", "n", "expected"),
    [
        (TOP, 1, 0),
        (TOP - 1, 2, 0),
        (TOP, HALF - 1, HALF - 2),
        (0, HALF - 1, HALF - 1),
        (HALF, HALF - 1, TOP),
        (HALF + 1, HALF - 1, 0),
        (5, 0, 5),
    ],
)
def test_add_wraps(start: int, n: int, expected: int) -> None:
    assert Serial(start).add(n) == Serial(expected)


def test_add_defaults_to_one() -> None:
    assert Serial(TOP).add() == Serial(0)
    assert Serial(41).add() == Serial(42)


@pytest.mark.parametrize("n", [HALF, HALF + 1, 2**32, -1])
def test_add_outside_defined_range_raises(n: int) -> None:
    with pytest.raises(ValueError, match="undefined"):
        Serial(0).add(n)


@SETTINGS
@given(serial_values, st.integers(0, HALF - 1))
def test_add_properties(start: int, n: int) -> None:
    s = Serial(start)
    t = s.add(n)
    assert t.value == (start + n) % 2**32
    assert s.distance_to(t) == n
    if n:
        assert s.precedes(t)
        assert s.compare(t) == -1
        assert t.compare(s) == 1
        assert t.distance_to(s) is None


# ---------------------------------------------------------------- comparison (§3.2)


@pytest.mark.parametrize(
    ("a", "b"),
    [(0, HALF), (HALF, 0), (1, HALF + 1), (HALF - 1, TOP), (TOP, HALF - 1), (HALF + 5, 5)],
)
def test_distance_exactly_half_is_undefined(a: int, b: int) -> None:
    assert Serial(a).compare(Serial(b)) is None
    assert Serial(b).compare(Serial(a)) is None
    assert not Serial(a).precedes(Serial(b))
    assert not Serial(b).precedes(Serial(a))
    assert Serial(a).distance_to(Serial(b)) is None
    assert Serial(b).distance_to(Serial(a)) is None


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (TOP, 0),  # wrap-around: 2^32-1 precedes 0
        (TOP - 5, 3),
        (0, HALF - 1),  # largest forward step from 0
        (HALF - 1, HALF),
        (HALF, TOP),
        (HALF + 1, 0),  # 0 is 2^31-1 after 2^31+1
        (HALF + 1, HALF + 2),
        (1, HALF),
        (TOP, HALF - 2),
    ],
)
def test_precedes(before: int, after: int) -> None:
    a, b = Serial(before), Serial(after)
    assert a.precedes(b)
    assert not b.precedes(a)
    assert a.compare(b) == -1
    assert b.compare(a) == 1


def test_equal_compares_zero() -> None:
    for v in EDGES:
        assert Serial(v).compare(Serial(v)) == 0
        assert not Serial(v).precedes(Serial(v))
        assert Serial(v).distance_to(Serial(v)) == 0


@SETTINGS
@given(serial_values, serial_values)
def test_compare_matches_reference(a: int, b: int) -> None:
    result = Serial(a).compare(Serial(b))
    if a == b:
        assert result == 0
    elif reference_lt(a, b):
        assert result == -1
    elif reference_lt(b, a):
        assert result == 1
    else:
        assert result is None
        assert (b - a) % 2**32 == HALF
    # antisymmetry
    reverse = Serial(b).compare(Serial(a))
    assert reverse == (None if result is None else -result)
    assert Serial(a).precedes(Serial(b)) == reference_lt(a, b)


# ---------------------------------------------------------------- distance


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (TOP, 0, 1),
        (TOP - 1, 1, 3),
        (0, HALF - 1, HALF - 1),
        (HALF + 1, 0, HALF - 1),
        (7, 7, 0),
        (0, TOP, None),  # TOP precedes 0
        (0, HALF, None),
        (1, 0, None),
    ],
)
def test_distance_to(a: int, b: int, expected: int | None) -> None:
    assert Serial(a).distance_to(Serial(b)) == expected


@SETTINGS
@given(serial_values, serial_values)
def test_distance_to_inverts_add(a: int, b: int) -> None:
    d = Serial(a).distance_to(Serial(b))
    if d is None:
        assert a != b
        assert not reference_lt(a, b)
    else:
        assert 0 <= d < HALF
        assert Serial(a).add(d) == Serial(b)


# ---------------------------------------------------------------- session ids


@pytest.mark.parametrize("value", [0, 1, 0x1234, 0xFFFF])
def test_session_id_valid(value: int) -> None:
    assert check_session_id(value) == value


@pytest.mark.parametrize("value", [-1, 0x10000, 2**32, True, "1", 1.0, None])
def test_session_id_invalid(value: object) -> None:
    with pytest.raises(ValueError, match="session id"):
        check_session_id(value)  # type: ignore[arg-type]
