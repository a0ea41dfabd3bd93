"""Deterministic persisted states for the persistence tests, and a field-by-field comparison.

`realistic_state` is a small state that touches every column (several sources, IPv4 and IPv6
VRPs with per-entry expiry including `NEVER`, router keys, multi-provider ASPAs, RTR session and
serial set and unset). `crash_state` builds a large state whose every row depends on the
generation, so two generations never share a VRP row and any mix of them is visible.
"""

from __future__ import annotations

import struct
from array import array
from dataclasses import replace

from persistence.exchange import state_digest
from persistence.state import NEVER, GroupRecord, PersistedState, SourceRecord, StateId
from snapshot.model import Aspa, RouterKey, pack_v4, pack_v6

US = 1_000_000
#: 2026-01-01T00:00:00Z in microseconds.
T0 = 1_767_225_600 * US
ASN_MAX = 0xFFFF_FFFF
SPKI = bytes.fromhex("3059301306072a8648ce3d020106082a8648ce3d03010703420004") + bytes(range(65))


def _v4(entries: list[tuple[int, int, int, int, int]]) -> tuple[bytes, array[int]]:
    """Pack (address, prefix length, max length, asn, expiry) rows, sorted descending."""
    rows = sorted(((pack_v4(a, p, m, asn), exp) for a, p, m, asn, exp in entries), reverse=True)
    return b"".join(k for k, _ in rows), array("q", [e for _, e in rows])


def _v6(entries: list[tuple[int, int, int, int, int]]) -> tuple[bytes, array[int]]:
    rows = sorted(((pack_v6(a, p, m, asn), exp) for a, p, m, asn, exp in entries), reverse=True)
    return b"".join(k for k, _ in rows), array("q", [e for _, e in rows])


def realistic_sources(variant: int = 0) -> tuple[SourceRecord, ...]:
    """A few sources covering every column; ``variant`` shifts ASNs and times."""
    v = variant
    v4a, v4a_exp = _v4(
        [
            (0xC0000200, 24, 24, 64496 + v, T0 + 3600 * US),  # 192.0.2.0/24
            (0x0A000000, 8, 24, 64497, NEVER),  # 10.0.0.0/8-24
            (0x0A010000, 16, 16, 0, T0 + 7200 * US),  # AS0
            (0xCB007100, 24, 32, ASN_MAX, NEVER),  # 203.0.113.0/24-32
        ]
    )
    v6a, v6a_exp = _v6(
        [
            (0x20010DB8 << 96, 32, 48, 64496 + v, T0 + 3600 * US),
            (0x20010DB8_0001 << 80, 48, 48, 65551, NEVER),
        ]
    )
    keys = (
        (RouterKey(bytes(range(20)), 64496, SPKI), T0 + 86_400 * US),
        (RouterKey(b"\xff" * 20, ASN_MAX, b"\x30"), NEVER),
    )
    aspas = (
        (Aspa(64496, (64497, 64498, 64499 + v)), T0 + 600 * US),
        (Aspa(65000, (0,)), NEVER),
        (Aspa(ASN_MAX, (1, 2, 3, 4, 5, ASN_MAX)), T0 - 5),
    )
    http = SourceRecord(
        name="ripe-http",
        group="primary",
        kind="http",
        location="https://rpki.example.net/export.json",
        complete=True,
        capabilities=frozenset({"vrp", "router_key", "aspa"}),
        selected=frozenset({"vrp", "router_key", "aspa"}),
        accepted_at=T0 + v,
        evaluated_at=T0 + 30 * US,
        generated_at=T0 - 60 * US,
        v4=v4a,
        v4_expires=v4a_exp,
        v6=v6a,
        v6_expires=v6a_exp,
        router_keys=keys,
        aspas=aspas,
        aspa_afis=bytes([0, 0, 2]),
        metadata_json='{"format":"rpki-client"}',
        # Duplicate supports of a VRP, a router key and an ASPA already present (P-27).
        # Each ends no later than its entry, which holds the latest end of its supports.
        vrp_duplicates=((4, v4a[10:20], T0 + 60 * US), (6, v6a[:22], T0 + 1800 * US)),
        router_key_duplicates=(keys[0],),
        aspa_duplicates=((aspas[2][0], 2, T0 - 6),),
    )
    v4b, v4b_exp = _v4(
        [
            (0, 0, 32, 0, 0),  # 0.0.0.0/0-32, expiry at the epoch itself
            (0xFFFFFFFF, 32, 32, ASN_MAX, -1),  # a negative (pre-1970) expiry
            (0xC6336400, 24, 24, 64500, NEVER),  # 198.51.100.0/24
        ]
    )
    v6b, v6b_exp = _v6(
        [
            (0, 0, 128, 1, NEVER),  # ::/0-128
            ((1 << 128) - 1, 128, 128, ASN_MAX, T0 + 1),
        ]
    )
    rtr = SourceRecord(
        name="rtr-upstream",
        group="primary",
        kind="rtr",
        location="rtr://192.0.2.1:3323",
        complete=True,
        capabilities=frozenset({"vrp", "router_key", "aspa"}),
        selected=frozenset({"vrp", "aspa"}),
        accepted_at=T0 + 10 * US,
        evaluated_at=T0 + 25 * US,
        expires_at=T0 + 7200 * US,
        rtr_session=0xBEEF,
        rtr_serial=ASN_MAX - v,
        protocol=2,
        present=frozenset({"vrp", "aspa"}),
        aspa_families=1,
        aspa_afis=b"\x01",
        v4=v4b,
        v4_expires=v4b_exp,
        v6=v6b,
        v6_expires=v6b_exp,
        aspas=((Aspa(64501, (64502, 64503)), T0 + 7200 * US),),
    )
    empty = SourceRecord(
        name="local-file",
        group="fallback",
        kind="file",
        location="/var/lib/rpki/local.json",
        complete=True,
        capabilities=frozenset({"vrp"}),
        selected=frozenset(),
        accepted_at=T0 - 3600 * US,
        evaluated_at=T0 + 20 * US,
        group_id=1,
        invalidated=True,
    )
    return http, rtr, empty


