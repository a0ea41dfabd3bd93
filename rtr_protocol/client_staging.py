"""The router side's staging: the data held per kind and the reply staged until End of Data.

Payload is staged and applied only at End of Data; duplicates and unknown withdrawals are
judged against current + staged data. VRPs are also held as one descending packed string per
family (the `Snapshot` form, `snapshot.packed`): a small delta is spliced into it, a large one
re-sorted.
"""

from __future__ import annotations

import itertools
from typing import Generic, TypeVar

from rtr_protocol.constants import PDU_TYPES_BY_VERSION, PduType
from snapshot.model import Aspa, RouterKey
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE, splice, split_keys
from snapshot.snapshot import Snapshot

__all__ = [
    "SPLICE_RATIO",
    "AspaStaging",
    "KeyStaging",
    "PackedKeyStaging",
    "Staging",
]

_K = TypeVar("_K", bytes, RouterKey)

#: Wire size of a held record: IPv4 / IPv6 prefix PDU, Router Key and ASPA fixed parts.
_V4_PDU, _V6_PDU, _KEY_FIXED, _ASPA_FIXED = 20, 32, 32, 12


class KeyStaging(Generic[_K]):
    """One kind of keyed payload (VRPs of a family, router keys): held keys + a staged reply."""

    __slots__ = ("added", "current", "full", "removed")

    def __init__(self) -> None:
        #: Held keys (a dict for its hashing; the order is irrelevant).
        self.current: dict[_K, None] = {}
        self.added: dict[_K, None] = {}
        self.removed: set[_K] = set()
        self.full = False

    def begin(self, *, full: bool) -> None:
        """Start staging a reply; ``full`` (a Reset Query's reply) replaces everything."""
        self.added = {}
        self.removed = set()
        self.full = full

    def announce(self, key: _K) -> bool:
        """Stage an announce; False when the key is already held (Error 7)."""
        if key in self.added:
            return False
        if key in self.removed:
            self.removed.discard(key)  # withdrawn earlier in this reply: net no change
            return True
        if not self.full and key in self.current:
            return False
        self.added[key] = None
        return True

    def announce_all(self, keys: list[_K]) -> int:
        """Stage announces of ``keys`` in a full reply; -1, or the index of the first duplicate."""
        added = self.added
        before = len(added)
        added.update(dict.fromkeys(keys))
        if len(added) == before + len(keys):
            return -1
        # Error path: the first ``before`` entries are what was held (update only appends).
        held = set(itertools.islice(added, before))
        for index, key in enumerate(keys):
            if key in held:
                return index
            held.add(key)
        raise AssertionError("unreachable: a duplicate was counted")  # pragma: no cover

    def withdraw(self, key: _K) -> bool:
        """Stage a withdraw; False when the key is not held (Error 6)."""
        if key in self.added:
            del self.added[key]
            return True
        if self.full or key in self.removed or key not in self.current:
            return False
        self.removed.add(key)
        return True

    def staged(self) -> int:
        """The number of records the reply staged so far."""
        return len(self.added) + len(self.removed)

    def staged_change(self) -> bool:
        """True when applying the staged reply may change `current`."""
        return self.full or bool(self.added) or bool(self.removed)

    def apply(self) -> None:
        """Make the staged state current."""
        if self.full:
            self.current = self.added
        else:
            current = self.current
            for key in self.removed:
                del current[key]
            current.update(self.added)
        self.begin(full=False)

    def drop_current(self) -> None:
        """Forget the held keys (staging goes on)."""
        self.current = {}


class PackedKeyStaging(KeyStaging[bytes]):
    """VRP keys of one family, also kept as one descending packed string (the Snapshot form)."""

    __slots__ = ("packed", "width")

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width
        #: The held keys, sorted descending and joined (see `snapshot.model`).
        self.packed = b""

    def apply(self) -> None:
        """Make the staged state current; a small delta is spliced into `packed`."""
        if self.full:
            keys = list(self.added)
            keys.sort(reverse=True)  # a cache sends them in this order: a linear check
            self.packed = b"".join(keys)
        elif self.added or self.removed:
            changes = len(self.added) + len(self.removed)
            if changes * SPLICE_RATIO < len(self.current):
                self.packed = splice(self.packed, self.width, self.removed, self.added)
            else:
                removed = self.removed
                keys = split_keys(self.packed, self.width)
                if removed:
                    keys = [k for k in keys if k not in removed]
                keys.extend(self.added)
                keys.sort(reverse=True)  # two runs: merged in linear time
                self.packed = b"".join(keys)
        super().apply()

    def drop_current(self) -> None:
        """Forget the held keys (staging goes on)."""
        super().drop_current()
        self.packed = b""


