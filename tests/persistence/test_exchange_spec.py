"""docs/exchange-format.md stays true: its example is what the code writes, with its digest.

The example is built here from the model as well, so the document's bytes are what the code
writes for that state (a change of the format must change the document).
"""

from __future__ import annotations

import hashlib
import re
from array import array
from dataclasses import replace
from pathlib import Path

from persistence.exchange import SOURCE_KEYS, STATE_KEYS, encode, state_digest
from persistence.exchange_import import decode
from persistence.state import (
    NEVER,
    GroupRecord,
    PersistedState,
    SourceRecord,
    StateId,
    UpstreamRef,
)
from snapshot.model import Aspa, RouterKey, pack_v4, pack_v6
from tests.persistence.states import make_state

SPEC = Path(__file__).resolve().parents[2] / "docs" / "exchange-format.md"
T = 1_767_225_600_000_000
KINDS = frozenset({"vrp", "aspa", "router_key"})


def example() -> tuple[bytes, str]:
    """The example document of the spec and its stated digest."""
    text = SPEC.read_text(encoding="utf-8")
    section = text[text.index("## Example") :]
    (doc,) = re.findall(r"```json\n(.*?)\n```", section, re.DOTALL)
    (digest,) = re.findall(r"`([0-9a-f]{64})`", section)
    return doc.encode(), digest


def example_state() -> PersistedState:
    """The state the spec's example describes."""
    v4 = pack_v4(0xC000_0200, 24, 24, 64496)
    v6 = sorted(
        [pack_v6(0x2001_0DB8 << 96, 32, 48, 64497), pack_v6(0xFFFF_C000_0200, 120, 128, 64496)],
        reverse=True,
    )
    source = SourceRecord(
        name="primary-json",
        group="main",
        kind="file",
        location="/var/lib/rpki-client/json",
        complete=True,
        capabilities=KINDS,
        selected=KINDS,
        accepted_at=T,
        evaluated_at=T + 5,
        generated_at=T - 60_000_000,
        v4=v4,
        v4_expires=array("q", [T + 3_600_000_000]),
        v6=b"".join(v6),
        v6_expires=array("q", [NEVER, T + 7_200_000_000]),
        router_keys=(
            (RouterKey(bytes(range(20)), 64496, bytes.fromhex("3059")), T + 86_400_000_000),
        ),
        aspas=((Aspa(64496, (64497, 64498)), T + 600_000_000), (Aspa(64499, (0,)), NEVER)),
        aspa_afis=bytes([0, 2]),
        vrp_duplicates=((4, v4, T + 1_800_000_000),),
    )
    return PersistedState(
        store_id="6f1e2d3c4b5a69788796a5b4c3d2e1f0",
        state_id=StateId(7, 3),
        config_revision=2,
        serial=41,
        session_ids=(100, 200, 300),
        published_at=T + 1_000_000,
        package_version="0.1.0",
        sources=(source,),
        groups=(GroupRecord(0, "main", KINDS, ("primary-json",)),),
        active_groups=(
            ("vrp", "main"),
            ("aspa_v4", "main"),
            ("aspa_v6", "main"),
            ("router_key", "main"),
        ),
    )


def example_states() -> list[PersistedState]:
    """The example and variants of it with more mapped prefixes and every header field set."""
    base = example_state()
    mapped = sorted(
        [
            pack_v6(0xFFFF_0000_0000, 96, 128, 1),  # ::ffff:0.0.0.0/96
            pack_v6(0xFFFF_FFFF_FFFF, 128, 128, 2),  # ::ffff:255.255.255.255/128
            pack_v6(0x1_FFFF_C000_0201, 128, 128, 3),  # not mapped
        ],
        reverse=True,
    )
    source = replace(
        base.sources[0],
        v6=b"".join(mapped),
        v6_expires=array("q", [1, 2, 3]),
        # The retained shape of a v2 -> v1 ASPA revocation (contract P-33).
        kind="rtr",
        location="rtr://192.0.2.1:3323",
        metadata_json='{"rtr":{"incremental_usable":false}}',
        protocol=2,
        capabilities=frozenset({"vrp", "router_key"}),
        selected=frozenset({"vrp", "router_key"}),
        present=frozenset({"vrp", "router_key"}),
        aspa_families=0,
        aspas=(),
        aspa_afis=b"",
    )
    variant = replace(
        base,
        sources=(source,),
        mode="offline",
        reference_time=T,
        upstream=UpstreamRef("upstream-store", 4, 5),
        policy_id="p" * 64,
        policy_json='{"slurmVersion":1}',
        config_store_id="c",
        config_epoch=6,
        config_identity="i" * 64,
    )
    return [base, variant]


def storable_state(store_id: str) -> PersistedState:
    """A state of only the fields every layout stores, with IPv4-mapped IPv6 VRPs."""
    state = make_state(store_id, StateId(1, 1))
    mapped = sorted(
        [pack_v6(0xFFFF_C000_0200, 120, 128, 64496), pack_v6(0xFFFF_0000_0000, 96, 96, 0)],
        reverse=True,
    )
    source = state.sources[0]
    first = replace(
        source,
        v6=b"".join(mapped),
        v6_expires=array("q", [NEVER, T]),
        # A duplicate support is one of the entries (P-27): the first mapped one here.
        vrp_duplicates=tuple(
            (f, k, e) if f == 4 else (6, mapped[0], T) for f, k, e in source.vrp_duplicates
        ),
    )
    return replace(state, sources=(first, *state.sources[1:]))


def test_the_example_is_what_the_code_writes_and_its_digest_is_stated() -> None:
    doc, digest = example()
    assert b"".join(encode(example_state())) == doc
    assert hashlib.sha256(doc).hexdigest() == digest == state_digest(example_state()).hex()
    assert b"".join(encode(decode(doc))) == doc
    assert f"{len(doc)} octets" in SPEC.read_text(encoding="utf-8")


def test_the_member_tables_list_every_member_in_order() -> None:
    text = SPEC.read_text(encoding="utf-8")
    members = re.findall(r"^\| `(\w+)` \|", text, re.MULTILINE)
    assert members == [*STATE_KEYS, *SOURCE_KEYS]
