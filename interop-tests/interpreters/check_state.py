"""One interpreter's part of the cross-CPython state check (P-38): commit, read, print as JSON.

Run by ``interop-tests/test_interpreters.py`` under every interpreter (the host's 3.11 and the
chroots' 3.12, 3.13 and 3.14) with only the standard library, the checkout and its pure-Python
dependencies on ``PYTHONPATH``. Every command prints one JSON document on stdout; the test
compares the documents of all interpreters. Commands:

``write FILE``
    Commit the fixed state (`fixed_state`) to a new SQLite file through the public
    `SQLiteBackend` and report the receipt and the state as the interpreter read it back.
``read FILE...``
    Open each file as a read-only follower and report its receipt and state.
``chain FILE STEP``
    Take over FILE as its owner: report what is stored, commit the stored state again (an
    idempotent retry must return the original receipt, which needs this interpreter's digest of
    the state read to equal the one the writer stored), then commit the fixed state of
    generation STEP + 1 on top of it.
``spelling``
    The interpreter, its SQLite, the fixed state's view computed in memory, and how
    `ipaddress`, the library's `Vrp` text and the exchange format (`snapshot.prefix_text`,
    the text the state digest hashes) spell IPv4-mapped IPv6 prefixes.

A state "view" holds the receipt, the recomputed state digest (the SHA-256 of the exchange
document, `persistence.exchange.state_digest`), it again for the state under `CANONICAL_STORE`
(equal for every file), each source's identity, content digest and packed VRP keys, and every raw
deadline (integer microseconds, `NEVER` included) in stored order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import json
import re
import sqlite3
import sys
from array import array
from pathlib import Path
from typing import Any

import anyio

from persistence import PersistReceipt, SQLiteBackend, ThreadedBackend
from persistence.exchange import encode
from persistence.exchange import state_digest as exchange_digest
from persistence.state import NEVER, SCHEMA_VERSION, PersistedState, SourceRecord, StateId
from persistence.state_binary import source_digest
from snapshot.model import Aspa, RouterKey, Vrp, pack_v4, pack_v6
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE
from snapshot.prefix_text import v6_text
from upstream.config import ClientConfig, GroupConfig, SourceConfig, source_identity

__all__ = ["CANONICAL_STORE", "MAPPED", "fixed_state", "main"]

US = 1_000_000
#: 2026-01-01T00:00:00Z in microseconds: the times inside the fixed state.
T0 = 1_767_225_600 * US
#: The backend's wall clock (seconds): an hour after T0, so every ``committed_at`` is fixed.
WALL = T0 / US + 3600
#: The store id the store-independent digest is computed under.
CANONICAL_STORE = "p38-canonical-store"
#: The IPv4-mapped IPv6 prefixes of the fixed state: (address, length, max length, ASN, expiry).
MAPPED = (
    (0xFFFF_C000_0200, 120, 128, 64496, T0 + 3600 * US),  # ::ffff:192.0.2.0/120-128
    (0xFFFF_0000_0000, 96, 96, 0, NEVER),  # ::ffff:0.0.0.0/96 (AS0)
    (0xFFFF_C633_6407, 128, 128, 4_200_000_000, NEVER),  # ::ffff:198.51.100.7/128
)
SPKI = bytes.fromhex("3059301306072a8648ce3d020106082a8648ce3d03010703420004") + bytes(range(65))
#: The sources' configuration, whose identities (`source_identity`, what recovery matches) the
#: state carries. The HTTPS one stays out of the `ClientConfig`: checking its URL imports httpx,
#: which the persistence path does not need and the chroots do not have.
SOURCES = (
    SourceConfig("rpki-http", "https://rpki.example.net/export.json", group="primary"),
    SourceConfig("rtr-upstream", "rtr://192.0.2.1:3323", group="primary", max_version=2),
    SourceConfig("local-file", "/var/lib/rpki/local.json", group="fallback"),
)
CONFIG = ClientConfig(
    sources=SOURCES[1:],
    groups=(GroupConfig("primary", 0), GroupConfig("fallback", 1)),
    revision=3,
)


def _packed(pack: Any, entries: list[tuple[int, int, int, int, int]]) -> tuple[bytes, array[int]]:
    rows = sorted(((pack(a, p, m, asn), exp) for a, p, m, asn, exp in entries), reverse=True)
    return b"".join(k for k, _ in rows), array("q", [e for _, e in rows])


def fixed_sources() -> tuple[SourceRecord, ...]:
    """Three sources: mapped IPv6 VRPs, ASPAs, router keys, expiring and never-expiring entries."""
    identity = {s.name: source_identity(s, CONFIG) for s in SOURCES}
    v4, v4_exp = _packed(
        pack_v4,
        [
            (0xC0000200, 24, 24, 64496, T0 + 3600 * US),  # 192.0.2.0/24
            (0x0A000000, 8, 24, 64497, NEVER),  # 10.0.0.0/8-24
            (0xCB007100, 24, 32, 0xFFFF_FFFF, T0 - 1),  # 203.0.113.0/24-32, already expired
        ],
    )
    v6, v6_exp = _packed(
        pack_v6,
        [*MAPPED, (0x20010DB8 << 96, 32, 48, 64496, T0 + 7200 * US), (0, 0, 128, 1, NEVER)],
    )
    http = SourceRecord(
        name="rpki-http",
        group="primary",
        kind="http",
        location="https://rpki.example.net/export.json",
        identity=identity["rpki-http"],
        complete=True,
        capabilities=frozenset({"vrp", "router_key", "aspa"}),
        selected=frozenset({"vrp", "router_key", "aspa"}),
        accepted_at=T0,
        evaluated_at=T0 + 30 * US,
        generated_at=T0 - 60 * US,
        v4=v4,
        v4_expires=v4_exp,
        v6=v6,
        v6_expires=v6_exp,
        router_keys=(
            (RouterKey(bytes(range(20)), 64496, SPKI), T0 + 86_400 * US),
            (RouterKey(b"\xff" * 20, 0xFFFF_FFFF, SPKI), NEVER),
        ),
        aspas=(
            (Aspa(64496, (64497, 64498, 4_200_000_000)), T0 + 600 * US),
            (Aspa(65000, (0,)), NEVER),
        ),
    )
    rv6, rv6_exp = _packed(pack_v6, [(0xFFFF_0A00_0000, 104, 112, 65001, T0 + 5400 * US)])
    rtr = SourceRecord(
        name="rtr-upstream",
        group="primary",
        kind="rtr",
        location="rtr://192.0.2.1:3323",
        identity=identity["rtr-upstream"],
        complete=True,
        capabilities=frozenset({"vrp", "router_key", "aspa"}),
        selected=frozenset({"vrp", "aspa"}),
        accepted_at=T0 + 10 * US,
        evaluated_at=T0 + 25 * US,
        expires_at=T0 + 7200 * US,
        rtr_session=0xBEEF,
        rtr_serial=0xFFFF_FFFF,
        v6=rv6,
        v6_expires=rv6_exp,
        aspas=((Aspa(64501, (64502, 64503)), T0 + 7200 * US),),
    )
    local = SourceRecord(
        name="local-file",
        group="fallback",
        kind="file",
        location="/var/lib/rpki/local.json",
        identity=identity["local-file"],
        complete=True,
        capabilities=frozenset({"vrp"}),
        selected=frozenset(),
        accepted_at=T0 - 3600 * US,
    )
    return (http, rtr, local)


def fixed_state(store_id: str, generation: int = 1) -> PersistedState:
    """The fixed state of ``generation`` in store ``store_id``."""
    return PersistedState(
        store_id=store_id,
        state_id=StateId(epoch=7, generation=generation),
        config_revision=CONFIG.revision,
        serial=41 + generation,
        session_ids=(0x1111, 0x2222, 0x3333),
        published_at=T0 + 40 * US,
        package_version="p38-check",
        sources=fixed_sources(),
        observed_at=T0 + 50 * US,
    )


def receipt_view(receipt: PersistReceipt) -> dict[str, Any]:
    """The receipt's fields (``retried`` apart: it takes no part in equality)."""
    return {
        "snapshot_id": str(receipt.snapshot_id),
        "config_revision": receipt.config_revision,
        "committed_at": receipt.committed_at,
        "schema_version": receipt.schema_version,
        "state_digest": receipt.state_digest.hex(),
    }


