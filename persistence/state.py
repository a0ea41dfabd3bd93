"""The persisted state (header fields, sources, payloads) and its canonical SHA-256 digests.

Pure data, no I/O. Times are signed integer microseconds since the Unix epoch (UTC); an entry
that never expires carries `NEVER`. VRPs stay in the packed form of `snapshot.packed` (one
``bytes`` per family, sorted descending) with one expiry per key, so a state of the full global
table costs a few megabytes and hashes in milliseconds.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field

from snapshot.model import Aspa, RouterKey
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE

SCHEMA_VERSION = 2
NEVER = (1 << 63) - 1
US_PER_SECOND = 1_000_000
#: Payload kinds as stored (a bitmask in the ``sources`` table).
KIND_BITS = {"vrp": 1, "router_key": 2, "aspa": 4}
ASN_MAX = 0xFFFF_FFFF
#: The largest RTR session id (16 bits).
SESSION_MAX = 0xFFFF


def kinds_to_mask(kinds: Iterable[str]) -> int:
    """The bitmask of payload kind names."""
    mask = 0
    for kind in kinds:
        mask |= KIND_BITS[kind]
    return mask


def mask_to_kinds(mask: int) -> frozenset[str]:
    """The payload kind names of a bitmask."""
    return frozenset(kind for kind, bit in KIND_BITS.items() if mask & bit)


def seconds_to_us(value: float) -> int:
    """Unix seconds to microseconds; values beyond the int64 range mean `NEVER`."""
    us = round(value * US_PER_SECOND)
    return NEVER if us >= NEVER else us


@dataclass(frozen=True, slots=True)
class StateId:
    """Identifies one persisted state: the owner's epoch (one per start) and its generation."""

    epoch: int
    generation: int

    def __str__(self) -> str:
        return f"{self.epoch}.{self.generation}"


@dataclass(frozen=True, slots=True, eq=False)
class SourceRecord:
    """One source's complete payload, as it was accepted, with its metadata."""

    name: str
    group: str
    #: Source kind: ``file``, ``http`` or ``rtr``.
    kind: str
    #: Whether the payload is a complete load (always true today: partial loads are never kept).
    complete: bool
    #: Payload kinds the source can deliver, and the kinds it contributed to the published set.
    capabilities: frozenset[str]
    selected: frozenset[str]
    #: Wall time the payload was accepted.
    accepted_at: int
    #: Where the source reads from (path or URL); with the name, its identity.
    location: str = ""
    #: Effective time at which the payload was last evaluated (judged usable and admitted into
    #: the published set): a lower bound of UTC. Stored, but no part of the digest.
    evaluated_at: int = 0
    #: Source-wide end of validity (an RTR source's Expire interval); `NEVER` if none.
    expires_at: int = NEVER
    rtr_session: int | None = None
    rtr_serial: int | None = None
    generated_at: int | None = None
    #: The source's full identity as a non-sensitive digest (kind, endpoint, protocol range,
    #: format, trust configuration, validity policy; header values never): recovery revives
    #: the record only into a source of the same identity. None: stored before it was.
    identity: str | None = None
    v4: bytes = b""
    v4_expires: array[int] = field(default_factory=lambda: array("q"))
    v6: bytes = b""
    v6_expires: array[int] = field(default_factory=lambda: array("q"))
    router_keys: tuple[tuple[RouterKey, int], ...] = ()
    aspas: tuple[tuple[Aspa, int], ...] = ()

    def __post_init__(self) -> None:
        if len(self.v4) % V4_KEY_SIZE or len(self.v4) // V4_KEY_SIZE != len(self.v4_expires):
            raise ValueError(f"source {self.name}: IPv4 keys and expiries do not match")
        if len(self.v6) % V6_KEY_SIZE or len(self.v6) // V6_KEY_SIZE != len(self.v6_expires):
            raise ValueError(f"source {self.name}: IPv6 keys and expiries do not match")

    @property
    def vrp_count(self) -> int:
        """Number of VRPs (both families)."""
        return len(self.v4_expires) + len(self.v6_expires)

    def same_content(self, other: SourceRecord) -> bool:
        """Equal fields and payloads."""
        return _source_digest(self) == _source_digest(other)

    def content_digest(self) -> bytes:
        """SHA-256 of the fields and payloads (``evaluated_at`` left out): its representation."""
        return _source_digest(self)


