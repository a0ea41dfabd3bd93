"""Wire numbers, per-version tables and timer validation."""

from __future__ import annotations

import pytest

from rtr_protocol import (
    CACHE_PDU_TYPES,
    ERROR_CODES_BY_VERSION,
    PDU_TYPES_BY_VERSION,
    ROUTER_PDU_TYPES,
    ErrorCode,
    PduType,
    Timers,
    error_code_valid,
    is_fatal,
    pdu_type_valid,
)


def test_pdu_type_numbers() -> None:
    assert {t.name: int(t) for t in PduType} == {
        "SERIAL_NOTIFY": 0,
        "SERIAL_QUERY": 1,
        "RESET_QUERY": 2,
        "CACHE_RESPONSE": 3,
        "IPV4_PREFIX": 4,
        "IPV6_PREFIX": 6,
        "END_OF_DATA": 7,
        "CACHE_RESET": 8,
        "ROUTER_KEY": 9,
        "ERROR_REPORT": 10,
        "ASPA": 11,
    }


def test_error_code_numbers() -> None:
    assert [c.name for c in sorted(ErrorCode)] == [
        "CORRUPT_DATA",
        "INTERNAL_ERROR",
        "NO_DATA_AVAILABLE",
        "INVALID_REQUEST",
        "UNSUPPORTED_PROTOCOL_VERSION",
        "UNSUPPORTED_PDU_TYPE",
        "WITHDRAWAL_OF_UNKNOWN_RECORD",
        "DUPLICATE_ANNOUNCEMENT",
        "UNEXPECTED_PROTOCOL_VERSION",
        "ASPA_PROVIDER_LIST_ERROR",
        "TRANSPORT_FAILURE",
        "ORDERING_ERROR",
        "CACHE_RESTART",
        "CACHE_SHUTDOWN",
    ]
    assert [int(c) for c in sorted(ErrorCode)] == list(range(14))


@pytest.mark.parametrize(("version", "highest"), [(0, 7), (1, 8), (2, 13)])
def test_error_codes_per_version(version: int, highest: int) -> None:
    assert {int(c) for c in ERROR_CODES_BY_VERSION[version]} == set(range(highest + 1))
    for code in range(20):
        assert error_code_valid(code, version) == (code <= highest)


def test_error_codes_unknown_version() -> None:
    assert not error_code_valid(0, 3)
    assert not pdu_type_valid(PduType.RESET_QUERY, 3)


def test_pdu_types_per_version() -> None:
    assert PduType.ROUTER_KEY not in PDU_TYPES_BY_VERSION[0]
    assert PduType.ASPA not in PDU_TYPES_BY_VERSION[0]
    assert PduType.ROUTER_KEY in PDU_TYPES_BY_VERSION[1]
    assert PduType.ASPA not in PDU_TYPES_BY_VERSION[1]
    assert PDU_TYPES_BY_VERSION[2] == frozenset(PduType)
    for version in (0, 1, 2):
        assert not pdu_type_valid(5, version)
        assert not pdu_type_valid(255, version)
        assert pdu_type_valid(PduType.ERROR_REPORT, version)


def test_senders() -> None:
    assert frozenset({1, 2, 10}) == ROUTER_PDU_TYPES
    assert frozenset({0, 3, 4, 6, 7, 8, 9, 11}) == CACHE_PDU_TYPES
    assert not CACHE_PDU_TYPES & ROUTER_PDU_TYPES


def test_fatal() -> None:
    for version in (0, 1):
        assert [c for c in ERROR_CODES_BY_VERSION[version] if not is_fatal(c, version)] == [
            ErrorCode.NO_DATA_AVAILABLE
        ]
    assert {c for c in ErrorCode if not is_fatal(c, 2)} == {
        ErrorCode.NO_DATA_AVAILABLE,
        ErrorCode.UNSUPPORTED_PROTOCOL_VERSION,
        ErrorCode.CACHE_RESTART,
    }
    assert is_fatal(99, 2)


def test_timers_defaults() -> None:
    assert Timers() == Timers(3600, 600, 7200)


@pytest.mark.parametrize(
    ("refresh", "retry", "expire"),
    [(1, 1, 600), (86_400, 7_200, 172_800), (599, 599, 600)],
)
def test_timers_bounds_ok(refresh: int, retry: int, expire: int) -> None:
    Timers(refresh, retry, expire)


@pytest.mark.parametrize(
    ("refresh", "retry", "expire", "message"),
    [
        (0, 600, 7200, "refresh"),
        (86_401, 600, 172_800, "refresh"),
        (3600, 0, 7200, "retry"),
        (3600, 7_201, 7200, "retry"),
        (300, 300, 599, "expire"),
        (3600, 600, 172_801, "expire"),
        (3600, 600, 3600, "larger than refresh"),
        (600, 600, 600, "larger than refresh"),
        (100, 7000, 7000, "larger than refresh"),
    ],
)
def test_timers_invalid(refresh: int, retry: int, expire: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Timers(refresh, retry, expire)


def test_timers_type() -> None:
    with pytest.raises(ValueError, match="int"):
        Timers(3600.0, 600, 7200)  # type: ignore[arg-type]