#: The groups of `realistic_sources` (an empty group kept) and their active groups.
REALISTIC_GROUPS = (
    GroupRecord(
        0, "primary", frozenset({"vrp", "router_key", "aspa"}), ("ripe-http", "rtr-upstream")
    ),
    GroupRecord(1, "fallback", frozenset({"vrp"}), ("local-file",)),
    GroupRecord(2, "spare", frozenset({"aspa"})),
)
REALISTIC_ACTIVE = (("aspa_v4", "primary"), ("aspa_v6", "primary"), ("router_key", "primary"))


def make_state(
    store_id: str,
    state_id: StateId,
    sources: tuple[SourceRecord, ...] | None = None,
    *,
    serial: int = 42,
) -> PersistedState:
    """A state for ``store_id``; the realistic sources and groups unless ``sources`` is given."""
    grouped = sources is None
    return PersistedState(
        store_id=store_id,
        state_id=state_id,
        config_revision=3,
        serial=serial,
        session_ids=(1, 0x7FFF, 0xFFFF),
        published_at=T0 + 20 * US,
        package_version="0.0.0-test",
        sources=realistic_sources() if sources is None else sources,
        observed_at=T0 + 40 * US,
        groups=REALISTIC_GROUPS if grouped else (),
        active_groups=((*REALISTIC_ACTIVE, ("vrp", "primary")) if grouped else ()),
        policy_id="sha256:" + "ab" * 32 if grouped else None,
        policy_json='{"slurmVersion":1,"validationOutputFilters":{"prefixFilters":[]}}'
        if grouped
        else None,
        config_store_id="c" * 32 if grouped else None,
        config_epoch=7 if grouped else None,
        config_identity="sha256:" + "cd" * 32 if grouped else None,
    )


_V4_KEY = struct.Struct(">IBBI")
_V6_KEY = struct.Struct(">QQBBI")