@dataclass(frozen=True, slots=True, eq=False)
class PersistedState:
    """Everything one commit writes, except the time it is written."""

    store_id: str
    state_id: StateId
    config_revision: int
    serial: int
    #: The RTR session ids (v0, v1, v2) routers were served under.
    session_ids: tuple[int, int, int]
    published_at: int
    package_version: str
    sources: tuple[SourceRecord, ...] = ()
    #: The lower bound of effective time the owner had observed when it built the state.
    #: Stored with the state, no part of the digest; it raises the commit's ``written_at``.
    observed_at: int = 0
    #: The stored state a restart recovered from, when this state was built by a recovery (the
    #: database's old publish version, contract P-54); None otherwise. Stored in the header and
    #: covered by the header digest, no part of the state digest.
    recovered_from: StateId | None = None

    def __post_init__(self) -> None:
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise ValueError(f"source names must be unique: {names}")

    def digest(self) -> bytes:
        """SHA-256 over the canonical serialisation of the state (the state digest)."""
        h = hashlib.sha256(b"rtr-serve state v2\x00")
        _put_str(h, self.store_id)
        for value in (
            self.state_id.epoch,
            self.state_id.generation,
            self.config_revision,
            self.serial,
            *self.session_ids,
            self.published_at,
            len(self.sources),
        ):
            _put_int(h, value)
        _put_str(h, self.package_version)
        for source in sorted(self.sources, key=lambda s: s.name):
            h.update(_source_digest(source))
        return h.digest()

    def time_floor(self) -> int:
        """The latest time the state shows was reached: a commit's ``written_at`` is no earlier.

        The maximum of ``observed_at``, ``published_at`` and every source's ``evaluated_at``
        and ``accepted_at``.
        """
        return max(
            self.observed_at,
            self.published_at,
            *(max(s.evaluated_at, s.accepted_at) for s in self.sources),
        )

    def vrp_count(self) -> int:
        """VRPs over all sources."""
        return sum(s.vrp_count for s in self.sources)


@dataclass(frozen=True, slots=True)
class StateHeader:
    """The one-row header as stored."""

    schema_version: int
    store_id: str
    state_id: StateId
    config_revision: int
    serial: int
    session_ids: tuple[int, int, int]
    published_at: int
    written_at: int
    state_digest: bytes
    header_digest: bytes
    package_version: str
    #: `PersistedState.observed_at` and the `evaluated_digest` of the sources; both None in a
    #: header written before they were stored (see `persistence.meta_rows`).
    observed_at: int | None = None
    evaluated_digest: bytes | None = None
    #: `PersistedState.recovered_from`; None too in a header written before it was stored.
    recovered_from: StateId | None = None

    def computed_digest(self) -> bytes:
        """SHA-256 over every other header field (what ``header_digest`` must equal)."""
        return header_digest(
            self.schema_version,
            self.store_id,
            self.state_id,
            self.config_revision,
            self.serial,
            self.session_ids,
            self.published_at,
            self.written_at,
            self.state_digest,
            self.package_version,
            observed_at=self.observed_at,
            evaluated_digest=self.evaluated_digest,
            recovered_from=self.recovered_from,
        )

    def receipt(self, *, retried: bool = False) -> PersistReceipt:
        """The `PersistReceipt` of the commit that wrote this header."""
        return PersistReceipt(
            snapshot_id=self.state_id,
            config_revision=self.config_revision,
            committed_at=self.written_at,
            schema_version=self.schema_version,
            state_digest=self.state_digest,
            retried=retried,
        )


