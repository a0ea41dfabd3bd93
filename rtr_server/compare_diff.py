"""The differences between two snapshots, by kind (VRPs, ASPAs, router keys), and their text.

An ASPA is compared whole (customer and provider set): a customer whose providers differ shows
once on each side. Pure data: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rtr_server.dump_format import record_json
from snapshot.model import Aspa, RouterKey, Vrp
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE
from snapshot.snapshot import Snapshot

__all__ = ["KINDS", "Differences", "compare_snapshots"]

#: The kinds compared, in the order they are printed.
KINDS = ("vrps", "aspas", "router_keys")

Record = Vrp | Aspa | RouterKey


def _keys(packed: bytes, width: int) -> set[bytes]:
    return {packed[i : i + width] for i in range(0, len(packed), width)}


def _vrps(snapshot: Snapshot) -> set[bytes]:
    return _keys(snapshot.v4, V4_KEY_SIZE) | _keys(snapshot.v6, V6_KEY_SIZE)


def _sorted_vrps(keys: set[bytes]) -> list[Vrp]:
    vrps = [Vrp.from_key(k) for k in keys]
    vrps.sort(key=lambda v: (v.prefix.version, v.prefix, v.max_length, v.asn))
    return vrps


def _sorted_aspas(aspas: set[Aspa]) -> list[Record]:
    ordered: list[Aspa] = sorted(aspas, key=lambda x: (x.customer, x.providers))
    return [*ordered]


def _sorted_keys(keys: set[RouterKey]) -> list[Record]:
    ordered: list[RouterKey] = sorted(keys, key=RouterKey.sort_key)
    return [*ordered]


@dataclass(frozen=True, slots=True)
class Differences:
    """What only A holds and what only B holds, per kind, each list sorted."""

    only_a: dict[str, list[Record]]
    only_b: dict[str, list[Record]]

    @property
    def same(self) -> bool:
        """True when both sides hold the same set."""
        return not any(self.only_a.values()) and not any(self.only_b.values())

    def counts(self) -> dict[str, tuple[int, int]]:
        """Per kind: (only in A, only in B)."""
        return {k: (len(self.only_a[k]), len(self.only_b[k])) for k in KINDS}

    def lines(self, max_lines: int) -> list[str]:
        """Human-readable lines: a summary per kind, then at most ``max_lines`` records."""
        out: list[str] = []
        shown = 0
        for kind in KINDS:
            a, b = self.only_a[kind], self.only_b[kind]
            out.append(f"{kind}: {len(a)} only in A, {len(b)} only in B")
            for mark, records in (("-", a), ("+", b)):
                for record in records:
                    if shown >= max_lines:
                        break
                    out.append(f"  {mark} {record}")
                    shown += 1
        total = sum(len(v) for v in self.only_a.values()) + sum(
            len(v) for v in self.only_b.values()
        )
        if total > shown:
            out.append(f"... {total - shown} more (--max-lines, or --format json for all)")
        return out

    def as_json(self) -> dict[str, Any]:
        """Every difference in rpki-client's entry shape, per side and kind."""

        def side(records: dict[str, list[Record]]) -> dict[str, list[Any]]:
            return {k: [record_json(r)[1] for r in records[k]] for k in KINDS}

        return {
            "same": self.same,
            "counts": {k: {"only_a": a, "only_b": b} for k, (a, b) in self.counts().items()},
            "only_a": side(self.only_a),
            "only_b": side(self.only_b),
        }


def compare_snapshots(a: Snapshot, b: Snapshot) -> Differences:
    """The `Differences` of ``a`` and ``b``."""
    va, vb = _vrps(a), _vrps(b)
    aa, ab = set(a.aspas), set(b.aspas)
    ka, kb = set(a.router_keys), set(b.router_keys)

    only_a: dict[str, list[Record]] = {
        "vrps": [*_sorted_vrps(va - vb)],
        "aspas": _sorted_aspas(aa - ab),
        "router_keys": _sorted_keys(ka - kb),
    }
    only_b: dict[str, list[Record]] = {
        "vrps": [*_sorted_vrps(vb - va)],
        "aspas": _sorted_aspas(ab - aa),
        "router_keys": _sorted_keys(kb - ka),
    }
    return Differences(only_a, only_b)
