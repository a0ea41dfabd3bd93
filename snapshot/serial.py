"""RFC 1982 serial numbers (SERIAL_BITS = 32) and RTR session ids.

Comparison is only defined for distances below 2^31; at exactly 2^31 it is undefined, which
`Serial.compare` reports as ``None`` and callers treat as "unknown serial" (Cache Reset).
Addition is only defined for 0..2^31-1, so there is an `add` method and no ``+`` operator.
"""

from __future__ import annotations

from dataclasses import dataclass

SERIAL_MODULUS = 1 << 32
SERIAL_HALF = 1 << 31
SESSION_ID_MAX = 0xFFFF


@dataclass(frozen=True, slots=True)
class Serial:
    """An unsigned 32-bit serial number with RFC 1982 arithmetic."""

    value: int

    def __post_init__(self) -> None:
        if type(self.value) is not int or not 0 <= self.value < SERIAL_MODULUS:
            raise ValueError(f"serial {self.value!r} outside 0..2^32-1")

    def add(self, n: int = 1) -> Serial:
        """RFC 1982 §3.1 addition, wrapping at 2^32; ``n`` must be in 0..2^31-1."""
        if not 0 <= n < SERIAL_HALF:
            raise ValueError(f"serial addition of {n} is undefined (RFC 1982 §3.1)")
        return Serial((self.value + n) % SERIAL_MODULUS)

    def compare(self, other: Serial) -> int | None:
        """-1, 0 or 1 as ``self`` is before, equal to or after ``other``; None when undefined."""
        if self.value == other.value:
            return 0
        distance = (other.value - self.value) % SERIAL_MODULUS
        if distance == SERIAL_HALF:
            return None
        return -1 if distance < SERIAL_HALF else 1

    def precedes(self, other: Serial) -> bool:
        """True when ``self`` is strictly before ``other`` (False when undefined)."""
        return self.compare(other) == -1

    def distance_to(self, other: Serial) -> int | None:
        """Steps forward from ``self`` to ``other``; None when ``other`` is not after or equal."""
        order = self.compare(other)
        if order is None or order == 1:
            return None
        return (other.value - self.value) % SERIAL_MODULUS

    def __int__(self) -> int:
        return self.value

    def __str__(self) -> str:
        return str(self.value)


def check_session_id(value: int) -> int:
    """Return ``value`` if it is a 16-bit session id, else raise ValueError."""
    if type(value) is not int or not 0 <= value <= SESSION_ID_MAX:
        raise ValueError(f"session id {value!r} outside 0..65535")
    return value
