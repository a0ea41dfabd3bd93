"""Prefix text of the exchange format: RFC 5952, mapped IPv6 dotted, independent of `ipaddress`."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from persistence.exchange import encode, state_digest
from persistence.exchange_import import decode
from persistence.state import PersistedState
from snapshot.prefix_text import parse_prefix, v6_text
from tests.persistence.test_exchange import exchange_states
from tests.persistence.test_exchange_import import small_state

GROUP = st.sampled_from([0, 0, 0, 1, 0xFFFF]) | st.integers(0, 0xFFFF)


@st.composite
def addresses(draw: st.DrawFn) -> int:
    """IPv6 addresses with many zero groups (to exercise "::")."""
    address = 0
    for group in draw(st.lists(GROUP, min_size=8, max_size=8)):
        address = address << 16 | group
    return address


@settings(max_examples=2000, deadline=None)
@given(address=addresses() | st.integers(0, 2**128 - 1))
def test_the_spelling_is_rfc_5952_and_mapped_addresses_are_dotted(address: int) -> None:
    text = v6_text(address)
    if address >> 32 == 0xFFFF:
        assert text == f"::ffff:{ipaddress.IPv4Address(address & 0xFFFF_FFFF)}"
        assert v6_text(address, legacy_mapped=True) == "::ffff:" + ":".join(
            f"{address >> s & 0xFFFF:x}" for s in (16, 0)
        )
    else:  # ipaddress's text of other addresses is RFC 5952 on every version we support
        assert text == str(ipaddress.IPv6Address(address))
    assert parse_prefix(f"{text}/128") == (6, address, 128)


@pytest.mark.parametrize(
    ("address", "text", "legacy"),
    [
        (0xFFFF_C000_0201, "::ffff:192.0.2.1", "::ffff:c000:201"),
        (0xFFFF_0000_0000, "::ffff:0.0.0.0", "::ffff:0:0"),
        (0x1_FFFF_C000_0201, "::1:ffff:c000:201", "::1:ffff:c000:201"),  # not mapped
        (0xC000_0201, "::c000:201", "::c000:201"),  # IPv4-compatible: not dotted
        (0, "::", "::"),
        (1, "::1", "::1"),
        (0x2001_0DB8_0000_0000_0001_0000_0000_0001, "2001:db8::1:0:0:1", "2001:db8::1:0:0:1"),
        (0x2001_0DB8_0000_0001_0001_0001_0001_0001, "2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1"),
    ],
)
def test_known_spellings(address: int, text: str, legacy: str) -> None:
    assert v6_text(address) == text
    assert v6_text(address, legacy_mapped=True) == legacy


@pytest.mark.parametrize(
    "text",
    [
        "2001:0db8::/32",  # a leading zero
        "2001:DB8::/32",  # uppercase
        "2001:db8:0:0:0:0:0:0/32",  # zeros not compressed
        "2001:db8::0:1/128",  # not the longest run... and "::" for a shorter one
        "2001:db8:0:1:1:1:1::/128",  # "::" for one group
        "::ffff:c000:201/128",  # the legacy spelling of a mapped address
        "::ffff:192.0.2.1/129",  # too long
        "192.0.2.1/24",  # host bits
        "192.0.2.0/024",  # leading zero in the length
        "192.0.2.0",  # no length
        "192.0.2/24",
        "1.2.3.256/32",
        "١.2.3.4/32",  # a non-ASCII digit
    ],
)
def test_other_spellings_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        parse_prefix(text)


def test_the_legacy_spelling_is_read_only_when_asked() -> None:
    assert parse_prefix("::ffff:c000:201/128", legacy_mapped=True) == (6, 0xFFFF_C000_0201, 128)
    with pytest.raises(ValueError, match="canonically"):
        parse_prefix("::ffff:192.0.2.1/128", legacy_mapped=True)


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(state=exchange_states())
def test_the_digest_does_not_use_ipaddress_text(
    state: PersistedState, monkeypatch_text: None
) -> None:
    # The fixture makes every ipaddress text raise: the document is built without it.
    assert state_digest(state)
    assert decode(b"".join(encode(state)))


def test_the_document_does_not_use_ipaddress_text(monkeypatch_text: None) -> None:
    doc = b"".join(encode(small_state()))
    assert b'"::ffff:192.0.2.0/120"' in doc


@pytest.fixture
def monkeypatch_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every `ipaddress` address and network str() raises while the test runs."""

    def refuse(self: object) -> str:
        raise AssertionError("ipaddress text used")

    for cls in (
        ipaddress.IPv4Address,
        ipaddress.IPv6Address,
        ipaddress.IPv4Network,
        ipaddress.IPv6Network,
    ):
        monkeypatch.setattr(cls, "__str__", refuse)
