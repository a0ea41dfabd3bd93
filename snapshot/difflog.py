"""`DiffLog`: deltas from each of the last N serials to the current one, bounded in count and bytes.

Immutable: `advance` returns a new log. Every entry is cumulative (it leads straight from its own
serial to the current serial, as in rtrtr), so answering a Serial Query is one lookup. The log
keeps at most ``max_entries`` entries and at most ``max_bytes`` of deltas (by `Delta.size_bytes`),
dropping the oldest first; a serial it no longer holds gets ``None`` (Cache Reset).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from snapshot.delta import EMPTY_DELTA, Delta, compose
from snapshot.serial import Serial

DEFAULT_MAX_ENTRIES = 10
DEFAULT_MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class DiffLog:
    """Cumulative deltas to ``current``, oldest first."""

    current: Serial
    max_entries: int = DEFAULT_MAX_ENTRIES
    max_bytes: int = DEFAULT_MAX_BYTES
    entries: tuple[tuple[Serial, Delta], ...] = ()
    total_bytes: int = 0
    _index: dict[int, Delta] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_entries < 0 or self.max_bytes < 0:
            raise ValueError("DiffLog bounds must not be negative")
        self._index.update((s.value, d) for s, d in self.entries)

    def advance(self, delta: Delta, new_serial: Serial) -> DiffLog:
        """The log after publishing ``delta`` as ``new_serial`` (the serial after ``current``)."""
        if self.current.add(1) != new_serial:
            raise ValueError(f"serial {new_serial} does not follow {self.current}")
        entries = [(s, compose(d, delta)) for s, d in self.entries]
        entries.append((self.current, delta))
        sizes = [d.size_bytes() for _, d in entries]
        total = sum(sizes)
        drop = 0
        while drop < len(entries) and (
            len(entries) - drop > self.max_entries or total > self.max_bytes
        ):
            total -= sizes[drop]
            drop += 1
        return DiffLog(new_serial, self.max_entries, self.max_bytes, tuple(entries[drop:]), total)

    def delta_since(self, serial: Serial) -> Delta | None:
        """The net delta from ``serial`` to ``current``; None when outside the window."""
        if serial == self.current:
            return EMPTY_DELTA
        return self._index.get(serial.value)

    @property
    def serials(self) -> tuple[Serial, ...]:
        """The serials a delta is held for, oldest first (``current`` not included)."""
        return tuple(s for s, _ in self.entries)

    def __len__(self) -> int:
        return len(self.entries)
