"""Bulk encoders: content, §11.2 order and version filtering, checked against simple models."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtr_protocol import (
    AspaPdu,
    CacheResponse,
    EndOfData,
    ErrorCode,
    ErrorReport,
    Ipv4Prefix,
    Ipv6Prefix,
    Pdu,
    PduType,
    RouterKeyPdu,
    Timers,
    decode,
    encode,
    encode_cache_reset,
    encode_delta_response,
    encode_error_report,
    encode_full_response,
    encode_serial_notify,
)
from snapshot import Aspa, Publisher, RouterKey, Serial, SessionIds, Snapshot, SnapshotBuilder
from tests.protocol.strategies import frame_chunks

SID = 0x4242
TIMERS = Timers(900, 300, 3600)


def decode_reply(chunks: list[bytes], version: int, serial: int) -> list[Pdu]:
    """Decode a reply and check its frame; returns the payload PDUs."""
    out = frame_chunks(chunks)
    assert all(not isinstance(item, tuple) for item in out), out
    pdus: list[Pdu] = [p for p in out if not isinstance(p, tuple)]
    assert pdus[0] == CacheResponse(version, SID)
    assert pdus[-1] == EndOfData(version, SID, serial, None if version == 0 else TIMERS)
    payload = pdus[1:-1]
    assert all(p.version == version for p in payload)
    return payload


def wire_order(pdu: Pdu) -> tuple[Any, ...]:
    """The 8210bis §11.2 sort key, written from the draft's text (independent of the encoder)."""
    if isinstance(pdu, Ipv4Prefix | Ipv6Prefix):
        if pdu.announce:  # §11.2.1: addr, mlen, plen, asn all descending
            return (pdu.TYPE, 0, -pdu.prefix, -pdu.max_length, -pdu.prefix_length, -pdu.asn)
        return (pdu.TYPE, 1, pdu.prefix, pdu.max_length, pdu.prefix_length, pdu.asn)
    if isinstance(pdu, RouterKeyPdu):  # §11.2.2: ski, spki length, spki, asn ascending
        return (pdu.TYPE, 0 if pdu.announce else 1, pdu.ski, len(pdu.spki), pdu.spki, pdu.asn)
    if isinstance(pdu, AspaPdu):  # §11.2.3: customer ascending
        return (pdu.TYPE, 0 if pdu.announce else 1, pdu.customer)
    raise AssertionError(f"not a payload PDU: {pdu!r}")


def assert_ordered(payload: list[Pdu]) -> None:
    keys = [wire_order(p) for p in payload]
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)  # total order: no duplicates


# A payload record, independent of the PDU classes: ("v4"|"v6", addr, plen, mlen, asn),
# ("rk", ski, asn, spki); ASPA as customer -> providers.
Record = tuple[Any, ...]


def content(snap: Snapshot, version: int) -> tuple[set[Record], dict[int, tuple[int, ...]]]:
    records: set[Record] = set()
    for vrp in snap.vrps():
        family = "v4" if vrp.is_ipv4 else "v6"
        net = vrp.prefix
        records.add((family, int(net.network_address), net.prefixlen, vrp.max_length, vrp.asn))
    if version >= 1:
        records.update(("rk", k.ski, k.asn, k.spki) for k in snap.router_keys)
    aspas = {a.customer: a.providers for a in snap.aspas} if version >= 2 else {}
    return records, aspas


def record_of(pdu: Pdu) -> Record | None:
    if isinstance(pdu, Ipv4Prefix | Ipv6Prefix):
        family = "v4" if isinstance(pdu, Ipv4Prefix) else "v6"
        return (family, pdu.prefix, pdu.prefix_length, pdu.max_length, pdu.asn)
    if isinstance(pdu, RouterKeyPdu):
        return ("rk", pdu.ski, pdu.asn, pdu.spki)
    return None


