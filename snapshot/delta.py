"""Net changes between snapshots: `compute_delta`, `compose` (changes that cancel vanish), `apply`.

A `Delta` is always *net*: a key is either announced or withdrawn, never both. Packed VRP
announcements are sorted descending (announcement order) and withdrawals ascending (withdrawal
order), so an encoder emits them as they are. An ASPA change keeps the old and the new provider
set of the customer: on the wire it is one announce (replace) or one withdraw, and composing two
changes needs the old value to know whether they cancel.
"""

from __future__ import annotations

from dataclasses import dataclass

from snapshot.model import Aspa, RouterKey
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE, difference, join_sorted, split_keys
from snapshot.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class AspaChange:
    """The provider set of one customer before and after (None = no record)."""

    customer: int
    old: tuple[int, ...] | None
    new: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class Delta:
    """The net difference from one snapshot to another."""

    v4_announce: bytes = b""
    v4_withdraw: bytes = b""
    v6_announce: bytes = b""
    v6_withdraw: bytes = b""
    router_key_announce: tuple[RouterKey, ...] = ()
    router_key_withdraw: tuple[RouterKey, ...] = ()
    aspa: tuple[AspaChange, ...] = ()

    @property
    def aspa_announce(self) -> tuple[Aspa, ...]:
        """ASPA records to announce (new or replaced), ascending by customer."""
        return tuple(Aspa(c.customer, c.new) for c in self.aspa if c.new is not None)

    @property
    def aspa_withdraw(self) -> tuple[int, ...]:
        """Customers whose ASPA is withdrawn, ascending."""
        return tuple(c.customer for c in self.aspa if c.new is None)

    def is_empty(self) -> bool:
        """True when nothing changed."""
        return not (
            self.v4_announce
            or self.v4_withdraw
            or self.v6_announce
            or self.v6_withdraw
            or self.router_key_announce
            or self.router_key_withdraw
            or self.aspa
        )

    def counts(self) -> dict[str, int]:
        """Announced (+) and withdrawn (-) record counts by kind."""
        return {
            "vrp_announce": len(self.v4_announce) // V4_KEY_SIZE
            + len(self.v6_announce) // V6_KEY_SIZE,
            "vrp_withdraw": len(self.v4_withdraw) // V4_KEY_SIZE
            + len(self.v6_withdraw) // V6_KEY_SIZE,
            "router_key_announce": len(self.router_key_announce),
            "router_key_withdraw": len(self.router_key_withdraw),
            "aspa_announce": sum(1 for c in self.aspa if c.new is not None),
            "aspa_withdraw": sum(1 for c in self.aspa if c.new is None),
        }

    def size_bytes(self) -> int:
        """Approximate memory held, for the DiffLog byte budget."""
        size = 200 + sum(
            len(p) for p in (self.v4_announce, self.v4_withdraw, self.v6_announce, self.v6_withdraw)
        )
        for key in self.router_key_announce + self.router_key_withdraw:
            size += 100 + len(key.spki)
        for change in self.aspa:
            size += 100 + 8 * (len(change.old or ()) + len(change.new or ()))
        return size


EMPTY_DELTA = Delta()


def _router_key_tuple(keys: set[RouterKey]) -> tuple[RouterKey, ...]:
    return tuple(sorted(keys, key=RouterKey.sort_key))


def compute_delta(old: Snapshot, new: Snapshot) -> Delta:
    """The net delta that turns ``old`` into ``new``."""
    v4_announce, v4_withdraw = difference(old.v4, new.v4, V4_KEY_SIZE)
    v6_announce, v6_withdraw = difference(old.v6, new.v6, V6_KEY_SIZE)
    old_keys, new_keys = set(old.router_keys), set(new.router_keys)
    old_aspa = {a.customer: a.providers for a in old.aspas}
    new_aspa = {a.customer: a.providers for a in new.aspas}
    changes = tuple(
        AspaChange(c, old_aspa.get(c), new_aspa.get(c))
        for c in sorted(old_aspa.keys() | new_aspa.keys())
        if old_aspa.get(c) != new_aspa.get(c)
    )
    return Delta(
        v4_announce,
        v4_withdraw,
        v6_announce,
        v6_withdraw,
        _router_key_tuple(new_keys - old_keys),
        _router_key_tuple(old_keys - new_keys),
        changes,
    )