def state_view(state: PersistedState) -> dict[str, Any]:
    """What must be equal wherever the state is computed or read (see the module docstring)."""
    canonical = dataclasses.replace(state, store_id=CANONICAL_STORE)
    return {
        "store_id": state.store_id,
        # The state digest: the SHA-256 of the state's exchange document.
        "state_digest": exchange_digest(state).hex(),
        "canonical_digest": exchange_digest(canonical).hex(),
        "sources": {
            s.name: {
                "identity": s.identity,
                "kind": s.kind,
                "group": s.group,
                "location": s.location,
                "content_digest": source_digest(s).hex(),
                # Packed keys, not text: `ipaddress` spells mapped addresses per interpreter.
                "vrp_keys": [k.hex() for k in _keys(s)],
                "deadlines": {
                    "expires_at": s.expires_at,
                    "v4": list(s.v4_expires),
                    "v6": list(s.v6_expires),
                    "router_keys": [e for _, e in s.router_keys],
                    "aspas": [e for _, e in s.aspas],
                },
            }
            for s in state.sources
        },
    }


def _keys(source: SourceRecord) -> list[bytes]:
    keys = [source.v4[i : i + V4_KEY_SIZE] for i in range(0, len(source.v4), V4_KEY_SIZE)]
    keys += [source.v6[i : i + V6_KEY_SIZE] for i in range(0, len(source.v6), V6_KEY_SIZE)]
    return keys