#: A delta smaller than 1/64 of the held keys is spliced into the packed string (binary
#: searches, `snapshot.packed.splice`); a larger one rebuilds it by sorting.
SPLICE_RATIO = 64


class AspaStaging:
    """The ASPAs held (customer → providers) and those a reply staged (None: withdrawn)."""

    __slots__ = ("current", "full", "staged", "weight")

    def __init__(self) -> None:
        self.current: dict[int, tuple[int, ...]] = {}
        self.staged: dict[int, tuple[int, ...] | None] = {}
        #: Records the staged ASPA PDUs count for the reply bound: every provider of an
        #: announce (a replaced set still counts) and 1 per withdraw.
        self.weight = 0
        self.full = False

    def begin(self, *, full: bool) -> None:
        """Start staging a reply; ``full`` (a Reset Query's reply) replaces everything."""
        self.staged = {}
        self.weight = 0
        self.full = full

    def announce(self, aspa: Aspa) -> None:
        """Stage an announce: it replaces the customer's provider set (bis §5.12)."""
        self.staged[aspa.customer] = aspa.providers
        self.weight += len(aspa.providers)

    def withdraw(self, customer: int) -> bool:
        """Stage a withdraw; False when the customer's ASPA is not held (Error 6)."""
        staged = self.staged
        if customer in staged:
            held = staged[customer] is not None
        else:
            held = not self.full and customer in self.current
        if not held:
            return False
        staged[customer] = None
        self.weight += 1
        return True

    def apply(self) -> bool:
        """Make the staged state current; True when that changed it."""
        staged = self.staged
        if self.full:
            new = {c: p for c, p in staged.items() if p is not None}
        elif staged:
            new = dict(self.current)
            for customer, providers in staged.items():
                if providers is None:
                    del new[customer]
                else:
                    new[customer] = providers
        else:
            return False
        changed = new != self.current
        self.current = new
        self.begin(full=False)
        return changed


class Staging:
    """Everything one cache's session holds and stages: VRPs by family, router keys, ASPAs."""

    __slots__ = ("aspas", "keys", "v4", "v6")

    def __init__(self) -> None:
        self.v4 = PackedKeyStaging(V4_KEY_SIZE)
        self.v6 = PackedKeyStaging(V6_KEY_SIZE)
        self.keys: KeyStaging[RouterKey] = KeyStaging()
        self.aspas = AspaStaging()

    def begin(self, *, full: bool = False) -> None:
        """Start staging a reply (``full``: it replaces everything); without it, drop the staged."""
        self.v4.begin(full=full)
        self.v6.begin(full=full)
        self.keys.begin(full=full)
        self.aspas.begin(full=full)

    def staged(self) -> int:
        """Records the reply staged so far (each ASPA provider counts, see `AspaStaging`)."""
        return self.v4.staged() + self.v6.staged() + self.keys.staged() + self.aspas.weight

    def held(self) -> tuple[int, int]:
        """The records held and their wire size in octets (for the reply bounds)."""
        v4, v6, keys, aspas = (
            len(self.v4.current),
            len(self.v6.current),
            self.keys.current,
            self.aspas.current,
        )
        providers = sum(map(len, aspas.values()))
        octets = (
            _V4_PDU * v4
            + _V6_PDU * v6
            + sum(_KEY_FIXED + len(key.spki) for key in keys)
            + _ASPA_FIXED * len(aspas)
            + 4 * providers
        )
        return v4 + v6 + len(keys) + providers, octets

    def apply(self) -> bool:
        """Make the staged reply current; True when that may have changed the data."""
        changed = self.v4.staged_change() or self.v6.staged_change() or self.keys.staged_change()
        self.v4.apply()
        self.v6.apply()
        self.keys.apply()
        return self.aspas.apply() or changed

    def drop_current(self) -> None:
        """Forget the data held (staging goes on)."""
        self.v4.drop_current()
        self.v6.drop_current()
        self.keys.drop_current()
        self.aspas.current = {}

    def trim(self, version: int) -> bool:
        """Drop held kinds ``version`` has no PDU for; True when something was dropped."""
        types = PDU_TYPES_BY_VERSION[version]
        trimmed = False
        if PduType.ASPA not in types and self.aspas.current:
            self.aspas.current = {}
            trimmed = True
        if PduType.ROUTER_KEY not in types and self.keys.current:
            self.keys.drop_current()
            trimmed = True
        return trimmed

    def snapshot(self) -> Snapshot:
        """The data held, as a `Snapshot`."""
        return Snapshot(
            self.v4.packed,
            self.v6.packed,
            tuple(sorted(self.keys.current, key=RouterKey.sort_key)),
            tuple(Aspa(c, p) for c, p in sorted(self.aspas.current.items())),
        )