def apply(
    model: tuple[set[Record], dict[int, tuple[int, ...]]], payload: list[Pdu]
) -> tuple[set[Record], dict[int, tuple[int, ...]]]:
    """Apply a reply like a strict router would (Error 6 / Error 7 become assertion failures)."""
    records, aspas = set(model[0]), dict(model[1])
    seen_customers: set[int] = set()
    for pdu in payload:
        if isinstance(pdu, AspaPdu):
            assert pdu.customer not in seen_customers  # one ASPA PDU per customer (P10)
            seen_customers.add(pdu.customer)
            if pdu.announce:
                assert pdu.providers
                aspas[pdu.customer] = pdu.providers  # replace
            else:
                assert pdu.customer in aspas, "withdrawal of unknown ASPA"
                del aspas[pdu.customer]
            continue
        record = record_of(pdu)
        assert record is not None
        assert isinstance(pdu, Ipv4Prefix | Ipv6Prefix | RouterKeyPdu)
        if pdu.announce:
            assert record not in records, "duplicate announcement"
            records.add(record)
        else:
            assert record in records, "withdrawal of unknown record"
            records.remove(record)
    return records, aspas


# ------------------------------------------------------------------------------- strategies

V4_BASES = [0x0A00_0000, 0xC000_0200, 0xC633_6400, 0xFFFF_FF00]
V6_BASES = [0x2001_0DB8 << 96, 0x2001_0DB8_0001 << 80, 0xFE80 << 112]
ASNS = [0, 1, 64_496, 0xFFFF_FFFF]
SKIS = [bytes([i]) * 20 for i in (1, 2, 0xFF)]
SPKIS = [b"\x30", b"\x30\x01\x00", b"\x31"]


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    builder = SnapshotBuilder()
    for _ in range(draw(st.integers(0, 12))):
        plen = draw(st.integers(0, 32))
        mask = ~((1 << (32 - plen)) - 1) & 0xFFFF_FFFF
        mlen = draw(st.integers(plen, min(32, plen + 2)))
        builder.add_v4(
            draw(st.sampled_from(V4_BASES)) & mask, plen, mlen, draw(st.sampled_from(ASNS))
        )
    for _ in range(draw(st.integers(0, 8))):
        plen = draw(st.integers(0, 128))
        mask = ~((1 << (128 - plen)) - 1) & ((1 << 128) - 1)
        mlen = draw(st.integers(plen, min(128, plen + 2)))
        builder.add_v6(
            draw(st.sampled_from(V6_BASES)) & mask, plen, mlen, draw(st.sampled_from(ASNS))
        )
    for _ in range(draw(st.integers(0, 4))):
        builder.add_router_key(
            RouterKey(
                draw(st.sampled_from(SKIS)),
                draw(st.sampled_from(ASNS)),
                draw(st.sampled_from(SPKIS)),
            )
        )
    for _ in range(draw(st.integers(0, 4))):
        providers = draw(st.sets(st.sampled_from([0, 1, 2, 64_497, 0xFFFF_FFFF]), min_size=1))
        builder.add_aspa(Aspa(draw(st.sampled_from([1, 2, 64_496])), tuple(providers)))
    return builder.build()


# ------------------------------------------------------------------------------- full


def reference_full(snap: Snapshot, version: int) -> list[Pdu]:
    """Per-record PDUs of the snapshot, sorted with the independent §11.2 key."""
    pdus: list[Pdu] = []
    for vrp in snap.vrps():
        net = vrp.prefix
        cls = Ipv4Prefix if vrp.is_ipv4 else Ipv6Prefix
        pdus.append(
            cls(version, 1, net.prefixlen, vrp.max_length, int(net.network_address), vrp.asn)
        )
    if version >= 1:
        pdus += [RouterKeyPdu(version, 1, k.ski, k.asn, k.spki) for k in snap.router_keys]
    if version >= 2:
        pdus += [AspaPdu(2, 1, a.customer, a.providers) for a in snap.aspas]
    return sorted(pdus, key=wire_order)