def header_digest(  # noqa: PLR0917 - one parameter per header column
    schema_version: int,
    store_id: str,
    state_id: StateId,
    config_revision: int,
    serial: int,
    session_ids: tuple[int, int, int],
    published_at: int,
    written_at: int,
    state_digest: bytes,
    package_version: str,
    *,
    observed_at: int | None = None,
    evaluated_digest: bytes | None = None,
    recovered_from: StateId | None = None,
) -> bytes:
    """The header digest over the header fields and the state digest.

    With ``observed_at`` and ``evaluated_digest`` it covers them too (a header that stores
    them); without, it is the digest of a header written before they were stored. A
    ``recovered_from`` is covered after them, behind its own tag; None adds nothing, so every
    header written before it existed keeps its digest.
    """
    stored_times = observed_at is not None or evaluated_digest is not None
    h = hashlib.sha256(
        b"rtr-serve header v2 times\x00" if stored_times else b"rtr-serve header v2\x00"
    )
    _put_str(h, store_id)
    for value in (
        schema_version,
        state_id.epoch,
        state_id.generation,
        config_revision,
        serial,
        *session_ids,
        published_at,
        written_at,
    ):
        _put_int(h, value)
    h.update(state_digest)
    _put_str(h, package_version)
    if stored_times:
        _put_int(h, -1 if observed_at is None else observed_at)
        h.update(evaluated_digest or b"")
    if recovered_from is not None:
        h.update(b"\x00recovered from\x00")
        _put_int(h, recovered_from.epoch)
        _put_int(h, recovered_from.generation)
    return h.digest()


def evaluated_digest(sources: Iterable[SourceRecord]) -> bytes:
    """SHA-256 over each source's name and ``evaluated_at``, in the order given (stored order)."""
    h = hashlib.sha256(b"rtr-serve evaluated v1\x00")
    for source in sources:
        _put_str(h, source.name)
        _put_int(h, source.evaluated_at)
    return h.digest()


@dataclass(frozen=True, slots=True)
class PersistReceipt:
    """What a commit (or its idempotent retry) actually stored: the persistence contract's receipt.

    ``committed_at`` is the stored ``written_at`` (integer microseconds, UTC); a retry returns the
    original one. ``retried`` is our addition and takes no part in equality.
    """

    snapshot_id: StateId
    config_revision: int
    committed_at: int
    schema_version: int
    state_digest: bytes
    #: True when the same state was already stored (a retry after an unknown outcome).
    retried: bool = field(default=False, compare=False)


def _put_int(h: hashlib._Hash, value: int) -> None:
    h.update(value.to_bytes(9, "big", signed=True))


def _put_str(h: hashlib._Hash, value: str) -> None:
    data = value.encode()
    _put_int(h, len(data))
    h.update(data)


def _big_endian(values: array[int]) -> bytes:
    if sys.byteorder == "big":
        return values.tobytes()
    copy = array("q", values)
    copy.byteswap()
    return copy.tobytes()


def _source_digest(source: SourceRecord) -> bytes:
    h = hashlib.sha256(b"source\x00")
    for text in (source.name, source.group, source.kind, source.location):
        _put_str(h, text)
    if source.identity is not None:  # absent in files of before: their digests stay
        h.update(b"identity\x00")
        _put_str(h, source.identity)
    for value in (
        int(source.complete),
        kinds_to_mask(source.capabilities),
        kinds_to_mask(source.selected),
        source.accepted_at,
        source.expires_at,
        -1 if source.rtr_session is None else source.rtr_session,
        -1 if source.rtr_serial is None else source.rtr_serial,
        -1 if source.generated_at is None else source.generated_at,
    ):
        _put_int(h, value)
    for packed, expiries in ((source.v4, source.v4_expires), (source.v6, source.v6_expires)):
        _put_int(h, len(packed))
        h.update(packed)
        h.update(_big_endian(expiries))
    _put_int(h, len(source.router_keys))
    for key, expires in source.router_keys:
        h.update(key.sort_key())
        _put_int(h, len(key.spki))
        _put_int(h, expires)
    _put_int(h, len(source.aspas))
    for aspa, expires in source.aspas:
        _put_int(h, aspa.customer)
        _put_int(h, expires)
        _put_int(h, len(aspa.providers))
        h.update(b"".join(p.to_bytes(4, "big") for p in aspa.providers))
    return h.digest()
