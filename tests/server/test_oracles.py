"""The test oracles themselves: the router model and the §8.1 order check reject what a strict
router would (so the end-to-end tests can fail)."""

from __future__ import annotations

import pytest

from rtr_protocol import AspaPdu, Ipv4Prefix, Ipv6Prefix, RouterKeyPdu
from tests.server.helpers import RouterState, assert_in_order, base_export, expected_state
from tests.server.rtr_client import PayloadPdu

A = Ipv4Prefix(1, 1, 24, 24, 0xC0000200, 64496)


def test_router_model_rejects_duplicates_and_unknown_withdrawals() -> None:
    state = RouterState().apply([A])
    with pytest.raises(AssertionError, match="duplicate"):
        state.copy().apply([A])
    with pytest.raises(AssertionError, match="unknown"):
        RouterState().apply([Ipv4Prefix(1, 0, 24, 24, 0xC0000200, 64496)])
    with pytest.raises(AssertionError, match="unknown ASPA"):
        RouterState().apply([AspaPdu(2, 0, 64500, ())])
    replaced = RouterState().apply([AspaPdu(2, 1, 64500, (1,)), AspaPdu(2, 1, 64500, (2,))])
    assert replaced.aspas == {64500: (2,)}


def test_expected_state_filters_by_version_and_expiry() -> None:
    doc = base_export()
    v0, v1, v2 = (expected_state(doc, v) for v in (0, 1, 2))
    assert v0.keys == set()
    assert v0.aspas == {}
    assert len(v1.keys) == 3  # the expired key is left out
    assert v1.aspas == {}
    assert v2.aspas[64500] == (64501, 64502, 64503)
    assert 64520 not in v2.aspas  # expired
    assert v0.prefixes == v1.prefixes == v2.prefixes
    assert len(v0.prefixes) == 15  # 17 entries, one duplicate, one expired


WRONG_ORDERS: dict[str, list[PayloadPdu]] = {
    "ipv6-before-ipv4": [Ipv6Prefix(1, 1, 32, 32, 1 << 100, 1), A],
    "ascending-announcements": [A, Ipv4Prefix(1, 1, 24, 24, 0xC0000300, 64496)],
    "max-length-ascending": [A, Ipv4Prefix(1, 1, 24, 25, 0xC0000200, 64496)],
    "withdraw-before-announce": [
        Ipv4Prefix(1, 0, 24, 24, 0xC0000300, 64496),
        A,
    ],
    "descending-withdrawals": [
        Ipv4Prefix(1, 0, 24, 24, 0xC0000300, 64496),
        Ipv4Prefix(1, 0, 24, 24, 0xC0000200, 64496),
    ],
    "aspa-before-key": [
        AspaPdu(2, 1, 1, (2,)),
        RouterKeyPdu(2, 1, bytes(20), 1, b"k"),
    ],
    "aspa-customers-descending": [AspaPdu(2, 1, 2, (3,)), AspaPdu(2, 1, 1, (3,))],
}


@pytest.mark.parametrize("case", list(WRONG_ORDERS))
def test_order_check_rejects(case: str) -> None:
    with pytest.raises(AssertionError, match="out of"):
        assert_in_order(WRONG_ORDERS[case])


def test_order_check_accepts_reversed_wrong_orders() -> None:
    for case in ("ascending-announcements", "descending-withdrawals", "aspa-before-key"):
        assert_in_order(list(reversed(WRONG_ORDERS[case])))