@settings(max_examples=200, deadline=None)
@given(snap=snapshots(), version=st.integers(0, 2))
def test_full_response_matches_reference(snap: Snapshot, version: int) -> None:
    chunks = encode_full_response(snap, version, SID, Serial(77), TIMERS)
    payload = decode_reply(chunks, version, 77)
    expected = reference_full(snap, version)
    assert payload == expected
    assert_ordered(payload)
    # Byte-exact against one encode() per PDU.
    reference_bytes = (
        encode(CacheResponse(version, SID))
        + b"".join(encode(p) for p in expected)
        + encode(EndOfData(version, SID, 77, None if version == 0 else TIMERS))
    )
    assert b"".join(chunks) == reference_bytes
    assert apply((set(), {}), payload) == content(snap, version)


def _random_snapshot(seed: int, n4: int, n6: int) -> Snapshot:
    rnd = random.Random(seed)
    builder = SnapshotBuilder()
    for _ in range(n4):
        plen = rnd.randint(0, 32)
        addr = rnd.getrandbits(32) & ~((1 << (32 - plen)) - 1) & 0xFFFF_FFFF
        builder.add_v4(addr, plen, rnd.randint(plen, 32), rnd.getrandbits(32))
    for _ in range(n6):
        plen = rnd.randint(0, 128)
        addr = rnd.getrandbits(128) & ~((1 << (128 - plen)) - 1) & ((1 << 128) - 1)
        builder.add_v6(addr, plen, rnd.randint(plen, 128), rnd.getrandbits(32))
    for i in range(20):
        builder.add_router_key(RouterKey(rnd.randbytes(20), i, rnd.randbytes(rnd.randint(1, 99))))
    for i in range(1, 30):
        builder.add_aspa(Aspa(i * 7, tuple(rnd.sample(range(1, 1000), rnd.randint(1, 9)))))
    return builder.build()


@pytest.mark.parametrize("version", [0, 1, 2])
def test_full_response_large(version: int) -> None:
    snap = _random_snapshot(version, 5000, 2000)
    chunks = encode_full_response(snap, version, SID, Serial(1), TIMERS)
    assert len(chunks) <= 6  # a few large chunks, not one per PDU
    payload = decode_reply(chunks, version, 1)
    assert payload == reference_full(snap, version)
    types = {p.TYPE for p in payload}
    assert (
        types
        == {
            0: {PduType.IPV4_PREFIX, PduType.IPV6_PREFIX},
            1: {PduType.IPV4_PREFIX, PduType.IPV6_PREFIX, PduType.ROUTER_KEY},
            2: {PduType.IPV4_PREFIX, PduType.IPV6_PREFIX, PduType.ROUTER_KEY, PduType.ASPA},
        }[version]
    )


def test_version_filtering() -> None:
    snap = _random_snapshot(9, 3, 3)
    v0 = decode_reply(encode_full_response(snap, 0, SID, Serial(1), TIMERS), 0, 1)
    v1 = decode_reply(encode_full_response(snap, 1, SID, Serial(1), TIMERS), 1, 1)
    assert not any(isinstance(p, RouterKeyPdu | AspaPdu) for p in v0)  # v0: no router keys
    assert any(isinstance(p, RouterKeyPdu) for p in v1)
    assert not any(isinstance(p, AspaPdu) for p in v1)  # v1: no ASPA


def test_empty_snapshot() -> None:
    chunks = encode_full_response(Snapshot(), 2, SID, Serial(5), TIMERS)
    assert chunks == [encode(CacheResponse(2, SID)), encode(EndOfData(2, SID, 5, TIMERS))]


@pytest.mark.parametrize("version", [-1, 3])
def test_bad_version(version: int) -> None:
    with pytest.raises(ValueError, match="version"):
        encode_full_response(Snapshot(), version, SID, Serial(5), TIMERS)


# ------------------------------------------------------------------------------- delta