def _compose_sets(a1: bytes, w1: bytes, a2: bytes, w2: bytes, width: int) -> tuple[bytes, bytes]:
    if not (a1 or w1):
        return a2, w2
    if not (a2 or w2):
        return a1, w1
    sa1, sw1 = set(split_keys(a1, width)), set(split_keys(w1, width))
    sa2, sw2 = set(split_keys(a2, width)), set(split_keys(w2, width))
    return (
        join_sorted((sa1 - sw2) | (sa2 - sw1), descending=True),
        join_sorted((sw1 - sa2) | (sw2 - sa1), descending=False),
    )


def compose(first: Delta, second: Delta) -> Delta:
    """The net delta of applying ``first`` then ``second``; changes that cancel out vanish."""
    if first.is_empty():
        return second
    if second.is_empty():
        return first
    v4_announce, v4_withdraw = _compose_sets(
        first.v4_announce, first.v4_withdraw, second.v4_announce, second.v4_withdraw, V4_KEY_SIZE
    )
    v6_announce, v6_withdraw = _compose_sets(
        first.v6_announce, first.v6_withdraw, second.v6_announce, second.v6_withdraw, V6_KEY_SIZE
    )
    ka1, kw1 = set(first.router_key_announce), set(first.router_key_withdraw)
    ka2, kw2 = set(second.router_key_announce), set(second.router_key_withdraw)
    aspa: dict[int, AspaChange] = {c.customer: c for c in first.aspa}
    for change in second.aspa:
        before = aspa.get(change.customer)
        old = before.old if before is not None else change.old
        aspa[change.customer] = AspaChange(change.customer, old, change.new)
    return Delta(
        v4_announce,
        v4_withdraw,
        v6_announce,
        v6_withdraw,
        _router_key_tuple((ka1 - kw2) | (ka2 - kw1)),
        _router_key_tuple((kw1 - ka2) | (kw2 - ka1)),
        tuple(c for _, c in sorted(aspa.items()) if c.old != c.new),
    )


class DeltaMismatchError(ValueError):
    """Raised when a delta does not fit the snapshot it is applied to."""


def _apply_set(base: bytes, announce: bytes, withdraw: bytes, width: int) -> bytes:
    if not (announce or withdraw):
        return base
    keys = set(split_keys(base, width))
    gone, added = set(split_keys(withdraw, width)), set(split_keys(announce, width))
    if not gone <= keys or added & keys:
        raise DeltaMismatchError("delta withdraws unknown or announces present VRPs")
    return join_sorted((keys - gone) | added, descending=True)


def apply(delta: Delta, base: Snapshot) -> Snapshot:
    """The snapshot that results from applying ``delta`` to ``base`` (checked strictly)."""
    keys = set(base.router_keys)
    gone, added = set(delta.router_key_withdraw), set(delta.router_key_announce)
    if not gone <= keys or added & keys:
        raise DeltaMismatchError("delta withdraws unknown or announces present router keys")
    aspas = {a.customer: a.providers for a in base.aspas}
    for change in delta.aspa:
        if aspas.get(change.customer) != change.old:
            raise DeltaMismatchError(f"ASPA of AS{change.customer} is not what the delta expects")
        if change.new is None:
            del aspas[change.customer]
        else:
            aspas[change.customer] = change.new
    return Snapshot(
        _apply_set(base.v4, delta.v4_announce, delta.v4_withdraw, V4_KEY_SIZE),
        _apply_set(base.v6, delta.v6_announce, delta.v6_withdraw, V6_KEY_SIZE),
        _router_key_tuple((keys - gone) | added),
        tuple(Aspa(c, p) for c, p in sorted(aspas.items())),
    )