def _backend(path: Path, *, read_only: bool = False) -> ThreadedBackend:
    return ThreadedBackend(SQLiteBackend(path, read_only=read_only, wall=lambda: WALL))


async def write(path: Path) -> dict[str, Any]:
    """Commit the fixed state to the new file ``path``; the receipt and the state read back."""
    backend = _backend(path)
    await backend.open()
    try:
        assert backend.store_id is not None
        state = fixed_state(backend.store_id)
        receipt = await backend.commit(state, None)
        stored = await backend.read_state()
    finally:
        assert await backend.close(), backend.close_error
    assert stored is not None
    header, read_back = stored
    return {
        "committed": {"receipt": receipt_view(receipt), "state": state_view(state)},
        "read_back": {"receipt": receipt_view(header.receipt()), "state": state_view(read_back)},
    }


async def read(paths: list[Path]) -> dict[str, Any]:
    """Each file as a read-only follower reads it: receipt and state."""
    views: dict[str, Any] = {}
    for path in paths:
        backend = _backend(path, read_only=True)
        await backend.open()
        try:
            stored = await backend.read_state()
        finally:
            assert await backend.close(), backend.close_error
        if stored is None:
            raise SystemExit(f"{path}: nothing committed")
        header, state = stored
        views[path.name] = {"receipt": receipt_view(header.receipt()), "state": state_view(state)}
    return views


async def chain(path: Path, step: int) -> dict[str, Any]:
    """Take over ``path``: report the stored state, retry its commit, commit the next one."""
    backend = _backend(path)
    await backend.open()
    try:
        assert backend.store_id is not None
        stored = await backend.read_state()
        found: dict[str, Any] | None = None
        retried: dict[str, Any] | None = None
        expected = None
        if stored is not None:
            header, state = stored
            expected = header.state_id
            found = {"receipt": receipt_view(header.receipt()), "state": state_view(state)}
            again = await backend.commit(state, expected)
            retried = {"retried": again.retried, "receipt": receipt_view(again)}
        mine = fixed_state(backend.store_id, generation=step + 1)
        receipt = await backend.commit(mine, expected)
    finally:
        assert await backend.close(), backend.close_error
    return {
        "found": found,
        "retried": retried,
        "committed": {"receipt": receipt_view(receipt), "state": state_view(mine)},
    }


def spelling() -> dict[str, Any]:
    """The interpreter, the in-memory digests and the spellings of an IPv4-mapped prefix."""
    address, length, max_length, asn, _ = MAPPED[0]
    network = ipaddress.IPv6Network((address, length))
    state = fixed_state(CANONICAL_STORE)
    document = b"".join(encode(state))
    return {
        "python": sys.version.split()[0],
        "implementation": sys.implementation.name,
        "sqlite": sqlite3.sqlite_version,
        "schema_version": SCHEMA_VERSION,
        "ipaddress_str": str(network),
        "library_vrp_str": str(Vrp(network, max_length, asn)),
        "exchange_text": f"{v6_text(address)}/{length}",
        # Every mapped prefix as the state's exchange document (what its digest hashes) has it.
        "exchange_mapped": sorted(
            set(re.findall(r'"(::ffff:[0-9a-f.:]+/[0-9]+)"', document.decode()))
        ),
        "exchange_sha256": hashlib.sha256(document).hexdigest(),
        "fixed_state": state_view(state),
    }


def main(argv: list[str]) -> int:
    """Run one command (see the module docstring) and print its JSON document."""
    command, args = argv[0], argv[1:]
    result: Any
    if command == "write" and len(args) == 1:
        if Path(args[0]).exists():
            raise SystemExit(f"{args[0]} exists: write wants a new file")
        result = anyio.run(write, Path(args[0]))
    elif command == "read" and args:
        result = anyio.run(read, [Path(a) for a in args])
    elif command == "chain" and len(args) == 2:
        result = anyio.run(chain, Path(args[0]), int(args[1]))
    elif command == "spelling" and not args:
        result = spelling()
    else:
        print(__doc__, file=sys.stderr)
        return 2
    json.dump(result, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
