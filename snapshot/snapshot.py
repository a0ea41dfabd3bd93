"""Immutable payload sets (`Snapshot`) and the builder every source uses to make one.

A Snapshot holds the VRPs as two packed byte strings of fixed-width keys (`snapshot.packed`),
sorted descending, i.e. in 8210bis announcement order, without duplicates: ~10 MB for a
723k-VRP table instead of hundreds of MB of objects, and an encoder can turn it into PDUs with a
few strided copies. Router keys and ASPAs are few; they stay tuples of value objects, sorted in
wire order (router keys by `RouterKey.sort_key`, ASPAs by customer, one record per customer).

Queries never write to a snapshot (contract L-32): its lookup structures (ASPAs by customer, the
origin-validation index, the digest) are made by `Snapshot.prepare`, which the one owner that
builds a snapshot calls in its build thread before publishing it. A snapshot that was never
prepared still answers every query, by searching its sorted parts instead (slower, no writes).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Iterator
from typing import Final

from snapshot.model import Aspa, RouterKey, Vrp, pack_v4, pack_v6
from snapshot.origin_index import OriginIndex
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE, join_sorted, split_keys

__all__ = [
    "EMPTY",
    "Snapshot",
    "SnapshotBuilder",
]


class Snapshot:
    """One complete, immutable set of RPKI payload. Equality is equality of content."""

    __slots__ = (
        "__weakref__",
        "_aspa_index",
        "_digest",
        "_origin_index",
        "aspas",
        "router_keys",
        "v4",
        "v6",
    )

    v4: bytes
    v6: bytes
    router_keys: tuple[RouterKey, ...]
    aspas: tuple[Aspa, ...]

    def __init__(
        self,
        v4: bytes = b"",
        v6: bytes = b"",
        router_keys: tuple[RouterKey, ...] = (),
        aspas: tuple[Aspa, ...] = (),
    ) -> None:
        """Wrap already-canonical parts; use `build` or `SnapshotBuilder` to make them."""
        if len(v4) % V4_KEY_SIZE or len(v6) % V6_KEY_SIZE:
            raise ValueError("packed VRP strings must be whole keys")
        self.v4 = v4
        self.v6 = v6
        self.router_keys = router_keys
        self.aspas = aspas
        self._aspa_index: dict[int, Aspa] | None = None
        self._digest: bytes | None = None
        self._origin_index: OriginIndex | None = None

    @classmethod
    def build(
        cls,
        vrps: Iterable[Vrp] = (),
        aspas: Iterable[Aspa] = (),
        router_keys: Iterable[RouterKey] = (),
    ) -> Snapshot:
        """Build from value objects: duplicates are dropped, ASPAs merged per customer."""
        builder = SnapshotBuilder()
        for vrp in vrps:
            builder.add_vrp(vrp)
        for aspa in aspas:
            builder.add_aspa(aspa)
        for key in router_keys:
            builder.add_router_key(key)
        return builder.build()

    # ------------------------------------------------------------------ views
    @property
    def v4_count(self) -> int:
        """Number of IPv4 VRPs."""
        return len(self.v4) // V4_KEY_SIZE

    @property
    def v6_count(self) -> int:
        """Number of IPv6 VRPs."""
        return len(self.v6) // V6_KEY_SIZE

    @property
    def vrp_count(self) -> int:
        """Number of VRPs."""
        return self.v4_count + self.v6_count

    def vrps(self) -> Iterator[Vrp]:
        """All VRPs as value objects, IPv4 first, each family in announcement order."""
        for i in range(0, len(self.v4), V4_KEY_SIZE):
            yield Vrp.from_key(self.v4[i : i + V4_KEY_SIZE])
        for i in range(0, len(self.v6), V6_KEY_SIZE):
            yield Vrp.from_key(self.v6[i : i + V6_KEY_SIZE])

    # ------------------------------------------------------------------ query structures
    def prepare(self, like: Snapshot | None = None) -> Snapshot:
        """Make the query structures now; returns the snapshot itself. Idempotent.

        The owner calls it in the thread that built the snapshot, before anyone else can see
        it: afterwards queries only read. A family whose packed keys equal those of the
        prepared snapshot ``like`` (the one published before) reuses its origin index.
        """
        if self._origin_index is None:
            self._aspa_index = {a.customer: a for a in self.aspas}
            self.digest()
            previous = like.origin_index if like is not None else None
            self._origin_index = OriginIndex.build(self.v4, self.v6, previous)
        return self

    @property
    def prepared(self) -> bool:
        """True once `prepare` ran: queries use its structures."""
        return self._origin_index is not None

    @property
    def origin_index(self) -> OriginIndex | None:
        """The origin-validation index made by `prepare` (None before)."""
        return self._origin_index

    def aspa_for(self, customer: int) -> Aspa | None:
        """The merged ASPA of ``customer``, if any (writes nothing, prepared or not)."""
        if self._aspa_index is not None:
            return self._aspa_index.get(customer)
        aspas = self.aspas  # sorted by customer, one record each
        i = bisect.bisect_left(aspas, customer, key=lambda a: a.customer)
        return aspas[i] if i < len(aspas) and aspas[i].customer == customer else None

    def is_empty(self) -> bool:
        """True when the snapshot holds no payload at all."""
        return not (self.v4 or self.v6 or self.router_keys or self.aspas)

    def digest(self) -> bytes:
        """SHA-256 over a canonical serialisation of the content.

        Made by `prepare`; on a snapshot never prepared it is computed at the first call and
        kept (one assignment of an immutable value, the same by every thread that makes it).
        """
        if self._digest is None:
            h = hashlib.sha256()
            for part in (self.v4, self.v6):
                h.update(len(part).to_bytes(8, "big"))
                h.update(part)
            h.update(len(self.router_keys).to_bytes(8, "big"))
            for key in self.router_keys:
                h.update(key.sort_key())
            h.update(len(self.aspas).to_bytes(8, "big"))
            for aspa in self.aspas:
                h.update(aspa.customer.to_bytes(4, "big") + len(aspa.providers).to_bytes(4, "big"))
                h.update(b"".join(p.to_bytes(4, "big") for p in aspa.providers))
            self._digest = h.digest()
        return self._digest

    def counts(self) -> dict[str, int]:
        """Record counts by kind (for logs and metrics)."""
        return {
            "vrp_v4": self.v4_count,
            "vrp_v6": self.v6_count,
            "router_key": len(self.router_keys),
            "aspa": len(self.aspas),
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Snapshot):
            return NotImplemented
        return (
            self.v4 == other.v4
            and self.v6 == other.v6
            and self.router_keys == other.router_keys
            and self.aspas == other.aspas
        )

    def __hash__(self) -> int:
        return hash(self.digest())

    def __repr__(self) -> str:
        c = self.counts()
        return (
            f"Snapshot(v4={c['vrp_v4']}, v6={c['vrp_v6']}, "
            f"router_keys={c['router_key']}, aspas={c['aspa']})"
        )


EMPTY: Final = Snapshot().prepare()


class SnapshotBuilder:
    """Collects records (validating each), de-duplicates, and builds one `Snapshot`.

    The ``add_v4``/``add_v6`` fast paths take integers so a parser need not build `Vrp` objects.
    """

    __slots__ = ("_aspas", "_router_keys", "_v4", "_v6")

    def __init__(self) -> None:
        """Start empty."""
        self._v4: set[bytes] = set()
        self._v6: set[bytes] = set()
        self._router_keys: set[RouterKey] = set()
        self._aspas: dict[int, set[int]] = {}

    def add_v4(self, address: int, prefix_length: int, max_length: int, asn: int) -> None:
        """Add one IPv4 VRP given as integers (validated)."""
        self._v4.add(pack_v4(address, prefix_length, max_length, asn))

    def add_v6(self, address: int, prefix_length: int, max_length: int, asn: int) -> None:
        """Add one IPv6 VRP given as integers (validated)."""
        self._v6.add(pack_v6(address, prefix_length, max_length, asn))

    def add_vrp(self, vrp: Vrp) -> None:
        """Add one VRP."""
        (self._v4 if vrp.is_ipv4 else self._v6).add(vrp.key())

    def add_aspa(self, aspa: Aspa) -> None:
        """Add one ASPA; several for one customer are merged (union)."""
        self._aspas.setdefault(aspa.customer, set()).update(aspa.providers)

    def add_router_key(self, key: RouterKey) -> None:
        """Add one router key."""
        self._router_keys.add(key)

    def update(self, other: Snapshot) -> None:
        """Add every record of ``other`` (union)."""
        self._v4.update(split_keys(other.v4, V4_KEY_SIZE))
        self._v6.update(split_keys(other.v6, V6_KEY_SIZE))
        self._router_keys.update(other.router_keys)
        for aspa in other.aspas:
            self.add_aspa(aspa)

    def __len__(self) -> int:
        return len(self._v4) + len(self._v6) + len(self._router_keys) + len(self._aspas)

    def build(self) -> Snapshot:
        """The canonical snapshot of everything added so far."""
        return Snapshot(
            join_sorted(self._v4, descending=True),
            join_sorted(self._v6, descending=True),
            tuple(sorted(self._router_keys, key=RouterKey.sort_key)),
            tuple(Aspa(c, tuple(p)) for c, p in sorted(self._aspas.items())),
        )
