"""`PublishedState` (what routers are served) and `Publisher`, the pure rule making the next one.

A publish happens only when the content differs: the serial then advances by one (RFC 1982) and
the delta enters the DiffLog. The caller swaps the returned state in with one assignment, so a
reader that captured a state keeps a consistent (snapshot, serial, difflog) triple. A
`Continuation` (what a previous process image served) is taken up by the first publish only
when that snapshot has the very content it names: same content, same session ids and serial.
"""

from __future__ import annotations

from dataclasses import dataclass

from snapshot.delta import Delta, compute_delta
from snapshot.difflog import DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES, DiffLog
from snapshot.serial import Serial, check_session_id
from snapshot.snapshot import Snapshot

#: RTR protocol versions we keep a session id for (RFC 6810, RFC 8210, 8210bis).
VERSIONS = (0, 1, 2)
SERIAL_ZERO = Serial(0)


@dataclass(frozen=True, slots=True)
class SessionIds:
    """One 16-bit session id per protocol version, all distinct (8210bis §5.1 SHOULD)."""

    v0: int
    v1: int
    v2: int

    def __post_init__(self) -> None:
        ids = (check_session_id(self.v0), check_session_id(self.v1), check_session_id(self.v2))
        if len(set(ids)) != len(ids):
            raise ValueError(f"session ids per version must be distinct, got {ids}")

    @property
    def values(self) -> tuple[int, int, int]:
        """The ids of versions 0, 1 and 2, in that order."""
        return (self.v0, self.v1, self.v2)

    def for_version(self, version: int) -> int:
        """The session id used on sessions of ``version``."""
        if version not in VERSIONS:
            raise ValueError(f"no RTR version {version}")
        return self.values[version]

    @classmethod
    def from_random(cls, draw: bytes) -> SessionIds:
        """Derive three distinct ids from at least 2 random octets (the caller supplies entropy)."""
        if len(draw) < 2:
            raise ValueError("need at least 2 random octets")
        base = int.from_bytes(draw[:2], "big")
        return cls(base, (base + 0x5555) & 0xFFFF, (base + 0xAAAA) & 0xFFFF)


@dataclass(frozen=True, slots=True)
class Continuation:
    """What a previous process image served last: its session ids, serial and content digest."""

    session_ids: SessionIds
    serial: Serial
    #: `Snapshot.digest` of the content served at ``serial``.
    digest: bytes


@dataclass(frozen=True, slots=True)
class PublishedState:
    """A published snapshot with its serial, session ids and history."""

    snapshot: Snapshot
    serial: Serial
    session_ids: SessionIds
    difflog: DiffLog
    #: The delta that produced this state (None for the first state of a session).
    last_delta: Delta | None = None

    def delta_since(self, serial: Serial) -> Delta | None:
        """Net delta from ``serial`` to this state; None when it is outside the window."""
        return self.difflog.delta_since(serial)


class Publisher:
    """Decides the next `PublishedState`; holds no lock and does no I/O."""

    def __init__(
        self,
        session_ids: SessionIds,
        *,
        initial_serial: Serial = SERIAL_ZERO,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        continuation: Continuation | None = None,
    ) -> None:
        """Nothing is published until the first `publish`.

        With ``continuation``, the first snapshot whose digest is the continuation's is
        published at its serial under its session ids (``continued`` then says so); any other
        first snapshot gets ``session_ids``, which must differ from the continuation's.
        """
        if continuation is not None and set(session_ids.values) & set(
            continuation.session_ids.values
        ):
            raise ValueError("session ids must differ from the continued ones")
        self.session_ids = session_ids
        self.initial_serial = initial_serial
        self.continuation = continuation
        #: True when the first publish continued what the previous image served.
        self.continued = False
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.current: PublishedState | None = None

    def publish(self, snapshot: Snapshot) -> PublishedState | None:
        """Make ``snapshot`` current; returns the new state, or None when nothing changed."""
        prev = self.current
        if prev is None:
            offer, self.continuation = self.continuation, None
            if offer is not None and snapshot.digest() == offer.digest:
                self.session_ids, self.initial_serial = offer.session_ids, offer.serial
                self.continued = True
            state = PublishedState(
                snapshot,
                self.initial_serial,
                self.session_ids,
                DiffLog(self.initial_serial, self.max_entries, self.max_bytes),
            )
        else:
            if snapshot == prev.snapshot:
                return None
            delta = compute_delta(prev.snapshot, snapshot)
            serial = prev.serial.add(1)
            state = PublishedState(
                snapshot, serial, self.session_ids, prev.difflog.advance(delta, serial), delta
            )
        self.current = state
        return state