def crash_sources(generation: int, vrps: int) -> tuple[SourceRecord, ...]:
    """``vrps`` VRPs over two sources; every row's ASN and expiry depend on ``generation``."""
    g = generation
    n6 = vrps // 5
    n4a = (vrps - n6) * 3 // 4
    n4b = vrps - n6 - n4a

    def asn(i: int) -> int:
        return (i * 7919 + g * 104_729 + 1) % (ASN_MAX + 1)

    def expiry(i: int) -> int:
        return NEVER if (i + g) % 13 == 0 else T0 + ((i * 31 + g) % 100_000) * US

    # Addresses descending gives the packed (descending) order without a sort.
    order4a = range(n4a - 1, -1, -1)
    v4a = b"".join(_V4_KEY.pack(i << 8, 24 + (i + g) % 9, 24, asn(i)) for i in order4a)
    v4a_exp = array("q", [expiry(i) for i in order4a])
    order4b = range(n4b - 1, -1, -1)
    base = 0xC0000000
    v4b = b"".join(_V4_KEY.pack(base + (i << 8), 24, 24, asn(i + n4a)) for i in order4b)
    v4b_exp = array("q", [expiry(i + n4a) for i in order4b])
    order6 = range(n6 - 1, -1, -1)
    v6 = b"".join(
        _V6_KEY.pack(0x2001_0DB8_0000_0000 + (i << 16), 0, 48, 48, asn(i + 7)) for i in order6
    )
    v6_exp = array("q", [expiry(i + 7) for i in order6])
    a = SourceRecord(
        name="a",
        group="g",
        kind="rtr",
        complete=True,
        capabilities=frozenset({"vrp", "router_key", "aspa"}),
        selected=frozenset({"vrp", "router_key", "aspa"}),
        accepted_at=T0 + g,
        rtr_session=g & 0xFFFF,
        rtr_serial=g,
        v4=v4a,
        v4_expires=v4a_exp,
        v6=v6,
        v6_expires=v6_exp,
        router_keys=((RouterKey(g.to_bytes(20, "big"), asn(1), SPKI), expiry(1)),),
        aspas=tuple((Aspa(64_000 + j, (asn(j), asn(j + 1), g + 1)), expiry(j)) for j in range(20)),
    )
    b = SourceRecord(
        name="b",
        group="g",
        kind="http",
        location="https://rpki.example.net/export.json",
        complete=True,
        capabilities=frozenset({"vrp"}),
        selected=frozenset({"vrp"}),
        accepted_at=T0 - g,
        v4=v4b,
        v4_expires=v4b_exp,
    )
    return a, b


def crash_state(store_id: str, state_id: StateId, vrps: int) -> PersistedState:
    """The state the crash writer commits as ``state_id`` (content from the generation only)."""
    return replace(
        make_state(store_id, state_id, crash_sources(state_id.generation, vrps)),
        serial=state_id.generation,
    )


def source_fields(source: SourceRecord) -> tuple[object, ...]:
    """Every field of a source, comparable with ``==``."""
    return (
        source.name,
        source.group,
        source.kind,
        source.location,
        source.complete,
        source.capabilities,
        source.selected,
        source.accepted_at,
        source.evaluated_at,
        source.expires_at,
        source.rtr_session,
        source.rtr_serial,
        source.generated_at,
        source.v4,
        list(source.v4_expires),
        source.v6,
        list(source.v6_expires),
        source.router_keys,
        source.aspas,
        source.group_id,
        source.protocol,
        source.present,
        source.invalidated,
        source.aspa_families,
        source.aspa_afis,
        source.metadata_json,
        source.vrp_duplicates,
        source.router_key_duplicates,
        source.aspa_duplicates,
        source.identity,
    )


def assert_same_state(got: PersistedState, want: PersistedState) -> None:
    """Equal digests and equal fields (the digest alone could hide a digest bug)."""
    assert state_digest(got) == state_digest(want)
    head = ("store_id", "state_id", "config_revision", "serial", "session_ids", "published_at")
    later = ("groups", "active_groups", "policy_id", "policy_json", "mode", "reference_time")
    ids = ("upstream", "config_store_id", "config_epoch", "config_identity")
    for name in (*head, "package_version", "observed_at", "recovered_from", *later, *ids):
        assert getattr(got, name) == getattr(want, name), name
    assert [source_fields(s) for s in got.sources] == [source_fields(s) for s in want.sources]