@settings(max_examples=200, deadline=None)
@given(old=snapshots(), new=snapshots(), version=st.integers(0, 2))
def test_delta_response_reproduces_new_snapshot(old: Snapshot, new: Snapshot, version: int) -> None:
    publisher = Publisher(SessionIds(1, 2, 3))
    first = publisher.publish(old)
    assert first is not None
    second = publisher.publish(new) or first
    delta = second.delta_since(first.serial)
    assert delta is not None
    chunks = encode_delta_response(delta, version, SID, second.serial, TIMERS)
    payload = decode_reply(chunks, version, second.serial.value)
    assert_ordered(payload)
    assert apply(content(old, version), payload) == content(new, version)


def test_delta_over_several_serials() -> None:
    snaps = [_random_snapshot(seed, 200, 100) for seed in range(4)]
    publisher = Publisher(SessionIds(1, 2, 3))
    published = [publisher.publish(s) for s in snaps]
    current = published[-1]
    assert current is not None
    for state, snap in zip(published, snaps, strict=True):
        assert state is not None
        delta = current.delta_since(state.serial)
        assert delta is not None
        for version in (0, 1, 2):
            payload = decode_reply(
                encode_delta_response(delta, version, SID, current.serial, TIMERS),
                version,
                current.serial.value,
            )
            assert_ordered(payload)
            assert apply(content(snap, version), payload) == content(snaps[-1], version)


def test_aspa_change_is_one_announce_and_withdraw_is_12_octets() -> None:
    old = Snapshot.build(aspas=[Aspa(10, (1, 2)), Aspa(20, (3,))])
    new = Snapshot.build(aspas=[Aspa(10, (1, 2, 5))])
    publisher = Publisher(SessionIds(1, 2, 3))
    a, b = publisher.publish(old), publisher.publish(new)
    assert a is not None
    assert b is not None
    delta = b.delta_since(a.serial)
    assert delta is not None
    chunks = encode_delta_response(delta, 2, SID, b.serial, TIMERS)
    assert decode_reply(chunks, 2, b.serial.value) == [
        AspaPdu(2, 1, 10, (1, 2, 5)),
        AspaPdu(2, 0, 20, ()),
    ]
    # fmt: off
    assert bytes([0x02, 0x0B, 0x00, 0x00,  0, 0, 0, 12,  0, 0, 0, 20]) in b"".join(chunks)
    # fmt: on


def test_empty_delta_is_cache_response_and_end_of_data() -> None:
    publisher = Publisher(SessionIds(1, 2, 3))
    state = publisher.publish(_random_snapshot(1, 10, 10))
    assert state is not None
    delta = state.delta_since(state.serial)
    assert delta is not None
    for version in (0, 1, 2):
        chunks = encode_delta_response(delta, version, SID, state.serial, TIMERS)
        assert decode_reply(chunks, version, state.serial.value) == []


# ------------------------------------------------------------------------------- helpers


def test_small_helpers() -> None:
    # fmt: off
    assert encode_cache_reset(0) == bytes([0x00, 0x08, 0x00, 0x00,  0, 0, 0, 8])
    assert encode_serial_notify(2, 0x1234, Serial(42)) == bytes(
        [0x02, 0x00, 0x12, 0x34,  0, 0, 0, 12,  0, 0, 0, 42])
    # fmt: on
    report = encode_error_report(1, ErrorCode.NO_DATA_AVAILABLE, b"", "No data")
    assert decode(report) == ErrorReport(1, 2, b"", "No data")
    with pytest.raises(ValueError, match="does not exist"):
        encode_error_report(0, ErrorCode.UNEXPECTED_PROTOCOL_VERSION)
    long = encode_error_report(2, ErrorCode.CORRUPT_DATA, bytes(1000), "x")
    assert decode(long) == ErrorReport(2, 0, bytes(256), "x")
    full = encode_error_report(2, ErrorCode.CORRUPT_DATA, bytes(1000), "x", max_encapsulated=None)
    assert decode(full) == ErrorReport(2, 0, bytes(1000), "x")
