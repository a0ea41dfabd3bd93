"""`SourcePayload`: one source's complete content, packed, with an absolute expiry per entry."""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from snapshot.kinds import PayloadKind
from snapshot.model import Aspa, RouterKey
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE, drop_marked
from snapshot.snapshot import Snapshot

__all__ = ["NO_EXPIRY", "SourcePayload"]

#: Expiry of entries that carry none.
NO_EXPIRY: Final = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class SourcePayload:
    """The complete content of one source load, with an absolute expiry per entry.

    VRPs are packed (see `snapshot.model`), unique, sorted descending, each with the latest
    ``expires`` of its supports (a VRP from several trust anchors lives while any does); router
    keys are unique the same way. The other supports of the same payload (contract P-27: each
    raw support keeps its own position) are the extras ``vrp_duplicates`` (family 4/6, packed
    key, expiry) and ``router_key_duplicates``: only the extras are kept, none outlives its
    entry's expiry, so serving, expiry and diffs read the unique entries alone. ASPAs keep every
    support in ``aspas`` (merged per customer only when served), each with its afi.
    """

    v4: bytes = b""
    v4_expires: array[int] = field(default_factory=lambda: array("q"))
    v6: bytes = b""
    v6_expires: array[int] = field(default_factory=lambda: array("q"))
    router_keys: tuple[tuple[RouterKey, int], ...] = ()
    aspas: tuple[tuple[Aspa, int], ...] = ()
    #: Build time stated by the export (Unix seconds), if any.
    generated: int | None = None
    #: Extra supports of VRPs in ``v4``/``v6``: (family 4/6, packed key, expiry), sorted.
    vrp_duplicates: tuple[tuple[int, bytes, int], ...] = ()
    #: Extra supports of keys in ``router_keys``: (key, expiry), sorted.
    router_key_duplicates: tuple[tuple[RouterKey, int], ...] = ()
    #: One byte per ``aspas`` entry, its address family: 0 both (the current layout), 1 IPv4,
    #: 2 IPv6 (the legacy per-family layout); empty means every entry is 0.
    aspa_afis: bytes = b""

    def __post_init__(self) -> None:
        if self.aspa_afis and (len(self.aspa_afis) != len(self.aspas) or max(self.aspa_afis) > 2):
            raise ValueError("one ASPA afi (0, 1 or 2) per ASPA entry")

    def earliest_expiry_after(self, now: float, kind: PayloadKind | None = None) -> int | None:
        """The first expiry after ``now`` of the entries of ``kind`` (every kind when None).

        None when no such entry expires later.
        """
        parts: list[Iterable[int]] = []
        if kind in (None, PayloadKind.VRP):
            # The common case, nothing of a table expired yet, at C speed: its minimum.
            parts += [
                [min(expires)] if expires and min(expires) > now else expires
                for expires in (self.v4_expires, self.v6_expires)
            ]
        if kind in (None, PayloadKind.ROUTER_KEY):
            parts.append(t for _, t in self.router_keys)
        if kind in (None, PayloadKind.ASPA):
            parts.append(t for _, t in self.aspas)
        first = min((e for e in itertools.chain(*parts) if e > now), default=NO_EXPIRY)
        return None if first == NO_EXPIRY else first

    def last_expiry(self) -> int | None:
        """When the last entry expires (None: some entry never does, or there is none)."""
        ends = [max(expires) for expires in (self.v4_expires, self.v6_expires) if expires]
        ends += [t for _, t in self.router_keys]
        ends += [t for _, t in self.aspas]
        last = max(ends, default=None)
        return None if last is None or last >= NO_EXPIRY else last

    def is_empty(self) -> bool:
        """True when the payload holds no entry at all (expired or not)."""
        return not (self.v4 or self.v6 or self.router_keys or self.aspas)

    def snapshot_at(self, now: int) -> Snapshot:
        """The entries still valid at ``now`` (an entry is valid while ``now < expires``)."""
        aspas: dict[int, Aspa] = {}
        for aspa, expires in self.aspas:
            if now < expires:
                old = aspas.get(aspa.customer)
                aspas[aspa.customer] = aspa if old is None else old.merged(aspa)
        keys = {k for k, expires in self.router_keys if now < expires}
        return Snapshot(
            _valid_keys(self.v4, self.v4_expires, V4_KEY_SIZE, now),
            _valid_keys(self.v6, self.v6_expires, V6_KEY_SIZE, now),
            tuple(sorted(keys, key=RouterKey.sort_key)),
            tuple(aspas[c] for c in sorted(aspas)),
        )

    def counts(self) -> dict[str, int]:
        """Entry counts by kind, expired ones included."""
        return {
            "vrp_v4": len(self.v4) // V4_KEY_SIZE,
            "vrp_v6": len(self.v6) // V6_KEY_SIZE,
            "router_key": len(self.router_keys),
            "aspa": len({a.customer for a, _ in self.aspas}),
        }


def _valid_keys(packed: bytes, expires: array[int], width: int, now: int) -> bytes:
    """The keys of ``packed`` still valid at ``now``, in order.

    The expired ones are marked at C speed and the others copied out in runs: no key becomes an
    object (splitting the global table into keys held ~90 MB at once).
    """
    if not expires or min(expires) > now:
        return packed
    return drop_marked(packed, width, bytearray(map(now.__ge__, expires)))
