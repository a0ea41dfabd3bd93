"""Payload values: validation, ASPA normalisation, packed keys and their wire order."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snapshot.model import (
    MAX_ASPA_PROVIDERS,
    MAX_SPKI_LENGTH,
    Aspa,
    PayloadError,
    RouterKey,
    Vrp,
    check_asn,
    normalise_providers,
    pack_v4,
    pack_v6,
)
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE
from snapshot.snapshot import SnapshotBuilder
from tests.snapshot.strategies import (
    FEW,
    SETTINGS,
    SKIS,
    SMALL_ASNS,
    SPKIS,
    any_vrps,
    order_tuple,
    tie_heavy_vrps,
)

SKI = bytes(range(20))
SPKI = b"\x30\x59\x30\x13"

# ---------------------------------------------------------------- VRP validation


@pytest.mark.parametrize(
    "prefix", ["192.0.2.1/24", "11.0.0.0/7", "0.0.0.1/0", "2001:db8::1/32", "::1/127"]
)
def test_parse_rejects_host_bits(prefix: str) -> None:
    with pytest.raises(PayloadError) as info:
        Vrp.parse(prefix, None, 64496)
    assert info.value.field == "prefix"


@pytest.mark.parametrize(
    ("address", "prefix_length"),
    [(0xC000_0201, 24), (0x0A00_0001, 8), (1, 0), (0x8000_0000, 0), (0x0A00_0003, 31)],
)
def test_pack_v4_rejects_host_bits(address: int, prefix_length: int) -> None:
    with pytest.raises(PayloadError) as info:
        pack_v4(address, prefix_length, 32, 64496)
    assert info.value.field == "prefix"
    assert "host bits" in str(info.value)


@pytest.mark.parametrize(
    ("address", "prefix_length"),
    [((0x2001_0DB8 << 96) | 1, 32), (1, 0), (1 << 127, 0), (2, 126), ((1 << 128) - 1, 127)],
)
def test_pack_v6_rejects_host_bits(address: int, prefix_length: int) -> None:
    with pytest.raises(PayloadError) as info:
        pack_v6(address, prefix_length, 128, 64496)
    assert info.value.field == "prefix"


def test_host_bits_boundary_accepted() -> None:
    """The last network bit may be set; only bits after the prefix length are host bits."""
    assert len(pack_v4(0x0A00_0002, 31, 32, 1)) == V4_KEY_SIZE
    assert len(pack_v4(0xFFFF_FFFF, 32, 32, 1)) == V4_KEY_SIZE
    assert len(pack_v6(2, 127, 128, 1)) == V6_KEY_SIZE
    assert len(pack_v6((1 << 128) - 1, 128, 128, 1)) == V6_KEY_SIZE


@pytest.mark.parametrize(
    ("prefix", "max_length"),
    [
        ("192.0.2.0/24", 23),
        ("192.0.2.0/24", 33),
        ("192.0.2.0/24", -1),
        ("0.0.0.0/0", 255),
        ("2001:db8::/32", 31),
        ("2001:db8::/32", 129),
        ("::/0", 255),
        ("::/0", -1),
    ],
)
def test_max_length_out_of_range(prefix: str, max_length: int) -> None:
    with pytest.raises(PayloadError) as info:
        Vrp.parse(prefix, max_length, 64496)
    assert info.value.field == "max_length"


@pytest.mark.parametrize(
    ("prefix", "max_length"),
    [
        ("192.0.2.0/24", 24),
        ("192.0.2.0/24", 32),
        ("0.0.0.0/0", 0),
        ("::/0", 128),
        ("2001:db8::/32", 32),
        ("2001:db8::/32", 128),
    ],
)
def test_max_length_bounds_accepted(prefix: str, max_length: int) -> None:
    assert Vrp.parse(prefix, max_length, 64496).max_length == max_length


def test_max_length_defaults_to_prefix_length() -> None:
    assert Vrp.parse("192.0.2.0/24", None, 1).max_length == 24
    assert Vrp.parse("2001:db8::/48", None, 1).max_length == 48


@pytest.mark.parametrize("max_length", [True, 24.0, "24"])
def test_max_length_must_be_int(max_length: object) -> None:
    with pytest.raises(PayloadError):
        Vrp(ipaddress.IPv4Network("192.0.2.0/24"), max_length, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize(("prefix_length", "bits"), [(33, 32), (-1, 32), (129, 128), (-1, 128)])
def test_pack_rejects_bad_prefix_length(prefix_length: int, bits: int) -> None:
    pack = pack_v4 if bits == 32 else pack_v6
    with pytest.raises(PayloadError) as info:
        pack(0, prefix_length, bits, 1)
    assert info.value.field == "prefix_length"


@pytest.mark.parametrize(
    ("bits", "address"), [(32, 2**32), (32, -1), (32, 2**40), (128, 2**128), (128, -1)]
)
def test_pack_rejects_address_out_of_range(bits: int, address: int) -> None:
    """An address outside the family's range is a `PayloadError` (not an OverflowError).

    ``SnapshotBuilder.add_v4``/``add_v6`` take integers from parsers and are documented as
    validated; a caller that skips invalid records by catching `PayloadError` must not crash.
    """
    pack = pack_v4 if bits == 32 else pack_v6
    with pytest.raises(PayloadError):
        pack(address, bits, bits, 1)
    builder = SnapshotBuilder()
    add = builder.add_v4 if bits == 32 else builder.add_v6
    with pytest.raises(PayloadError):
        add(address, bits, bits, 1)
    assert len(builder) == 0


@pytest.mark.parametrize("asn", [-1, 2**32, 2**40, True, False, "1", 1.0, None])
def test_asn_out_of_range_rejected(asn: object) -> None:
    with pytest.raises(PayloadError) as info:
        check_asn(asn)  # type: ignore[arg-type]
    assert info.value.field == "asn"
    with pytest.raises(PayloadError):
        Vrp(ipaddress.IPv4Network("192.0.2.0/24"), 24, asn)  # type: ignore[arg-type]
    with pytest.raises(PayloadError):
        pack_v6(0, 0, 0, asn)  # type: ignore[arg-type]
    with pytest.raises(PayloadError):
        RouterKey(SKI, asn, SPKI)  # type: ignore[arg-type]
    with pytest.raises(PayloadError):
        Aspa(asn, (1,))  # type: ignore[arg-type]
    with pytest.raises(PayloadError):
        Aspa(1, (asn,))  # type: ignore[arg-type]


@pytest.mark.parametrize("asn", [0, 1, 64496, 2**32 - 1])
def test_asn_bounds_accepted(asn: int) -> None:
    assert check_asn(asn) == asn
    assert Vrp.parse("192.0.2.0/24", 24, asn).asn == asn
    assert RouterKey(SKI, asn, SPKI).asn == asn


def test_payload_error_names_field_value_and_rule() -> None:
    with pytest.raises(PayloadError) as info:
        Vrp.parse("192.0.2.0/24", 23, 1)
    err = info.value
    assert isinstance(err, ValueError)
    assert (err.field, err.value) == ("max_length", 23)
    assert "24..32" in err.reason
    assert str(err).startswith("max_length=23: ")


def test_parse_rejects_garbage_prefix() -> None:
    with pytest.raises(PayloadError):
        Vrp.parse("not a prefix", None, 1)
    with pytest.raises(PayloadError):
        Vrp.parse("192.0.2.0/33", None, 1)


# ---------------------------------------------------------------- VRP keys


@SETTINGS
@given(any_vrps())
def test_vrp_key_round_trip(vrp: Vrp) -> None:
    key = vrp.key()
    assert len(key) == (V4_KEY_SIZE if vrp.is_ipv4 else V6_KEY_SIZE)
    assert Vrp.from_key(key) == vrp
    net = vrp.prefix
    pack = pack_v4 if vrp.is_ipv4 else pack_v6
    assert pack(int(net.network_address), net.prefixlen, vrp.max_length, vrp.asn) == key


def test_vrp_key_layout() -> None:
    """address(4) max_length(1) prefix_length(1) asn(4), big-endian."""
    vrp = Vrp.parse("192.0.2.0/24", 28, 64496)
    assert vrp.key() == bytes([192, 0, 2, 0, 28, 24, 0x00, 0x00, 0xFB, 0xF0])
    v6 = Vrp.parse("2001:db8::/32", 48, 0x01020304)
    assert v6.key() == bytes.fromhex("20010db8" + "00" * 12) + bytes([48, 32, 1, 2, 3, 4])


@pytest.mark.parametrize("length", [0, 9, 11, 21, 23])
def test_from_key_rejects_wrong_width(length: int) -> None:
    with pytest.raises(PayloadError):
        Vrp.from_key(bytes(length))


@FEW
@given(st.sampled_from([4, 6]).flatmap(lambda v: st.lists(tie_heavy_vrps(v), max_size=16)))
def test_key_order_is_announcement_order(vrps: list[Vrp]) -> None:
    """Sorting packed keys descending = 8210bis §11.2 order on (address, max, prefix, asn)."""
    by_key = sorted((v.key() for v in vrps), reverse=True)
    by_fields = [v.key() for v in sorted(vrps, key=order_tuple, reverse=True)]
    assert by_key == by_fields
    # and ascending is the withdrawal order
    assert sorted(v.key() for v in vrps) == [v.key() for v in sorted(vrps, key=order_tuple)]


def test_key_order_examples() -> None:
    """Hand-picked pairs where byte order would differ from a naive field order."""

    def ann(texts: list[tuple[str, int, int]]) -> list[str]:
        vrps = [Vrp.parse(p, m, a) for p, m, a in texts]
        return [str(Vrp.from_key(k)) for k in sorted((v.key() for v in vrps), reverse=True)]

    # the address dominates: 10.0.1.0/24 > 10.0.0.0/8 regardless of lengths
    assert ann([("10.0.0.0/8", 32, 9), ("10.0.1.0/24", 24, 1)]) == [
        "10.0.1.0/24-24 AS1",
        "10.0.0.0/8-32 AS9",
    ]
    # same address: max length before prefix length
    assert ann([("10.0.0.0/16", 24, 1), ("10.0.0.0/8", 32, 1), ("10.0.0.0/16", 16, 1)]) == [
        "10.0.0.0/8-32 AS1",
        "10.0.0.0/16-24 AS1",
        "10.0.0.0/16-16 AS1",
    ]
    # same address and max length: prefix length descending, then ASN descending (AS0 last)
    assert ann([("10.0.0.0/8", 24, 0), ("10.0.0.0/16", 24, 5), ("10.0.0.0/8", 24, 256)]) == [
        "10.0.0.0/16-24 AS5",
        "10.0.0.0/8-24 AS256",
        "10.0.0.0/8-24 AS0",
    ]
    # addresses compare as big integers, not little-endian
    assert ann([("1.0.0.0/8", 8, 1), ("0.0.0.2/32", 32, 1)]) == [
        "1.0.0.0/8-8 AS1",
        "0.0.0.2/32-32 AS1",
    ]
    # ASN compared as a 32-bit big-endian integer
    assert ann([("10.0.0.0/8", 8, 256), ("10.0.0.0/8", 8, 255)]) == [
        "10.0.0.0/8-8 AS256",
        "10.0.0.0/8-8 AS255",
    ]


# ---------------------------------------------------------------- ASPA


def test_aspa_customer_zero_rejected() -> None:
    with pytest.raises(PayloadError) as info:
        Aspa(0, (1,))
    assert info.value.field == "customer"


def test_aspa_empty_providers_rejected() -> None:
    with pytest.raises(PayloadError) as info:
        Aspa(1, ())
    assert info.value.field == "providers"


@pytest.mark.parametrize("providers", ["12", b"\x01", 5, None])
def test_aspa_providers_must_be_a_list(providers: object) -> None:
    with pytest.raises(PayloadError):
        normalise_providers(providers)
    with pytest.raises(PayloadError):
        Aspa(1, providers)  # type: ignore[arg-type]


def test_aspa_too_many_providers_rejected() -> None:
    assert len(Aspa(1, tuple(range(1, MAX_ASPA_PROVIDERS + 1))).providers) == MAX_ASPA_PROVIDERS
    with pytest.raises(PayloadError):
        Aspa(1, tuple(range(1, MAX_ASPA_PROVIDERS + 2)))
    # AS0 is dropped before the count is checked
    assert len(Aspa(1, tuple(range(MAX_ASPA_PROVIDERS + 1))).providers) == MAX_ASPA_PROVIDERS


@pytest.mark.parametrize(
    ("given_", "expected"),
    [
        ((3, 1, 2), (1, 2, 3)),
        ((5, 5, 5), (5,)),
        ((2**32 - 1, 7, 7, 2**32 - 1), (7, 2**32 - 1)),
        ((0, 65000), (65000,)),
        ((65000, 0, 0), (65000,)),
        ((0,), (0,)),
        ((0, 0), (0,)),
    ],
)
def test_aspa_normalisation(given_: tuple[int, ...], expected: tuple[int, ...]) -> None:
    assert Aspa(64496, given_).providers == expected
    assert normalise_providers(given_) == expected


def test_aspa_accepts_any_iterable_and_normalises_to_tuple() -> None:
    aspa = Aspa(1, [3, 2])  # type: ignore[arg-type]
    assert aspa.providers == (2, 3)
    assert type(aspa.providers) is tuple
    assert Aspa(1, iter((2, 0))).providers == (2,)  # type: ignore[arg-type]


def test_aspa_equality_after_normalisation() -> None:
    assert Aspa(1, (3, 2, 0)) == Aspa(1, (2, 3))
    assert hash(Aspa(1, (3, 2, 0))) == hash(Aspa(1, (2, 3)))
    assert Aspa(1, (2,)) != Aspa(2, (2,))


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ((1, 2), (2, 3), (1, 2, 3)),
        ((0,), (5,), (5,)),
        ((5,), (0,), (5,)),
        ((0,), (0,), (0,)),
        ((7,), (7,), (7,)),
    ],
)
def test_aspa_merged(a: tuple[int, ...], b: tuple[int, ...], expected: tuple[int, ...]) -> None:
    assert Aspa(9, a).merged(Aspa(9, b)) == Aspa(9, expected)
    assert Aspa(9, b).merged(Aspa(9, a)).providers == expected


def test_aspa_merged_other_customer_rejected() -> None:
    with pytest.raises(ValueError, match="same customer"):
        Aspa(1, (2,)).merged(Aspa(2, (2,)))


# ---------------------------------------------------------------- router keys


@pytest.mark.parametrize("ski", [b"", bytes(19), bytes(21), bytearray(20), "a" * 20])
def test_router_key_ski_must_be_20_octets(ski: object) -> None:
    with pytest.raises(PayloadError) as info:
        RouterKey(ski, 1, SPKI)  # type: ignore[arg-type]
    assert info.value.field == "ski"


@pytest.mark.parametrize("spki", [b"", "x", None])
def test_router_key_spki_must_not_be_empty(spki: object) -> None:
    with pytest.raises(PayloadError) as info:
        RouterKey(SKI, 1, spki)  # type: ignore[arg-type]
    assert info.value.field == "spki"


def test_router_key_spki_length_cap() -> None:
    assert RouterKey(SKI, 1, bytes(MAX_SPKI_LENGTH)).spki == bytes(MAX_SPKI_LENGTH)
    with pytest.raises(PayloadError):
        RouterKey(SKI, 1, bytes(MAX_SPKI_LENGTH + 1))


def test_router_key_sort_key_examples() -> None:
    """SKI first; then SPKI *length* before SPKI bytes; ASN last."""
    short_high = RouterKey(SKI, 1, b"\xff")
    long_low = RouterKey(SKI, 1, b"\x00\x00")
    assert short_high.sort_key() < long_low.sort_key()  # plain bytes order would disagree
    low_ski = RouterKey(bytes(20), 2**32 - 1, b"\xff" * 50)
    assert low_ski.sort_key() < short_high.sort_key()
    assert RouterKey(SKI, 1, b"\x01").sort_key() < RouterKey(SKI, 0, b"\x02").sort_key()
    assert RouterKey(SKI, 255, b"\x01").sort_key() < RouterKey(SKI, 256, b"\x01").sort_key()


@FEW
@given(
    st.lists(
        st.builds(
            RouterKey,
            st.sampled_from(SKIS) | st.binary(min_size=20, max_size=20),
            st.sampled_from(SMALL_ASNS) | st.integers(0, 2**32 - 1),
            st.sampled_from(SPKIS) | st.binary(min_size=1, max_size=40),
        ),
        max_size=8,
    )
)
def test_router_key_sort_key_order(keys: list[RouterKey]) -> None:
    by_sort_key = sorted(keys, key=RouterKey.sort_key)
    by_fields = sorted(keys, key=lambda k: (k.ski, len(k.spki), k.spki, k.asn))
    assert [k.sort_key() for k in by_sort_key] == [k.sort_key() for k in by_fields]
    # the sort key is injective: equal keys iff equal records
    assert len({k.sort_key() for k in keys}) == len(set(keys))


def test_str_forms() -> None:
    assert str(Vrp.parse("192.0.2.0/24", 28, 64496)) == "192.0.2.0/24-28 AS64496"
    assert str(Aspa(5, (3, 0, 2))) == "AS5 -> AS2, AS3"
    assert str(RouterKey(b"\xab" * 20, 7, SPKI)) == f"SKI {'AB' * 20} AS7"
