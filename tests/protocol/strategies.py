"""Hypothesis strategies for valid PDUs of every type and version, and small helpers."""

from __future__ import annotations

from hypothesis import strategies as st

from rtr_protocol import (
    ERROR_CODES_BY_VERSION,
    AspaPdu,
    CacheReset,
    CacheResponse,
    EndOfData,
    ErrorReport,
    Ipv4Prefix,
    Ipv6Prefix,
    Pdu,
    PduFramer,
    ResetQuery,
    RouterKeyPdu,
    RtrProtocolError,
    SerialNotify,
    SerialQuery,
    Timers,
)
from rtr_protocol.framer import NeedData
from snapshot import Snapshot

versions = st.integers(0, 2)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFF_FFFF)
flags = st.integers(0, 0xFF)


@st.composite
def timers(draw: st.DrawFn) -> Timers:
    refresh = draw(st.integers(1, 86_400))
    retry = draw(st.integers(1, 7_200))
    expire = draw(st.integers(max(600, refresh + 1, retry + 1), 172_800))
    return Timers(refresh, retry, expire)


@st.composite
def prefix_pdus(draw: st.DrawFn, bits: int) -> Ipv4Prefix | Ipv6Prefix:
    plen = draw(st.integers(0, bits))
    mlen = draw(st.integers(plen, bits))
    host_mask = (1 << (bits - plen)) - 1
    prefix = draw(st.integers(0, (1 << bits) - 1)) & ~host_mask
    cls = Ipv4Prefix if bits == 32 else Ipv6Prefix
    return cls(draw(versions), draw(flags), plen, mlen, prefix, draw(u32))


@st.composite
def end_of_data(draw: st.DrawFn) -> EndOfData:
    version = draw(versions)
    return EndOfData(version, draw(u16), draw(u32), None if version == 0 else draw(timers()))


@st.composite
def error_reports(draw: st.DrawFn) -> ErrorReport:
    version = draw(versions)
    code = draw(st.sampled_from(sorted(ERROR_CODES_BY_VERSION[version])))
    return ErrorReport(
        version, int(code), draw(st.binary(max_size=256)), draw(st.text(max_size=40))
    )


@st.composite
def aspa_pdus(draw: st.DrawFn) -> AspaPdu:
    flag_bits = draw(flags)
    if not flag_bits & 1:
        return AspaPdu(2, flag_bits, draw(u32), ())
    providers = sorted(draw(st.sets(u32, min_size=1, max_size=20)))
    if len(providers) > 1 and providers[0] == 0:
        del providers[0]
    return AspaPdu(2, flag_bits, draw(u32), tuple(providers))


router_keys = st.builds(
    RouterKeyPdu,
    version=st.integers(1, 2),
    flags=flags,
    ski=st.binary(min_size=20, max_size=20),
    asn=u32,
    spki=st.binary(min_size=1, max_size=200),
)

pdus: st.SearchStrategy[Pdu] = st.one_of(
    st.builds(SerialNotify, versions, u16, u32),
    st.builds(SerialQuery, versions, u16, u32),
    st.builds(ResetQuery, versions),
    st.builds(CacheResponse, versions, u16),
    prefix_pdus(32),
    prefix_pdus(128),
    end_of_data(),
    st.builds(CacheReset, versions),
    router_keys,
    error_reports(),
    aspa_pdus(),
)

#: What a framer produced: a PDU, or the (code, recoverable) of an error.
Outcome = Pdu | tuple[int, bool]


def drain(framer: PduFramer, out: list[Outcome]) -> bool:
    """Pull everything available; False once a non-recoverable error was seen."""
    while True:
        try:
            pdu = framer.next_pdu()
        except RtrProtocolError as exc:
            out.append((int(exc.code), exc.recoverable))
            if not exc.recoverable:
                return False
            continue
        if isinstance(pdu, NeedData):
            return True
        out.append(pdu)


def frame_chunks(chunks: list[bytes], max_pdu_size: int = 65_535) -> list[Outcome]:
    """Feed ``chunks`` then EOF to a fresh framer, draining after each chunk."""
    framer = PduFramer(max_pdu_size)
    out: list[Outcome] = []
    for chunk in [*chunks, b""]:
        framer.receive_data(chunk)
        if not drain(framer, out):
            break
    return out


def at_version(snapshot: Snapshot, version: int) -> Snapshot:
    """What a router speaking ``version`` can hold of ``snapshot`` (v0: VRPs; v1: + keys)."""
    return Snapshot(
        snapshot.v4,
        snapshot.v6,
        snapshot.router_keys if version >= 1 else (),
        snapshot.aspas if version >= 2 else (),
    )
