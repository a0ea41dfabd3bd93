"""Golden wire bytes for every PDU type in every version, decode errors, encode refusals."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from rtr_protocol import (
    AspaPdu,
    CacheReset,
    CacheResponse,
    EndOfData,
    ErrorCode,
    ErrorReport,
    Ipv4Prefix,
    Ipv6Prefix,
    Pdu,
    ResetQuery,
    RouterKeyPdu,
    RtrProtocolError,
    SerialNotify,
    SerialQuery,
    Timers,
    decode,
    encode,
)
from tests.protocol.strategies import pdus

SID = 0x1234
AS64496, AS64497, AS64498 = 0xFBF0, 0xFBF1, 0xFBF2
SKI = bytes(range(1, 21))
T = Timers()  # 3600 / 600 / 7200

# Each golden PDU in 4-octet rows, as on the wire (big-endian). Vectors marked "digest" are
# the ones of rtr-spec.md §10.
# fmt: off
GOLDEN: list[tuple[Pdu, bytes]] = [
    # --- Serial Notify (0)
    (SerialNotify(0, SID, 42), bytes([0x00, 0x00, 0x12, 0x34,  0, 0, 0, 12,  0, 0, 0, 42])),
    # digest
    (SerialNotify(1, SID, 42), bytes([0x01, 0x00, 0x12, 0x34,  0, 0, 0, 12,  0, 0, 0, 42])),
    (SerialNotify(2, 0xFFFF, 0xFFFF_FFFF),
     bytes([0x02, 0x00, 0xFF, 0xFF,  0, 0, 0, 12,  0xFF, 0xFF, 0xFF, 0xFF])),
    # --- Serial Query (1)
    (SerialQuery(0, SID, 42), bytes([0x00, 0x01, 0x12, 0x34,  0, 0, 0, 12,  0, 0, 0, 42])),
    # digest
    (SerialQuery(1, SID, 42), bytes([0x01, 0x01, 0x12, 0x34,  0, 0, 0, 12,  0, 0, 0, 42])),
    (SerialQuery(2, 0, 0x0102_0304), bytes([0x02, 0x01, 0x00, 0x00,  0, 0, 0, 12,  1, 2, 3, 4])),
    # --- Reset Query (2), digest
    (ResetQuery(0), bytes([0x00, 0x02, 0x00, 0x00,  0, 0, 0, 8])),
    (ResetQuery(1), bytes([0x01, 0x02, 0x00, 0x00,  0, 0, 0, 8])),
    (ResetQuery(2), bytes([0x02, 0x02, 0x00, 0x00,  0, 0, 0, 8])),
    # --- Cache Response (3)
    (CacheResponse(0, 0xBEEF), bytes([0x00, 0x03, 0xBE, 0xEF,  0, 0, 0, 8])),
    (CacheResponse(1, SID), bytes([0x01, 0x03, 0x12, 0x34,  0, 0, 0, 8])),  # digest
    (CacheResponse(2, 0), bytes([0x02, 0x03, 0x00, 0x00,  0, 0, 0, 8])),
    # --- IPv4 Prefix (4)
    (Ipv4Prefix(1, 1, 24, 24, 0xC000_0200, AS64496),  # digest: 192.0.2.0/24-24 AS64496
     bytes([0x01, 0x04, 0x00, 0x00,  0, 0, 0, 20,  0x01, 24, 24, 0,  192, 0, 2, 0,
            0x00, 0x00, 0xFB, 0xF0])),
    (Ipv4Prefix(1, 0, 24, 24, 0xC000_0200, AS64496),  # digest: same, withdraw
     bytes([0x01, 0x04, 0x00, 0x00,  0, 0, 0, 20,  0x00, 24, 24, 0,  192, 0, 2, 0,
            0x00, 0x00, 0xFB, 0xF0])),
    (Ipv4Prefix(0, 1, 8, 24, 0x0A00_0000, 65_536),  # 10.0.0.0/8-24 AS65536
     bytes([0x00, 0x04, 0x00, 0x00,  0, 0, 0, 20,  0x01, 8, 24, 0,  10, 0, 0, 0,
            0x00, 0x01, 0x00, 0x00])),
    (Ipv4Prefix(2, 0, 0, 0, 0, 0),  # 0.0.0.0/0-0 AS0, withdraw
     bytes([0x02, 0x04, 0x00, 0x00,  0, 0, 0, 20,  0x00, 0, 0, 0,  0, 0, 0, 0,
            0x00, 0x00, 0x00, 0x00])),
    (Ipv4Prefix(2, 1, 32, 32, 0xC633_6407, 0xFFFF_FFFF),  # 198.51.100.7/32 AS4294967295
     bytes([0x02, 0x04, 0x00, 0x00,  0, 0, 0, 20,  0x01, 32, 32, 0,  198, 51, 100, 7,
            0xFF, 0xFF, 0xFF, 0xFF])),
    # --- IPv6 Prefix (6)
    (Ipv6Prefix(1, 1, 32, 48, 0x2001_0DB8 << 96, AS64497),  # digest: 2001:db8::/32-48
     bytes([0x01, 0x06, 0x00, 0x00,  0, 0, 0, 32,  0x01, 32, 48, 0,
            0x20, 0x01, 0x0D, 0xB8,  0, 0, 0, 0,  0, 0, 0, 0,  0, 0, 0, 0,
            0x00, 0x00, 0xFB, 0xF1])),
    (Ipv6Prefix(0, 0, 0, 128, 0, 0),  # ::/0-128 AS0, withdraw
     bytes([0x00, 0x06, 0x00, 0x00,  0, 0, 0, 32,  0x00, 0, 128, 0,
            0, 0, 0, 0,  0, 0, 0, 0,  0, 0, 0, 0,  0, 0, 0, 0,
            0x00, 0x00, 0x00, 0x00])),
    (Ipv6Prefix(2, 1, 128, 128, (0x2001_0DB8 << 96) | 1, AS64498),  # 2001:db8::1/128
     bytes([0x02, 0x06, 0x00, 0x00,  0, 0, 0, 32,  0x01, 128, 128, 0,
            0x20, 0x01, 0x0D, 0xB8,  0, 0, 0, 0,  0, 0, 0, 0,  0, 0, 0, 1,
            0x00, 0x00, 0xFB, 0xF2])),
    # --- End of Data (7): 12 octets in v0, 24 in v1/v2
    (EndOfData(0, SID, 42, None),  # digest
     bytes([0x00, 0x07, 0x12, 0x34,  0, 0, 0, 12,  0, 0, 0, 42])),
    (EndOfData(1, SID, 42, T),  # digest
     bytes([0x01, 0x07, 0x12, 0x34,  0, 0, 0, 24,  0, 0, 0, 42,
            0x00, 0x00, 0x0E, 0x10,  0x00, 0x00, 0x02, 0x58,  0x00, 0x00, 0x1C, 0x20])),
    (EndOfData(2, SID, 42, T),  # digest
     bytes([0x02, 0x07, 0x12, 0x34,  0, 0, 0, 24,  0, 0, 0, 42,
            0x00, 0x00, 0x0E, 0x10,  0x00, 0x00, 0x02, 0x58,  0x00, 0x00, 0x1C, 0x20])),
    (EndOfData(2, 0xFFFF, 0xFFFF_FFFF, Timers(900, 300, 3600)),
     bytes([0x02, 0x07, 0xFF, 0xFF,  0, 0, 0, 24,  0xFF, 0xFF, 0xFF, 0xFF,
            0x00, 0x00, 0x03, 0x84,  0x00, 0x00, 0x01, 0x2C,  0x00, 0x00, 0x0E, 0x10])),
    # --- Cache Reset (8)
    (CacheReset(0), bytes([0x00, 0x08, 0x00, 0x00,  0, 0, 0, 8])),
    (CacheReset(1), bytes([0x01, 0x08, 0x00, 0x00,  0, 0, 0, 8])),  # digest
    (CacheReset(2), bytes([0x02, 0x08, 0x00, 0x00,  0, 0, 0, 8])),
    # --- Router Key (9), v1/v2 only
    (RouterKeyPdu(1, 1, SKI, AS64496, b"\xde\xad\xbe\xef"),  # digest
     bytes([0x01, 0x09, 0x01, 0x00,  0, 0, 0, 36,
            1, 2, 3, 4,  5, 6, 7, 8,  9, 10, 11, 12,  13, 14, 15, 16,  17, 18, 19, 20,
            0x00, 0x00, 0xFB, 0xF0,  0xDE, 0xAD, 0xBE, 0xEF])),
    (RouterKeyPdu(2, 0, b"\xaa" * 20, AS64497, b"\x30\x03\x00"),
     bytes([0x02, 0x09, 0x00, 0x00,  0, 0, 0, 35,
            0xAA, 0xAA, 0xAA, 0xAA,  0xAA, 0xAA, 0xAA, 0xAA,  0xAA, 0xAA, 0xAA, 0xAA,
            0xAA, 0xAA, 0xAA, 0xAA,  0xAA, 0xAA, 0xAA, 0xAA,
            0x00, 0x00, 0xFB, 0xF1,  0x30, 0x03, 0x00])),
    # --- Error Report (10)
    (ErrorReport(1, 2, b"", "No data"),  # digest
     bytes([0x01, 0x0A, 0x00, 0x02,  0, 0, 0, 23,  0, 0, 0, 0,  0, 0, 0, 7,
            0x4E, 0x6F, 0x20, 0x64,  0x61, 0x74, 0x61])),
    (ErrorReport(1, 4, bytes([2, 2, 0, 0, 0, 0, 0, 8]), ""),  # digest: v2 query to a v1 cache
     bytes([0x01, 0x0A, 0x00, 0x04,  0, 0, 0, 24,  0, 0, 0, 8,
            0x02, 0x02, 0x00, 0x00,  0x00, 0x00, 0x00, 0x08,  0, 0, 0, 0])),
    (ErrorReport(0, 7, bytes([0, 4, 0, 0]), "dup"),
     bytes([0x00, 0x0A, 0x00, 0x07,  0, 0, 0, 23,  0, 0, 0, 4,  0x00, 0x04, 0x00, 0x00,
            0, 0, 0, 3,  0x64, 0x75, 0x70])),
    (ErrorReport(2, 13, b"", ""),
     bytes([0x02, 0x0A, 0x00, 0x0D,  0, 0, 0, 16,  0, 0, 0, 0,  0, 0, 0, 0])),
    (ErrorReport(2, 12, b"", "\u00e9"),  # UTF-8 text: "é" is two octets
     bytes([0x02, 0x0A, 0x00, 0x0C,  0, 0, 0, 18,  0, 0, 0, 0,  0, 0, 0, 2,  0xC3, 0xA9])),
    # --- ASPA (11), v2 only, current layout
    (AspaPdu(2, 1, AS64496, (AS64497, AS64498)),  # digest
     bytes([0x02, 0x0B, 0x01, 0x00,  0, 0, 0, 20,  0x00, 0x00, 0xFB, 0xF0,
            0x00, 0x00, 0xFB, 0xF1,  0x00, 0x00, 0xFB, 0xF2])),
    (AspaPdu(2, 0, AS64496, ()),  # digest: withdraw is exactly 12 octets
     bytes([0x02, 0x0B, 0x00, 0x00,  0, 0, 0, 12,  0x00, 0x00, 0xFB, 0xF0])),
    (AspaPdu(2, 1, AS64496, (0,)),  # AS0 as the sole provider
     bytes([0x02, 0x0B, 0x01, 0x00,  0, 0, 0, 16,  0x00, 0x00, 0xFB, 0xF0,  0, 0, 0, 0])),
]

# Received PDUs with non-zero reserved octets / reserved flag bits: accepted (bis §5).
LENIENT: list[tuple[bytes, Pdu]] = [
    (bytes([0x01, 0x02, 0xDE, 0xAD,  0, 0, 0, 8]), ResetQuery(1)),
    (bytes([0x02, 0x08, 0xFF, 0xFF,  0, 0, 0, 8]), CacheReset(2)),
    (bytes([0x01, 0x04, 0xAB, 0xCD,  0, 0, 0, 20,  0x81, 24, 24, 0x55,  192, 0, 2, 0,
            0x00, 0x00, 0xFB, 0xF0]),
     Ipv4Prefix(1, 0x81, 24, 24, 0xC000_0200, AS64496)),
    (bytes([0x02, 0x0B, 0x03, 0x77,  0, 0, 0, 16,  0x00, 0x00, 0xFB, 0xF0,  0, 0, 0xFB, 0xF1]),
     AspaPdu(2, 3, AS64496, (AS64497,))),
    (bytes([0x01, 0x09, 0x01, 0x99,  0, 0, 0, 33,
            1, 2, 3, 4,  5, 6, 7, 8,  9, 10, 11, 12,  13, 14, 15, 16,  17, 18, 19, 20,
            0x00, 0x00, 0xFB, 0xF0,  0x30]),
     RouterKeyPdu(1, 1, SKI, AS64496, b"\x30")),
    # Invalid UTF-8 text is decoded with replacement characters, not rejected.
    (bytes([0x02, 0x0A, 0x00, 0x00,  0, 0, 0, 17,  0, 0, 0, 0,  0, 0, 0, 1,  0xFF]),
     ErrorReport(2, 0, b"", "\ufffd")),
    # Unknown error codes are kept as raw ints; the session decides what to do.
    (bytes([0x02, 0x0A, 0x01, 0x00,  0, 0, 0, 16,  0, 0, 0, 0,  0, 0, 0, 0]),
     ErrorReport(2, 256, b"", "")),
]

C, U4, U5, A9 = (ErrorCode.CORRUPT_DATA, ErrorCode.UNSUPPORTED_PROTOCOL_VERSION,
                 ErrorCode.UNSUPPORTED_PDU_TYPE, ErrorCode.ASPA_PROVIDER_LIST_ERROR)
# Complete, well-framed PDUs that are invalid: every such error is recoverable.
BAD: list[tuple[str, bytes, ErrorCode]] = [
    ("reset query of 12", bytes([1, 2, 0, 0,  0, 0, 0, 12,  0, 0, 0, 0]), C),
    ("serial query of 8", bytes([1, 1, 0, 0,  0, 0, 0, 8]), C),
    ("serial notify of 16", bytes([1, 0, 0, 0,  0, 0, 0, 16,  0, 0, 0, 0,  0, 0, 0, 0]), C),
    ("cache response of 12", bytes([1, 3, 0, 0,  0, 0, 0, 12,  0, 0, 0, 0]), C),
    ("cache reset of 12", bytes([1, 8, 0, 0,  0, 0, 0, 12,  0, 0, 0, 0]), C),
    ("v0 end of data of 24", bytes([0, 7, 0, 0,  0, 0, 0, 24]) + bytes(16), C),
    ("v1 end of data of 12", bytes([1, 7, 0, 0,  0, 0, 0, 12,  0, 0, 0, 1]), C),
    ("v2 end of data, refresh 0",
     bytes([2, 7, 0, 0,  0, 0, 0, 24,  0, 0, 0, 1,  0, 0, 0, 0,  0, 0, 2, 0x58,  0, 0, 0x1C, 0x20]),
     C),
    ("v1 end of data, expire <= refresh",
     bytes([1, 7, 0, 0,  0, 0, 0, 24,  0, 0, 0, 1,  0, 0, 0x1C, 0x20,  0, 0, 2, 0x58,
            0, 0, 0x1C, 0x20]),
     C),
    ("ipv4 of 24", bytes([1, 4, 0, 0,  0, 0, 0, 24,  1, 8, 8, 0,  10, 0, 0, 0,  0, 0, 0, 1,
                          0, 0, 0, 0]), C),
    ("ipv4 max length 33", bytes([1, 4, 0, 0,  0, 0, 0, 20,  1, 8, 33, 0,  10, 0, 0, 0,
                                  0, 0, 0, 1]), C),
    ("ipv4 max < prefix length", bytes([1, 4, 0, 0,  0, 0, 0, 20,  1, 16, 8, 0,  10, 0, 0, 0,
                                        0, 0, 0, 1]), C),
    ("ipv4 host bits", bytes([1, 4, 0, 0,  0, 0, 0, 20,  1, 8, 8, 0,  10, 0, 0, 1,
                              0, 0, 0, 1]), C),
    ("ipv6 of 28", bytes([1, 6, 0, 0,  0, 0, 0, 28]) + bytes(20), C),
    ("ipv6 max length 129", bytes([1, 6, 0, 0,  0, 0, 0, 32,  1, 32, 129, 0]) + bytes(20), C),
    ("ipv6 host bits", bytes([1, 6, 0, 0,  0, 0, 0, 32,  1, 32, 32, 0,  0x20, 0x01, 0x0D, 0xB8,
                              0, 0, 0, 0,  0, 0, 0, 0,  0, 0, 0, 1,  0, 0, 0, 1]), C),
    ("router key without spki", bytes([1, 9, 1, 0,  0, 0, 0, 32]) + bytes(24), C),
    ("router key of 30", bytes([1, 9, 1, 0,  0, 0, 0, 30]) + bytes(22), C),
    ("error report of 12", bytes([1, 10, 0, 0,  0, 0, 0, 12,  0, 0, 0, 0]), C),
    ("error report, pdu length overruns",
     bytes([1, 10, 0, 0,  0, 0, 0, 16,  0, 0, 0, 1,  0, 0, 0, 0]), C),
    ("error report, text length short",
     bytes([1, 10, 0, 0,  0, 0, 0, 20,  0, 0, 0, 0,  0, 0, 0, 3,  0x61, 0x62, 0x63, 0x64]), C),
    ("error report, text length long",
     bytes([1, 10, 0, 0,  0, 0, 0, 20,  0, 0, 0, 0,  0, 0, 0, 5,  0x61, 0x62, 0x63, 0x64]), C),
    ("error report, huge pdu length",
     bytes([1, 10, 0, 0,  0, 0, 0, 20,  0xFF, 0xFF, 0xFF, 0xFF,  0, 0, 0, 0,  0, 0, 0, 0]), C),
    ("aspa of 14", bytes([2, 11, 1, 0,  0, 0, 0, 14,  0, 0, 0, 1,  0, 0]), C),
    ("aspa of 10", bytes([2, 11, 0, 0,  0, 0, 0, 10,  0, 0]), C),
    ("aspa withdraw with providers",
     bytes([2, 11, 0, 0,  0, 0, 0, 16,  0, 0, 0, 1,  0, 0, 0, 2]), C),
    ("aspa announce without providers", bytes([2, 11, 1, 0,  0, 0, 0, 12,  0, 0, 0, 1]), A9),
    ("aspa providers unsorted",
     bytes([2, 11, 1, 0,  0, 0, 0, 20,  0, 0, 0, 1,  0, 0, 0, 3,  0, 0, 0, 2]), A9),
    ("aspa providers duplicate",
     bytes([2, 11, 1, 0,  0, 0, 0, 20,  0, 0, 0, 1,  0, 0, 0, 3,  0, 0, 0, 3]), A9),
    ("aspa AS0 among providers",
     bytes([2, 11, 1, 0,  0, 0, 0, 20,  0, 0, 0, 1,  0, 0, 0, 0,  0, 0, 0, 3]), A9),
    ("version 3", bytes([3, 2, 0, 0,  0, 0, 0, 8]), U4),
    ("version 255 of 12", bytes([255, 1, 0, 0,  0, 0, 0, 12,  0, 0, 0, 0]), U4),
    ("type 5", bytes([1, 5, 0, 0,  0, 0, 0, 8]), U5),
    ("type 12", bytes([2, 12, 0, 0,  0, 0, 0, 8]), U5),
    ("type 255", bytes([2, 255, 0, 0,  0, 0, 0, 8]), U5),
    ("router key in v0", bytes([0, 9, 1, 0,  0, 0, 0, 33]) + bytes(25), U5),
    ("aspa in v0", bytes([0, 11, 0, 0,  0, 0, 0, 12,  0, 0, 0, 1]), U5),
    ("aspa in v1", bytes([1, 11, 0, 0,  0, 0, 0, 12,  0, 0, 0, 1]), U5),
]
# fmt: on


@pytest.mark.parametrize(("pdu", "golden"), GOLDEN, ids=lambda v: repr(v)[:40])
def test_golden_encode(pdu: Pdu, golden: bytes) -> None:
    assert encode(pdu) == golden


@pytest.mark.parametrize(("pdu", "golden"), GOLDEN, ids=lambda v: repr(v)[:40])
def test_golden_decode(pdu: Pdu, golden: bytes) -> None:
    assert decode(golden) == pdu


def test_golden_covers_every_type_and_version() -> None:
    from rtr_protocol import PDU_TYPES_BY_VERSION

    covered = {(p.version, p.TYPE) for p, _ in GOLDEN}
    expected = {(v, t) for v, types in PDU_TYPES_BY_VERSION.items() for t in types}
    assert covered == expected


@pytest.mark.parametrize(("data", "pdu"), LENIENT, ids=lambda v: repr(v)[:40])
def test_reserved_bits_accepted(data: bytes, pdu: Pdu) -> None:
    assert decode(data) == pdu


@pytest.mark.parametrize(("name", "data", "code"), BAD, ids=[b[0] for b in BAD])
def test_decode_rejects(name: str, data: bytes, code: ErrorCode) -> None:
    with pytest.raises(RtrProtocolError) as info:
        decode(data)
    exc = info.value
    assert exc.code is code
    assert exc.recoverable
    assert exc.offending == data
    assert exc.version == data[0]
    assert exc.pdu_type == data[1]
    assert exc.text


@pytest.mark.parametrize(
    ("data", "offending"),
    [
        (b"", b""),
        (bytes([1, 2, 0]), bytes([1, 2, 0])),
        (bytes([1, 2, 0, 0, 0, 0, 0, 7]), bytes([1, 2, 0, 0, 0, 0, 0, 7])),
        (bytes([1, 2, 0, 0, 0, 0, 0, 0]), bytes([1, 2, 0, 0, 0, 0, 0, 0])),
        (bytes([1, 2, 0, 0, 0, 0, 0, 8, 0]), bytes([1, 2, 0, 0, 0, 0, 0, 8])),  # trailing octet
        (bytes([1, 1, 0, 0, 0, 0, 0, 12, 0]), bytes([1, 1, 0, 0, 0, 0, 0, 12])),  # short
        (bytes([1, 10, 0, 0, 0, 1, 0, 0]) + bytes(65_528), bytes([1, 10, 0, 0, 0, 1, 0, 0])),
    ],
)
def test_decode_unframed(data: bytes, offending: bytes) -> None:
    with pytest.raises(RtrProtocolError) as info:
        decode(data)
    assert info.value.code is ErrorCode.CORRUPT_DATA
    assert not info.value.recoverable
    assert info.value.offending == offending


# fmt: off
REFUSED: list[tuple[Pdu, str]] = [
    (RouterKeyPdu(0, 1, SKI, 1, b"\x30"), "ROUTER_KEY PDUs do not exist in protocol version 0"),
    (AspaPdu(0, 1, 1, (2,)), "ASPA PDUs do not exist in protocol version 0"),
    (AspaPdu(1, 1, 1, (2,)), "ASPA PDUs do not exist in protocol version 1"),
    (ResetQuery(3), "version"),
    (ResetQuery(-1), "version"),
    (ErrorReport(0, 8), "error code 8 does not exist in version 0"),
    (ErrorReport(1, 9), "error code 9 does not exist in version 1"),
    (ErrorReport(1, 13), "error code 13 does not exist in version 1"),
    (ErrorReport(2, 14), "error code 14 does not exist in version 2"),
    (ErrorReport(2, 0, b"", "\ud800"), "UTF-8"),
    (ErrorReport(2, 0, b"", "x" * 65_520), "exceeds 65535"),
    (AspaPdu(2, 1, 1, ()), "at least one provider"),
    (AspaPdu(2, 0, 1, (2,)), "withdraw carries no providers"),
    (AspaPdu(2, 1, 1, (3, 2)), "strictly increasing"),
    (AspaPdu(2, 1, 1, (2, 2)), "strictly increasing"),
    (AspaPdu(2, 1, 1, (0, 2)), "AS0"),
    (AspaPdu(2, 1, 1, tuple(range(1, 16_382))), "exceeds 65535"),
    (AspaPdu(2, 1, 1 << 32, (1,)), "customer"),
    (Ipv4Prefix(1, 1, 24, 33, 0xC000_0200, 1), "max_length"),
    (Ipv4Prefix(1, 1, 24, 23, 0xC000_0200, 1), "less than prefix_length"),
    (Ipv4Prefix(1, 1, 33, 33, 0xC000_0200, 1), "prefix_length"),
    (Ipv4Prefix(1, 1, 24, 24, 0xC000_0201, 1), "host bits"),
    (Ipv4Prefix(1, 1, 24, 24, 1 << 32, 1), "prefix"),
    (Ipv4Prefix(1, 256, 24, 24, 0xC000_0200, 1), "flags"),
    (Ipv4Prefix(1, 1, 24, 24, 0xC000_0200, -1), "asn"),
    (Ipv6Prefix(1, 1, 32, 129, 0x2001_0DB8 << 96, 1), "max_length"),
    (Ipv6Prefix(1, 1, 32, 48, (0x2001_0DB8 << 96) | 1, 1), "host bits"),
    (Ipv6Prefix(1, 1, 32, 48, 0x2001_0DB8 << 96, 1 << 32), "asn"),
    (EndOfData(0, 1, 1, T), "v0 End of Data carries no timers"),
    (EndOfData(1, 1, 1, None), "needs timers"),
    (EndOfData(2, 1, 1 << 32, T), "serial"),
    (SerialNotify(1, 65_536, 1), "session_id"),
    (SerialQuery(1, 1, -1), "serial"),
    (CacheResponse(2, -1), "session_id"),
    (RouterKeyPdu(1, 1, SKI[:19], 1, b"\x30"), "SKI must be 20 octets"),
    (RouterKeyPdu(1, 1, SKI, 1, b""), "SPKI must not be empty"),
    (RouterKeyPdu(1, 1, SKI, 1, bytes(65_535 - 31)), "exceeds 65535"),
]
# fmt: on


@pytest.mark.parametrize(("pdu", "message"), REFUSED, ids=lambda v: repr(v)[:50])
def test_encode_refuses(pdu: Pdu, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        encode(pdu)


def test_router_key_largest() -> None:
    pdu = RouterKeyPdu(1, 1, SKI, 1, bytes(65_535 - 32))
    data = encode(pdu)
    assert len(data) == 65_535
    assert decode(data) == pdu


def test_aspa_largest() -> None:
    pdu = AspaPdu(2, 1, 1, tuple(range(1, 16_381)))
    data = encode(pdu)
    assert len(data) == 12 + 4 * 16_380
    assert decode(data) == pdu


@pytest.mark.parametrize(
    ("inner_size", "limit", "kept"),
    [
        (300, 256, 256),  # default truncation
        (256, 256, 256),
        (10, 256, 10),
        (300, 2, 4),  # never fewer than 4 octets
        (300, 0, 4),
        (3, 0, 3),  # a shorter PDU is kept whole
        (300, None, 300),  # no limit
    ],
)
def test_error_report_truncation(inner_size: int, limit: int | None, kept: int) -> None:
    inner = bytes(i % 251 for i in range(inner_size))
    data = encode(ErrorReport(2, 0, inner, "x"), max_encapsulated=limit)
    assert len(data) == 16 + kept + 1
    assert decode(data) == ErrorReport(2, 0, inner[:kept], "x")


def test_error_report_default_truncation() -> None:
    data = encode(ErrorReport(1, 0, bytes(1000), ""))
    assert data[8:12] == bytes([0, 0, 1, 0])  # 256


def test_error_report_no_trailing_nul() -> None:
    data = encode(ErrorReport(1, 0, b"", "abc"))
    assert data.endswith(b"abc")
    assert data[12:16] == bytes([0, 0, 0, 3])


def test_error_report_codes() -> None:
    assert ErrorReport(2, 9).error_code is ErrorCode.ASPA_PROVIDER_LIST_ERROR
    assert ErrorReport(2, 99).error_code is None


def test_flags_announce_property() -> None:
    assert Ipv4Prefix(1, 0x81, 0, 0, 0, 0).announce
    assert not Ipv6Prefix(1, 0x80, 0, 0, 0, 0).announce
    assert RouterKeyPdu(1, 1, SKI, 0, b"x").announce
    assert not AspaPdu(2, 2, 1).announce


@settings(max_examples=500, deadline=None)
@given(pdu=pdus)
def test_roundtrip(pdu: Pdu) -> None:
    data = encode(pdu)
    assert int.from_bytes(data[4:8], "big") == len(data)
    assert data[0] == pdu.version
    assert data[1] == pdu.TYPE
    assert decode(data) == pdu
    assert encode(decode(data)) == data
