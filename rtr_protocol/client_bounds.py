"""`ReplyBounds`: how many records and octets one unfinished reply may take on the router side.

One unfinished reply (Cache Response until End of Data) may stage at most max(
REPLY_RECORD_FLOOR = 3,000,000, REPLY_GROWTH = 4 × held) records (a record is a VRP, a router
key or one provider of an ASPA) and take at most max(REPLY_BYTE_FLOOR = 128 MiB, 4 × the wire
size of the data held) octets. Past either bound the reply is a protocol error: its staged
records are dropped, the data of the last End of Data stays. Why these numbers: 3 M records
admit a 1.5 M-VRP table doubling in one reply (today's table is ~0.75 M); the factor 4 admits a
delta that replaces everything held (2 × held records) while it grows; a staged record costs
~85-100 bytes (measured with tracemalloc, full replies of 1 M IPv4 / IPv6 prefixes), so at the
floor staging stays near 300 MB instead of growing without end (~800 MB after 6 M PDUs before).
The octet floor is the record floor in IPv6 prefix PDUs (3 M × 32 = 96 MB) with room to spare;
it also ends a reply that churns forever without staging anything (announce + withdraw of one
record) and bounds large Router Key PDUs. Both are checked as soon as a PDU (on the fast path:
a run of prefix PDUs) could have passed them, and at least every 64 KiB of the reply. Time
bounds on a reply (a drip, a reply that never ends) are the I/O layer's: it holds the clock.
"""

from __future__ import annotations

__all__ = ["REPLY_BYTE_FLOOR", "REPLY_GROWTH", "REPLY_RECORD_FLOOR", "ReplyBounds"]

REPLY_RECORD_FLOOR = 3_000_000
REPLY_BYTE_FLOOR = 128 * 1024 * 1024
REPLY_GROWTH = 4
#: The fewest octets a staged record costs on the wire (one more provider of an ASPA PDU): with
#: r records to go the count cannot pass its bound within 4·r octets, so it is checked no sooner.
_MIN_RECORD_OCTETS = 4
#: The bounds are checked at least once per this many octets of a reply.
_BOUND_CHECK_STEP = 65_536


class ReplyBounds:
    """The bounds of the reply being received, set from the data held when it began.

    Offsets are stream offsets (octets consumed on the connection, `PduFramer.consumed`).
    """

    __slots__ = (
        "_bytes_max",
        "_check_at",
        "_records_max",
        "_start",
        "byte_floor",
        "growth",
        "record_floor",
    )

    def __init__(self, record_floor: int, byte_floor: int, growth: int) -> None:
        """Keep the floors and the growth factor (each >= 1).

        Raises:
            ValueError: when one is below 1.
        """
        if min(record_floor, byte_floor, growth) < 1:
            raise ValueError("reply_record_floor, reply_byte_floor and reply_growth must be >= 1")
        self.record_floor = record_floor
        self.byte_floor = byte_floor
        self.growth = growth
        self._records_max = record_floor
        self._bytes_max = byte_floor
        self._start = self._check_at = 0

    def start(self, offset: int, held_records: int, held_octets: int) -> None:
        """A reply begins at ``offset``; ``held_records`` (``held_octets`` on the wire) are held."""
        self._records_max = max(self.record_floor, self.growth * held_records)
        self._bytes_max = max(self.byte_floor, self.growth * held_octets)
        self._start = self._check_at = offset

    def due(self, offset: int) -> bool:
        """True when `check` must run before reading past ``offset``."""
        return offset >= self._check_at

    def check(self, offset: int, staged: int) -> str | None:
        """Why the reply outgrew its bounds at ``offset`` with ``staged`` records, or None.

        None also schedules the next check.
        """
        octets = offset - self._start
        octets_max = self._bytes_max
        if octets > octets_max:
            return (
                f"a reply took more than {octets_max:,} octets without End of Data (the bound "
                f"is max({self.byte_floor:,}, {self.growth} x the data held)); "
                "its staged records are dropped"
            )
        records_max = self._records_max
        if staged > records_max:
            return (
                f"a reply staged more than {records_max:,} records without End of Data (the "
                f"bound is max({self.record_floor:,}, {self.growth} x the records "
                "held)); its staged records are dropped"
            )
        self._check_at = offset + min(
            _BOUND_CHECK_STEP,
            _MIN_RECORD_OCTETS * (records_max - staged + 1),
            octets_max - octets + 1,
        )
        return None
