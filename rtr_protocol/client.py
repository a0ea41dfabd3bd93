"""`ClientSession`: the router side of RTR (v0-v2) as a sans-IO state machine keeping its data."""

# Rule 1: every decision about what the router does lives in this file, and every legal
# (state, PDU type) pair is one entry of `ClientSession._transitions`. A pair missing from the
# table is Corrupt Data (Error 0): we drop the connection and this cache's data. Two checks run
# before the table: after negotiation a PDU of another version is an Unexpected Protocol Version
# (Error 8; bis §7), and before it a lower-version Cache Response or Cache Reset is the cache's
# implicit downgrade (digest P3) while a Serial Notify is ignored whatever its version (§7).
#
# Rule 2: nothing here does I/O or reads a clock; the session lives as long as the source (its
# version, session id, serial and data outlive each TCP connection). The I/O layer pumps::
#
#     write(session.connection_made())            # the first query of a new connection
#     session.receive_data(chunk)                 # b"" = EOF
#     while (action := session.next_action()) is not NEED_DATA:
#         Transmit       -> write action.data
#         Publish        -> hand action.snapshot on (complete data); action.synced starts Expire
#         PollAfter      -> after action.delay seconds write session.poll() (if not None)
#         Downgrade      -> log it (a legacy-ASPA downgrade deserves a warning)
#         Disconnect     -> write action.data, close; reconnect now or after a backoff
#     session.connection_lost()                   # on every path out of a connection
#
# and calls `ClientSession.expire` when the data outlived Expire without a successful sync.
#
# Decisions taken where the digest leaves room: the first query of a connection is a Serial
# Query when we hold data of the current version (so a cache restart shows up as Cache Reset),
# else a Reset Query. An Error 4 makes us reconnect at once at the version the cache names
# (one below ours when it names ours or higher; at v0 there is nothing lower and we retry with
# backoff). A v2 ASPA PDU in the pre-standard draft-10..13 layout (StayRTR 0.5, Routinator
# 0.13.0) pins the session at v1 for good: one Downgrade(legacy_aspa=True), a Corrupt Data
# report, reconnect at v1. Payload is staged and applied only at End of Data; duplicates and
# unknown withdrawals are judged against current + staged data. Error 2 keeps the data and polls
# again after Retry (before any End of Data after `no_data_retry`); Error 12 keeps the data;
# every other Error Report from the cache, and every error we report, drops the data.
#
# Hostile caches (issue 12). A Cache Reset answers only a Serial Query: answering a Reset
# Query with it is a protocol error, Disconnect(protocol_error=True), that keeps the data of
# the last End of Data and sends no Error Report (every report we could send is fatal and
# would oblige us to drop good data); the I/O layer backs off before it reconnects. Only a
# lower-version Cache Reset before negotiation (the implicit downgrade) gets one Reset Query at
# that version. One unfinished reply (Cache Response until End of Data) is bounded in memory:
# it may stage at most max(REPLY_RECORD_FLOOR = 3,000,000, REPLY_GROWTH = 4 × held) records
# (a record is a VRP, a router key or one provider of an ASPA) and take at most
# max(REPLY_BYTE_FLOOR = 128 MiB, 4 × the wire size of the data held) octets. Past either
# bound the reply is a protocol error too: its staged records are dropped, the data of the
# last End of Data stays. Why these numbers: 3 M records admit a 1.5 M-VRP table doubling in
# one reply (today's table is ~0.75 M); the factor 4 admits a delta that replaces everything
# held (2 × held records) while it grows; a staged record costs ~85-100 bytes (measured with
# tracemalloc, full replies of 1 M IPv4 / IPv6 prefixes), so at the floor staging stays near
# 300 MB instead of growing without end (~800 MB after 6 M PDUs before). The octet floor is
# the record floor in IPv6 prefix PDUs (3 M × 32 = 96 MB) with room to spare; it also ends a
# reply that churns forever without staging anything (announce + withdraw of one record) and
# bounds large Router Key PDUs. Both are checked as soon as a PDU (on the fast path: a run of
# prefix PDUs) could have passed them, and at least every 64 KiB of the reply. Time bounds on
# a reply (a drip, a reply that never ends) are the I/O layer's: it holds the clock.

from __future__ import annotations

import enum
import itertools
import operator
import re
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

from rtr_protocol.constants import (
    HEADER_SIZE,
    MAX_PDU_SIZE,
    MAX_VERSION,
    PDU_TYPES_BY_VERSION,
    VERSIONS,
    ErrorCode,
    PduType,
    Timers,
    error_code_valid,
)
from rtr_protocol.encoder import encode_error_report
from rtr_protocol.errors import RtrProtocolError
from rtr_protocol.framer import NEED_DATA, NeedData
from rtr_protocol.pdu import (
    AspaPdu,
    CacheResponse,
    EndOfData,
    ErrorReport,
    Ipv4Prefix,
    Ipv6Prefix,
    Pdu,
    ResetQuery,
    RouterKeyPdu,
    SerialNotify,
    SerialQuery,
    encode,
)
from rtr_protocol.pdu_decode import decode_framed, parse_header
from snapshot.model import (
    V4_KEY_SIZE,
    V6_KEY_SIZE,
    Aspa,
    PayloadError,
    RouterKey,
    pack_v4,
    pack_v6,
)
from snapshot.snapshot import Snapshot

__all__ = [
    "REPLY_BYTE_FLOOR",
    "REPLY_GROWTH",
    "REPLY_RECORD_FLOOR",
    "ClientAction",
    "ClientSession",
    "ClientState",
    "Disconnect",
    "Downgrade",
    "PollAfter",
    "Publish",
    "Transmit",
    "is_legacy_aspa",
]

#: Fixed part of a pre-standard (draft ~-10 … -13) ASPA PDU: header, flags, AFI flags, provider
#: count (2 octets), customer ASN.
LEGACY_ASPA_FIXED = 16

_K = TypeVar("_K", bytes, RouterKey)

#: Runs of IPv4 / IPv6 Prefix PDUs of one version (octets 2-3 are "zero": ignored, bis §5).
_V4_RUN = {v: re.compile(rb"(?:%c\x04..\x00\x00\x00\x14.{12})+" % v, re.DOTALL) for v in VERSIONS}
_V6_RUN = {v: re.compile(rb"(?:%c\x06..\x00\x00\x00\x20.{24})+" % v, re.DOTALL) for v in VERSIONS}
#: Columns of a prefix PDU (bis §5.9, §5.10): flags, prefix length, max length, address; and
#: for IPv6 (address as bytes) the ASN octets.
_V4_FIELDS = struct.Struct(">8xBBBxI4x")
_V6_FIELDS = struct.Struct(">8xBBBx16s4s")


class ClientState(enum.Enum):
    """Where a `ClientSession` is in its life."""

    #: No transport; `connection_made` starts one.
    DISCONNECTED = enum.auto()
    #: A Reset or Serial Query is out; a Cache Response, Cache Reset or Error Report is due.
    AWAITING_RESPONSE = enum.auto()
    #: Inside Cache Response … End of Data: payload PDUs are staged.
    RECEIVING = enum.auto()
    #: Between exchanges (in sync, or told No Data): waiting for the poll timer or a Notify.
    IDLE = enum.auto()
    #: A Disconnect was handed out; waiting for `connection_lost`.
    CLOSING = enum.auto()


# ------------------------------------------------------------------------------- actions


@dataclass(frozen=True, slots=True)
class Transmit:
    """Write ``data`` (a query); the connection continues."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Publish:
    """This cache's complete data is now ``snapshot``.

    ``synced`` is True after an End of Data (the Expire countdown restarts), False when data was
    only trimmed (payload types a downgraded version lacks). ``changed`` is False when an End of
    Data left the data as it was.
    """

    snapshot: Snapshot
    synced: bool
    changed: bool = True


@dataclass(frozen=True, slots=True)
class PollAfter:
    """Call `ClientSession.poll` after ``delay`` seconds (Refresh, or Retry after No Data)."""

    delay: float
    reason: str
    #: True when the cache answered No Data Available (Error 2).
    no_data: bool = False


@dataclass(frozen=True, slots=True)
class Downgrade:
    """The session now speaks ``new`` instead of ``old`` (for the log)."""

    old: int
    new: int
    reason: str
    #: True when the cache sent the pre-standard ASPA layout: worth one warning.
    legacy_aspa: bool = False


@dataclass(frozen=True, slots=True)
class Disconnect:
    """Write ``data`` (an Error Report, or b""), then close the connection.

    ``drop_data``: the session dropped this cache's data (a fatal error); ``reconnect_now``:
    reconnect without a backoff (a version change), otherwise back off first;
    ``protocol_error``: the cache broke the protocol or a bound of this session (for the
    error class), which with ``drop_data`` False leaves the data of the last End of Data held.
    """

    reason: str
    data: bytes = b""
    drop_data: bool = False
    reconnect_now: bool = False
    protocol_error: bool = False


ClientAction = Transmit | Publish | PollAfter | Downgrade | Disconnect

_Handler = Callable[["ClientSession", Pdu], "ClientAction | None"]


def is_legacy_aspa(raw: bytes) -> bool:
    """True when ``raw`` is a v2 ASPA PDU in the pre-standard draft-10..13 layout.

    That layout keeps header octets 2-3 zero and has a 16-octet fixed part (flags, AFI flags,
    16-bit provider count, customer) before the providers, so Length = 16 + 4·count. The current
    layout has the flags in octet 2 and no count; a withdraw with octet 2 zero is 12 octets.
    """
    if len(raw) < LEGACY_ASPA_FIXED or raw[0] != 2 or raw[1] != PduType.ASPA or raw[2] or raw[3]:
        return False
    length = int.from_bytes(raw[4:8], "big")
    count = int.from_bytes(raw[10:12], "big")
    return length == len(raw) == LEGACY_ASPA_FIXED + 4 * count


# ------------------------------------------------------------------------------- fast path

#: Bit 0 (announce) of every octet value.
_BIT0 = bytes(octet & 1 for octet in range(256))
#: Host-bit masks by prefix length: IPv4, and the high / low 64 bits of IPv6.
_V4_HOST = tuple((1 << (32 - p)) - 1 for p in range(33))
_V6_HIGH = tuple((1 << (64 - p)) - 1 if p <= 64 else 0 for p in range(129))
_V6_LOW = tuple((1 << 64) - 1 if p <= 64 else (1 << (128 - p)) - 1 for p in range(129))


def _v4_announcements(run: bytes) -> list[bytes] | None:
    """The packed keys of a run of IPv4 Prefix PDUs, when all are valid announcements.

    Column-wise with C-level loops (strided slices, ``map``): flags, lengths and host bits are
    checked exactly as `decode` and `snapshot.model.pack_v4` do; None sends the run to the
    per-PDU path, which finds and reports the odd one.
    """
    n = len(run) // 20
    plens, mlens = run[9::20], run[10::20]
    if b"\x00" in run[8::20].translate(_BIT0):
        return None
    if max(mlens) > 32 or not all(map(operator.ge, mlens, plens)):
        return None
    address = bytearray(4 * n)
    for j in range(4):
        address[j::4] = run[12 + j :: 20]
    if any(map(operator.and_, struct.unpack(f">{n}I", address), map(_V4_HOST.__getitem__, plens))):
        return None
    packed = bytearray(10 * n)  # address(4) max_length(1) prefix_length(1) asn(4): model.py
    for j in range(4):
        packed[j::10] = address[j::4]
        packed[6 + j :: 10] = run[16 + j :: 20]
    packed[4::10] = mlens
    packed[5::10] = plens
    blob = bytes(packed)
    return [blob[i : i + 10] for i in range(0, 10 * n, 10)]


def _v6_announcements(run: bytes) -> list[bytes] | None:
    """Like `_v4_announcements`, for a run of IPv6 Prefix PDUs."""
    n = len(run) // 32
    plens, mlens = run[9::32], run[10::32]
    if b"\x00" in run[8::32].translate(_BIT0):
        return None
    if max(mlens) > 128 or not all(map(operator.ge, mlens, plens)):
        return None
    address = bytearray(16 * n)
    for j in range(16):
        address[j::16] = run[12 + j :: 32]
    halves = struct.unpack(f">{2 * n}Q", address)
    if any(map(operator.and_, halves[0::2], map(_V6_HIGH.__getitem__, plens))) or any(
        map(operator.and_, halves[1::2], map(_V6_LOW.__getitem__, plens))
    ):
        return None
    packed = bytearray(22 * n)  # address(16) max_length(1) prefix_length(1) asn(4): model.py
    for j in range(16):
        packed[j::22] = address[j::16]
    packed[16::22] = mlens
    packed[17::22] = plens
    for j in range(4):
        packed[18 + j :: 22] = run[28 + j :: 32]
    blob = bytes(packed)
    return [blob[i : i + 22] for i in range(0, 22 * n, 22)]


# ------------------------------------------------------------------------------- staging


class _Keys(Generic[_K]):
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


class _PackedKeys(_Keys[bytes]):
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
                self.packed = _splice(self.packed, self.width, self.removed, self.added)
            else:
                packed, width, removed = self.packed, self.width, self.removed
                keys = [packed[i : i + width] for i in range(0, len(packed), width)]
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


#: Bounds on one unfinished reply (Cache Response until End of Data): the records it stages may
#: not exceed max(REPLY_RECORD_FLOOR, REPLY_GROWTH × the records held), its octets max(
#: REPLY_BYTE_FLOOR, REPLY_GROWTH × the wire size of the held data). A record is a VRP, a
#: router key or one provider of an ASPA (whose memory grows with its providers). See the
#: header comment.
REPLY_RECORD_FLOOR = 3_000_000
REPLY_BYTE_FLOOR = 128 * 1024 * 1024
REPLY_GROWTH = 4
#: The fewest octets a staged record costs on the wire (one more provider of an ASPA PDU): with
#: r records to go the count cannot pass its bound within 4·r octets, so it is checked no sooner.
_MIN_RECORD_OCTETS = 4
#: The bounds are checked at least once per this many octets of a reply.
_BOUND_CHECK_STEP = 65_536
#: Wire size of a held record: IPv4 / IPv6 prefix PDU, Router Key and ASPA fixed parts.
_V4_PDU, _V6_PDU, _KEY_FIXED, _ASPA_FIXED = 20, 32, 32, 12


#: A delta smaller than 1/64 of the held keys is spliced into the packed string (binary
#: searches); a larger one rebuilds it by sorting.
SPLICE_RATIO = 64


def _find(packed: bytes, width: int, key: bytes) -> int:
    """The index of the first record of descending ``packed`` that is <= ``key``."""
    lo, hi = 0, len(packed) // width
    while lo < hi:
        mid = (lo + hi) // 2
        if packed[mid * width : (mid + 1) * width] > key:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _splice(packed: bytes, width: int, removed: set[bytes], added: dict[bytes, None]) -> bytes:
    """``packed`` without the ``removed`` records and with the ``added`` ones, still descending."""
    cuts = sorted(_find(packed, width, key) for key in removed)
    inserts = sorted(added, reverse=True)
    at = [_find(packed, width, key) for key in inserts]  # non-decreasing
    pieces: list[bytes] = []
    previous = i = j = 0
    while i < len(inserts) or j < len(cuts):
        if i < len(inserts) and (j == len(cuts) or at[i] <= cuts[j]):
            pieces += (packed[previous * width : at[i] * width], inserts[i])
            previous = at[i]
            i += 1
        else:
            pieces.append(packed[previous * width : cuts[j] * width])
            previous = cuts[j] + 1
            j += 1
    pieces.append(packed[previous * width :])
    return b"".join(pieces)


# ------------------------------------------------------------------------------- session


class ClientSession:
    """The router side of RTR for one cache, across reconnects.

    Args:
        max_version: the version the first query is sent at; only ever lowered afterwards.
        max_pdu_size: largest inbound PDU accepted (a longer Length is Corrupt Data).
        default_timers: the intervals used until an End of Data brings the cache's own (and
            for v0, whose End of Data has none).
        no_data_retry: seconds before asking again after Error 2 (No Data) when no End of
            Data has told us the cache's Retry yet.
        fast_path: stage runs of prefix PDUs straight from the buffer (same results, about
            10x faster); False sends every PDU through the transition table.
        reply_record_floor: records one unfinished reply may stage at least; the bound is
            ``max(reply_record_floor, reply_growth × records held)``.
        reply_byte_floor: octets one unfinished reply may take at least; the bound is
            ``max(reply_byte_floor, reply_growth × wire size of the data held)``.
        reply_growth: how many times the held data a reply may stage or take.
    """

    __slots__ = (
        "_aspa_current",
        "_aspa_full",
        "_aspa_staged",
        "_aspa_weight",
        "_base",
        "_bound_check_at",
        "_buf",
        "_close_reason",
        "_discarding",
        "_eof",
        "_keys",
        "_negotiated",
        "_notified",
        "_pending",
        "_pos",
        "_query",
        "_raw",
        "_reply_bytes_max",
        "_reply_records_max",
        "_reply_start",
        "_response_session",
        "_serial",
        "_session_id",
        "_snapshot",
        "_state",
        "_synced_once",
        "_timers",
        "_v4",
        "_v6",
        "_version",
        "default_timers",
        "fast_path",
        "legacy_aspa",
        "max_pdu_size",
        "max_version",
        "no_data_retry",
        "reply_byte_floor",
        "reply_growth",
        "reply_record_floor",
    )

    def __init__(
        self,
        *,
        max_version: int = MAX_VERSION,
        max_pdu_size: int = MAX_PDU_SIZE,
        default_timers: Timers | None = None,
        no_data_retry: float = 60.0,
        fast_path: bool = True,
        reply_record_floor: int = REPLY_RECORD_FLOOR,
        reply_byte_floor: int = REPLY_BYTE_FLOOR,
        reply_growth: int = REPLY_GROWTH,
    ) -> None:
        """Start DISCONNECTED, holding no data."""
        if not 0 <= max_version <= MAX_VERSION:
            raise ValueError(f"max_version must be in 0..{MAX_VERSION}, got {max_version}")
        if no_data_retry <= 0:
            raise ValueError("no_data_retry must be positive")
        if max_pdu_size < HEADER_SIZE:
            raise ValueError(f"max_pdu_size must be at least {HEADER_SIZE}")
        if min(reply_record_floor, reply_byte_floor, reply_growth) < 1:
            raise ValueError("reply_record_floor, reply_byte_floor and reply_growth must be >= 1")
        self.reply_record_floor = reply_record_floor
        self.reply_byte_floor = reply_byte_floor
        self.reply_growth = reply_growth
        self.max_version = max_version
        self.max_pdu_size = max_pdu_size
        self.default_timers = default_timers if default_timers is not None else Timers()
        self.no_data_retry = no_data_retry
        self.fast_path = fast_path
        #: True once the cache sent the pre-standard ASPA layout (the session stays at v1).
        self.legacy_aspa = False
        self._version = max_version
        self._state = ClientState.DISCONNECTED
        self._buf = bytearray()
        self._pos = 0
        #: Stream offset of ``_buf[0]`` on this connection.
        self._base = 0
        self._eof = False
        #: Stream offset where the reply being staged began, its bounds, and the offset at
        #: which they are checked next.
        self._reply_start = 0
        self._reply_records_max = reply_record_floor
        self._reply_bytes_max = reply_byte_floor
        self._bound_check_at = 0
        #: The raw bytes of the PDU being handled (for Error Reports).
        self._raw = b""
        self._pending: deque[ClientAction] = deque()
        self._close_reason = ""
        self._negotiated = False
        self._query: PduType | None = None
        self._response_session: int | None = None
        self._notified: tuple[int, int] | None = None
        self._discarding = False
        # The data: None until the first End of Data and after a drop.
        self._session_id: int | None = None
        self._serial: int | None = None
        self._timers = self.default_timers
        self._synced_once = False
        self._snapshot: Snapshot | None = None
        self._v4 = _PackedKeys(V4_KEY_SIZE)
        self._v6 = _PackedKeys(V6_KEY_SIZE)
        self._keys: _Keys[RouterKey] = _Keys()
        self._aspa_current: dict[int, tuple[int, ...]] = {}
        self._aspa_staged: dict[int, tuple[int, ...] | None] = {}
        #: Records the staged ASPA PDUs count for the reply bound: every provider of an
        #: announce (a replaced set still counts) and 1 per withdraw.
        self._aspa_weight = 0
        self._aspa_full = False

    # ----------------------------------------------------------------- read-only views
    @property
    def state(self) -> ClientState:
        """The current `ClientState`."""
        return self._state

    @property
    def version(self) -> int:
        """The protocol version queries are sent at."""
        return self._version

    @property
    def negotiated(self) -> bool:
        """True once the cache answered at our version on the current connection."""
        return self._negotiated

    @property
    def session_id(self) -> int | None:
        """The cache's session id of the data we hold (None without data)."""
        return self._session_id

    @property
    def serial(self) -> int | None:
        """The serial of the data we hold (None without data)."""
        return self._serial

    @property
    def timers(self) -> Timers:
        """Refresh/Retry/Expire of the last End of Data (`default_timers` before one, or v0)."""
        return self._timers

    @property
    def snapshot(self) -> Snapshot | None:
        """The data we hold, complete as of the last End of Data; None when we hold none."""
        return self._snapshot

    @property
    def busy(self) -> bool:
        """True while a query is unanswered (the I/O layer bounds this wait)."""
        return self._state in (ClientState.AWAITING_RESPONSE, ClientState.RECEIVING)

    # ----------------------------------------------------------------- connection life
    def connection_made(self) -> bytes:
        """A transport is up: returns the first query to write.

        Raises:
            RuntimeError: when the session is not DISCONNECTED.
        """
        if self._state is not ClientState.DISCONNECTED:
            raise RuntimeError(f"connection_made() in state {self._state.name}")
        self._buf = bytearray()
        self._pos = 0
        self._base = 0
        self._eof = False
        self._negotiated = False
        self._notified = None
        self._pending.clear()
        return self._query_now()

    def connection_lost(self) -> None:
        """The transport is gone (after a Disconnect, EOF, an I/O error or cancellation).

        Staged payload is discarded; the data as of the last End of Data stays.
        """
        self._state = ClientState.DISCONNECTED
        self._query = None
        self._negotiated = False
        self._discarding = False
        self._pending.clear()
        self._abort_staging()

    def poll(self) -> bytes | None:
        """The Refresh (or Retry) timer fired: the query to write, or None when not IDLE."""
        if self._state is not ClientState.IDLE:
            return None
        return self._query_now()

    def expire(self) -> bool:
        """Drop the data because it outlived Expire; True when there was data to drop.

        An incremental reply in flight would apply to data we no longer hold, so it is read to
        its End of Data and then answered with a Reset Query.
        """
        had = self._snapshot is not None
        if self.busy and self._query is PduType.SERIAL_QUERY:
            self._discarding = True
        self._drop_data()
        return had

    # ----------------------------------------------------------------- input
    def receive_data(self, data: bytes) -> None:
        """Feed received bytes; ``b""`` means the cache closed its side.

        Raises:
            RuntimeError: when DISCONNECTED, or data is fed after EOF.
        """
        if self._state is ClientState.DISCONNECTED:
            raise RuntimeError("receive_data() without a connection")
        if self._state is ClientState.CLOSING:
            return
        if self._eof:
            if data:
                raise RuntimeError("received data after EOF")
            return
        if not data:
            self._eof = True
            return
        pos = self._pos
        if pos and pos >= len(self._buf) - pos:
            # Drop consumed octets once they are at least half the buffer (amortised O(n)).
            del self._buf[:pos]
            self._base += pos
            self._pos = 0
        self._buf += data

    def next_action(self) -> ClientAction | NeedData:
        """Process buffered PDUs until one of them calls for an action.

        Returns:
            The next action, `NEED_DATA` when no complete PDU is buffered, and a Disconnect
            again (with no data) once the session is CLOSING.

        Raises:
            RuntimeError: when DISCONNECTED.
        """
        if self._pending:
            return self._pending.popleft()
        state = self._state
        if state is ClientState.DISCONNECTED:
            raise RuntimeError("next_action() without a connection")
        if state is ClientState.CLOSING:
            return Disconnect(self._close_reason)
        transitions = self._transitions
        while True:
            if self._state is ClientState.RECEIVING:
                if self._base + self._pos >= self._bound_check_at:
                    over = self._check_reply_bounds()
                    if over is not None:
                        return over
                if self.fast_path and not self._discarding:
                    action = self._prefix_runs()
                    if action is not None:
                        return action
            try:
                pdu = self._next_pdu()
            except RtrProtocolError as exc:
                return self._on_framing_error(exc)
            if pdu is NEED_DATA:
                if self._eof:
                    inside = len(self._buf) - self._pos
                    return self._close(
                        "the cache closed the connection"
                        + (f" inside a PDU ({inside} octets pending)" if inside else "")
                    )
                return NEED_DATA
            if pdu.TYPE is not PduType.ERROR_REPORT and pdu.version != self._version:
                action = self._version_mismatch(pdu)
                if action is not None:
                    return action
                if pdu.TYPE is PduType.SERIAL_NOTIFY:
                    continue  # ignored during negotiation, whatever its version (bis §7)
            handler = transitions.get((self._state, pdu.TYPE))
            if handler is None:
                return self._fatal(
                    ErrorCode.CORRUPT_DATA,
                    self._raw,
                    f"{pdu.TYPE.name} PDU unexpected while {self._state.name}",
                )
            action = handler(self, pdu)
            if action is not None:
                return action
            if self._pending:
                return self._pending.popleft()

    # ----------------------------------------------------------------- framing
    def _next_pdu(self) -> Pdu | NeedData:
        """The next complete PDU (framed by its Length), or NEED_DATA.

        Raises:
            RtrProtocolError: from `parse_header` (Length unusable, not recoverable) or from
                `decode_framed` (a framed but invalid PDU, recoverable).
        """
        buf, pos = self._buf, self._pos
        live = len(buf) - pos
        if live < HEADER_SIZE:
            return NEED_DATA
        length = parse_header(buf[pos : pos + HEADER_SIZE], self.max_pdu_size)
        if live < length:
            return NEED_DATA
        raw = self._raw = bytes(buf[pos : pos + length])
        self._pos = pos + length
        return decode_framed(raw)

    def _prefix_runs(self) -> ClientAction | None:
        """Stage whole runs of well-formed prefix PDUs straight from the buffer.

        A full table is ~99.99 % prefix PDUs; per PDU this avoids the dataclass, the enum
        arithmetic and the dispatch of the general path (about 10x faster). Only PDUs the
        general path would accept are taken: our version, Length 20/32, valid lengths, no host
        bits. The first one that is anything else stops the run, and the general path handles
        it (with its exact error).
        """
        version = self._version
        while True:
            buf, pos = self._buf, self._pos
            match = _V4_RUN[version].match(buf, pos)
            if match is not None:
                action = self._v4_run(bytes(buf[pos : match.end()]), pos)
            else:
                match = _V6_RUN[version].match(buf, pos)
                if match is None:
                    return None
                action = self._v6_run(bytes(buf[pos : match.end()]), pos)
            if action is not None or self._pos != match.end():
                return action  # an error, or a PDU left for the general path
            if self._base + self._pos >= self._bound_check_at:
                action = self._check_reply_bounds()
                if action is not None:
                    return action

    def _v4_run(self, run: bytes, pos: int) -> ClientAction | None:
        if self._v4.full and (batch := _v4_announcements(run)) is not None:
            return self._announce_batch(self._v4, batch, run, pos, 20)
        announce, withdraw = self._v4.announce, self._v4.withdraw
        offset = 0
        for flags, plen, mlen, address in _V4_FIELDS.iter_unpack(run):
            if plen > 32 or mlen > 32 or mlen < plen or address & ((1 << (32 - plen)) - 1):
                break
            key = (
                run[offset + 12 : offset + 16]
                + bytes((mlen, plen))
                + run[offset + 16 : offset + 20]
            )
            offset += 20
            if not (announce(key) if flags & 1 else withdraw(key)):
                self._pos = pos + offset
                self._raw = run[offset - 20 : offset]
                return self._staging_error(announce=flags & 1)
        self._pos = pos + offset
        return None

    def _v6_run(self, run: bytes, pos: int) -> ClientAction | None:
        if self._v6.full and (batch := _v6_announcements(run)) is not None:
            return self._announce_batch(self._v6, batch, run, pos, 32)
        announce, withdraw = self._v6.announce, self._v6.withdraw
        offset = 0
        for flags, plen, mlen, address, asn in _V6_FIELDS.iter_unpack(run):
            if (
                plen > 128
                or mlen > 128
                or mlen < plen
                or int.from_bytes(address, "big") & ((1 << (128 - plen)) - 1)
            ):
                break
            key = address + bytes((mlen, plen)) + asn
            offset += 32
            if not (announce(key) if flags & 1 else withdraw(key)):
                self._pos = pos + offset
                self._raw = run[offset - 32 : offset]
                return self._staging_error(announce=flags & 1)
        self._pos = pos + offset
        return None

    def _announce_batch(
        self, keys: _Keys[bytes], batch: list[bytes], run: bytes, pos: int, size: int
    ) -> ClientAction | None:
        duplicate = keys.announce_all(batch)
        if duplicate < 0:
            self._pos = pos + len(run)
            return None
        self._pos = pos + (duplicate + 1) * size
        self._raw = run[duplicate * size : (duplicate + 1) * size]
        return self._staging_error(announce=True)

    # ----------------------------------------------------------------- helpers
    def _query_now(self) -> bytes:
        """Send a Serial Query when we hold data of this version, else a Reset Query."""
        self._state = ClientState.AWAITING_RESPONSE
        self._discarding = False
        self._abort_staging()
        if self._snapshot is not None and self._session_id is not None and self._serial is not None:
            self._query = PduType.SERIAL_QUERY
            return encode(SerialQuery(self._version, self._session_id, self._serial))
        self._query = PduType.RESET_QUERY
        return encode(ResetQuery(self._version))

    def _close(
        self,
        reason: str,
        data: bytes = b"",
        *,
        drop_data: bool = False,
        reconnect_now: bool = False,
        protocol_error: bool = False,
    ) -> Disconnect:
        self._state = ClientState.CLOSING
        self._close_reason = reason
        self._abort_staging()
        if drop_data:
            self._drop_data()
        return Disconnect(reason, data, drop_data, reconnect_now, protocol_error)

    def _fatal(self, code: ErrorCode, offending: bytes, text: str) -> Disconnect:
        """Report ``code`` (when our version has it), drop the connection and the data."""
        data = b""
        if error_code_valid(code, self._version):
            data = encode_error_report(self._version, code, offending, text)
        return self._close(text, data, drop_data=True, protocol_error=True)

    def _drop_data(self) -> None:
        self._snapshot = None
        self._session_id = None
        self._serial = None
        self._v4.drop_current()
        self._v6.drop_current()
        self._keys.drop_current()
        self._aspa_current = {}

    def _abort_staging(self) -> None:
        self._response_session = None
        self._v4.begin(full=False)
        self._v6.begin(full=False)
        self._keys.begin(full=False)
        self._aspa_staged = {}
        self._aspa_weight = 0
        self._aspa_full = False

    def _begin_staging(self, *, full: bool) -> None:
        self._v4.begin(full=full)
        self._v6.begin(full=full)
        self._keys.begin(full=full)
        self._aspa_staged = {}
        self._aspa_weight = 0
        self._aspa_full = full

    def _build_snapshot(self) -> Snapshot:
        return Snapshot(
            self._v4.packed,
            self._v6.packed,
            tuple(sorted(self._keys.current, key=RouterKey.sort_key)),
            tuple(Aspa(c, p) for c, p in sorted(self._aspa_current.items())),
        )

    def _downgrade(self, new: int, reason: str, *, legacy_aspa: bool = False) -> None:
        """Lower the version; queue a Downgrade and, when data shrinks, a Publish."""
        old = self._version
        self._version = new
        self._pending.append(Downgrade(old, new, reason, legacy_aspa))
        # Session ids are per version (bis §5.1): the next query is a Reset Query.
        self._session_id = None
        self._serial = None
        types = PDU_TYPES_BY_VERSION[new]
        trimmed = False
        if PduType.ASPA not in types and self._aspa_current:
            self._aspa_current = {}
            trimmed = True
        if PduType.ROUTER_KEY not in types and self._keys.current:
            self._keys.drop_current()
            trimmed = True
        if trimmed and self._snapshot is not None:
            self._snapshot = self._build_snapshot()
            self._pending.append(Publish(self._snapshot, synced=False))

    def _version_mismatch(self, pdu: Pdu) -> ClientAction | None:
        """A non-Error-Report PDU whose version is not ours; None to go on with it."""
        raw = self._raw
        if self._negotiated:
            return self._unexpected_version(pdu.version, raw)
        if pdu.TYPE is PduType.SERIAL_NOTIFY:
            return None
        if pdu.version < self._version and pdu.TYPE in (
            PduType.CACHE_RESPONSE,
            PduType.CACHE_RESET,
        ):
            return self._implicit_downgrade(pdu)
        return self._unexpected_version(pdu.version, raw)

    def _unexpected_version(self, version: int | None, offending: bytes) -> Disconnect:
        text = f"PDU of version {version} on a version {self._version} session"
        # Error 8 does not exist in v0 (RFC 6810): _fatal then closes without a report.
        return self._fatal(ErrorCode.UNEXPECTED_PROTOCOL_VERSION, offending, text)

    def _implicit_downgrade(self, pdu: Pdu) -> ClientAction | None:
        """The cache answered our first query at a lower version (StayRTR, digest P3)."""
        query = self._query
        self._downgrade(
            pdu.version,
            f"the cache answered a version {self._version} query with a version "
            f"{pdu.version} {pdu.TYPE.name}",
        )
        if query is PduType.SERIAL_QUERY:
            # Our session id and serial belong to the old version: start again with a Reset.
            self._pending.append(
                self._close(f"version changed to {pdu.version}", reconnect_now=True)
            )
            return self._pending.popleft()
        if pdu.TYPE is PduType.CACHE_RESET:
            # The downgrade came as a Cache Reset: one Reset Query at the cache's version.
            self._negotiated = True
            self._pending.append(Transmit(self._query_reset()))
            return self._pending.popleft()
        return None  # go on: the reply is the full data at the new version

    def _on_framing_error(self, exc: RtrProtocolError) -> ClientAction:
        if exc.pdu_type == PduType.ERROR_REPORT:
            # Never answer an Error Report, not even a malformed one; the router flushes.
            return self._close(f"malformed Error Report received: {exc.text}", drop_data=True)
        if exc.recoverable and self._version == 2 and is_legacy_aspa(exc.offending):
            return self._on_legacy_aspa(exc.offending)
        if exc.recoverable and exc.version is not None and exc.version != self._version:
            return self._unexpected_version(exc.version, exc.offending)
        return self._fatal(exc.code, exc.offending, exc.text)

    def _on_legacy_aspa(self, raw: bytes) -> ClientAction:
        self.legacy_aspa = True
        text = "pre-standard ASPA PDU layout (draft-ietf-sidrops-8210bis-10..13) at version 2"
        data = encode_error_report(2, ErrorCode.CORRUPT_DATA, raw, text)
        self._abort_staging()
        self._downgrade(
            1,
            "the cache sends ASPA PDUs in the pre-standard layout at version 2 (StayRTR 0.5.x, "
            "Routinator 0.13.0); continuing at version 1 without ASPA",
            legacy_aspa=True,
        )
        self._pending.append(self._close(text, data, reconnect_now=True))
        return self._pending.popleft()

    # ----------------------------------------------------------------- PDU handlers
    def _on_cache_response(self, pdu: Pdu) -> ClientAction | None:
        assert isinstance(pdu, CacheResponse)
        self._negotiated = True
        if (
            self._query is PduType.SERIAL_QUERY
            and not self._discarding
            and pdu.session_id != self._session_id
        ):
            return self._fatal(
                ErrorCode.CORRUPT_DATA,
                self._raw,
                f"Cache Response names session {pdu.session_id}; ours is {self._session_id}",
            )
        self._response_session = pdu.session_id
        self._begin_staging(full=self._query is PduType.RESET_QUERY)
        self._start_reply_bounds()
        self._state = ClientState.RECEIVING
        return None

    def _start_reply_bounds(self) -> None:
        """Bound the reply that begins here by the data held now (see the header comment)."""
        growth = self.reply_growth
        v4, v6, keys, aspas = (
            len(self._v4.current),
            len(self._v6.current),
            self._keys.current,
            self._aspa_current,
        )
        providers = sum(map(len, aspas.values()))
        records = v4 + v6 + len(keys) + providers
        octets = (
            _V4_PDU * v4
            + _V6_PDU * v6
            + sum(_KEY_FIXED + len(key.spki) for key in keys)
            + _ASPA_FIXED * len(aspas)
            + 4 * providers
        )
        self._reply_records_max = max(self.reply_record_floor, growth * records)
        self._reply_bytes_max = max(self.reply_byte_floor, growth * octets)
        self._reply_start = self._bound_check_at = self._base + self._pos

    def _check_reply_bounds(self) -> Disconnect | None:
        """Disconnect when the reply outgrew its bounds; else schedule the next check."""
        offset = self._base + self._pos
        octets = offset - self._reply_start
        octets_max = self._reply_bytes_max
        if octets > octets_max:
            return self._close(
                f"a reply took more than {octets_max:,} octets without End of Data (the bound "
                f"is max({self.reply_byte_floor:,}, {self.reply_growth} x the data held)); "
                "its staged records are dropped",
                protocol_error=True,
            )
        staged = self._v4.staged() + self._v6.staged() + self._keys.staged() + self._aspa_weight
        records_max = self._reply_records_max
        if staged > records_max:
            return self._close(
                f"a reply staged more than {records_max:,} records without End of Data (the "
                f"bound is max({self.reply_record_floor:,}, {self.reply_growth} x the records "
                "held)); its staged records are dropped",
                protocol_error=True,
            )
        self._bound_check_at = offset + min(
            _BOUND_CHECK_STEP,
            _MIN_RECORD_OCTETS * (records_max - staged + 1),
            octets_max - octets + 1,
        )
        return None

    def _on_cache_reset(self, _pdu: Pdu) -> ClientAction:
        self._negotiated = True
        if self._query is PduType.RESET_QUERY:
            # Cache Reset answers only a Serial Query (a Reset Query gets the data or Error 2,
            # digest section 5.4): asking again would loop against a cache serving nothing.
            return self._close(
                "the cache answered a Reset Query with Cache Reset (which answers only a "
                "Serial Query): it serves no data",
                protocol_error=True,
            )
        return Transmit(self._query_reset())

    def _query_reset(self) -> bytes:
        self._state = ClientState.AWAITING_RESPONSE
        self._discarding = False
        self._abort_staging()
        self._query = PduType.RESET_QUERY
        return encode(ResetQuery(self._version))

    def _on_prefix(self, pdu: Pdu) -> ClientAction | None:
        assert isinstance(pdu, Ipv4Prefix | Ipv6Prefix)
        if self._discarding:
            return None
        try:
            if isinstance(pdu, Ipv4Prefix):
                keys = self._v4
                key = pack_v4(pdu.prefix, pdu.prefix_length, pdu.max_length, pdu.asn)
            else:
                keys = self._v6
                key = pack_v6(pdu.prefix, pdu.prefix_length, pdu.max_length, pdu.asn)
        except PayloadError as exc:  # pragma: no cover - the decoder checks the same rules
            return self._fatal(ErrorCode.CORRUPT_DATA, self._raw, str(exc))
        return self._stage(keys, key, bool(pdu.flags & 1))

    def _on_router_key(self, pdu: Pdu) -> ClientAction | None:
        assert isinstance(pdu, RouterKeyPdu)
        if self._discarding:
            return None
        try:
            key = RouterKey(pdu.ski, pdu.asn, pdu.spki)
        except PayloadError as exc:  # pragma: no cover - the decoder checks the same rules
            return self._fatal(ErrorCode.CORRUPT_DATA, self._raw, str(exc))
        return self._stage(self._keys, key, bool(pdu.flags & 1))

    def _stage(self, keys: _Keys[_K], key: _K, announce: bool) -> ClientAction | None:
        if keys.announce(key) if announce else keys.withdraw(key):
            return None
        return self._staging_error(announce=announce)

    def _staging_error(self, *, announce: int | bool) -> Disconnect:
        if announce:
            return self._fatal(
                ErrorCode.DUPLICATE_ANNOUNCEMENT,
                self._raw,
                "announcement of a record already held",
            )
        return self._fatal(
            ErrorCode.WITHDRAWAL_OF_UNKNOWN_RECORD, self._raw, "withdrawal of a record not held"
        )

    def _on_aspa(self, pdu: Pdu) -> ClientAction | None:
        assert isinstance(pdu, AspaPdu)
        if self._discarding:
            return None
        customer = pdu.customer
        staged = self._aspa_staged
        if pdu.announce:
            try:
                aspa = Aspa(customer, pdu.providers)
            except PayloadError as exc:
                return self._fatal(ErrorCode.CORRUPT_DATA, self._raw, str(exc))
            staged[customer] = aspa.providers  # an announce replaces the set (bis §5.12)
            self._aspa_weight += len(aspa.providers)
            return None
        if customer in staged:
            held = staged[customer] is not None
        else:
            held = not self._aspa_full and customer in self._aspa_current
        if not held:
            return self._fatal(
                ErrorCode.WITHDRAWAL_OF_UNKNOWN_RECORD,
                self._raw,
                f"withdrawal of the ASPA of AS{customer}, which is not held",
            )
        staged[customer] = None
        self._aspa_weight += 1
        return None

    def _apply_aspas(self) -> bool:
        staged = self._aspa_staged
        if self._aspa_full:
            new = {c: p for c, p in staged.items() if p is not None}
        elif staged:
            new = dict(self._aspa_current)
            for customer, providers in staged.items():
                if providers is None:
                    del new[customer]
                else:
                    new[customer] = providers
        else:
            return False
        changed = new != self._aspa_current
        self._aspa_current = new
        self._aspa_staged = {}
        self._aspa_weight = 0
        self._aspa_full = False
        return changed

    def _on_end_of_data(self, pdu: Pdu) -> ClientAction:
        assert isinstance(pdu, EndOfData)
        if pdu.session_id != self._response_session:
            return self._fatal(
                ErrorCode.CORRUPT_DATA,
                self._raw,
                f"End of Data names session {pdu.session_id}; the Cache Response named "
                f"{self._response_session}",
            )
        if self._discarding:
            # The data expired while this incremental reply was on the way: start afresh.
            self._discarding = False
            return Transmit(self._query_reset())
        changed = self._v4.staged_change() or self._v6.staged_change() or self._keys.staged_change()
        self._v4.apply()
        self._v6.apply()
        self._keys.apply()
        changed = self._apply_aspas() or changed
        self._response_session = None
        self._session_id = pdu.session_id
        self._serial = pdu.serial
        self._timers = pdu.timers if pdu.timers is not None else self.default_timers
        self._synced_once = True
        snapshot = self._snapshot
        if snapshot is None or changed:
            new = self._build_snapshot()
            changed = snapshot is None or new != snapshot
            snapshot = self._snapshot = new
        self._state = ClientState.IDLE
        self._query = None
        self._pending.append(Publish(snapshot, synced=True, changed=changed))
        notified, self._notified = self._notified, None
        if notified is not None and notified != (pdu.session_id, pdu.serial):
            self._pending.append(Transmit(self._query_now()))
        else:
            self._pending.append(PollAfter(float(self._timers.refresh), "refresh"))
        return self._pending.popleft()

    def _on_notify(self, pdu: Pdu) -> ClientAction | None:
        assert isinstance(pdu, SerialNotify)
        if pdu.session_id == self._session_id and pdu.serial == self._serial:
            return None  # we have that already
        if pdu.session_id != self._session_id:
            return Transmit(self._query_reset())  # an unknown session: start afresh
        return Transmit(self._query_now())

    def _on_notify_while_busy(self, pdu: Pdu) -> None:
        assert isinstance(pdu, SerialNotify)
        if self._negotiated:
            self._notified = (pdu.session_id, pdu.serial)  # checked after End of Data
        # Before negotiation a Serial Notify MUST be ignored (bis §7).

    def _on_error_report(self, pdu: Pdu) -> ClientAction:
        assert isinstance(pdu, ErrorReport)
        code = pdu.error_code
        name = code.name if code is not None else f"unknown code {pdu.code}"
        text = f"the cache sent Error Report {name}" + (f": {pdu.text!r}" if pdu.text else "")
        if code is ErrorCode.NO_DATA_AVAILABLE:
            self._negotiated = self._negotiated or pdu.version == self._version
            self._state = ClientState.IDLE
            self._query = None
            self._discarding = False
            self._abort_staging()
            delay = self._timers.retry if self._synced_once else self.no_data_retry
            return PollAfter(float(delay), text, no_data=True)
        if code is ErrorCode.UNSUPPORTED_PROTOCOL_VERSION and not self._negotiated:
            return self._on_unsupported_version(pdu, text)
        if code in (ErrorCode.UNSUPPORTED_PROTOCOL_VERSION, ErrorCode.CACHE_RESTART):
            return self._close(text)  # non-fatal (bis §12): keep the data
        return self._close(text, drop_data=True)

    def _on_unsupported_version(self, pdu: ErrorReport, text: str) -> ClientAction:
        old = self._version
        if old == 0:
            return self._close(f"{text}; the cache speaks no version we do (lowest is 0)")
        new = pdu.version if pdu.version < old else old - 1
        self._downgrade(new, text)
        self._pending.append(
            self._close(f"{text}; reconnecting at version {new}", reconnect_now=True)
        )
        return self._pending.popleft()

    #: The transition table: every (state, PDU type) pair the router accepts. DISCONNECTED and
    #: CLOSING have no entries because `next_action` never consults the table in those states.
    _transitions: ClassVar[dict[tuple[ClientState, PduType], _Handler]] = {
        (ClientState.AWAITING_RESPONSE, PduType.CACHE_RESPONSE): _on_cache_response,
        (ClientState.AWAITING_RESPONSE, PduType.CACHE_RESET): _on_cache_reset,
        (ClientState.AWAITING_RESPONSE, PduType.SERIAL_NOTIFY): _on_notify_while_busy,
        (ClientState.AWAITING_RESPONSE, PduType.ERROR_REPORT): _on_error_report,
        (ClientState.RECEIVING, PduType.IPV4_PREFIX): _on_prefix,
        (ClientState.RECEIVING, PduType.IPV6_PREFIX): _on_prefix,
        (ClientState.RECEIVING, PduType.ROUTER_KEY): _on_router_key,
        (ClientState.RECEIVING, PduType.ASPA): _on_aspa,
        (ClientState.RECEIVING, PduType.END_OF_DATA): _on_end_of_data,
        (ClientState.RECEIVING, PduType.SERIAL_NOTIFY): _on_notify_while_busy,
        (ClientState.RECEIVING, PduType.ERROR_REPORT): _on_error_report,
        (ClientState.IDLE, PduType.SERIAL_NOTIFY): _on_notify,
        (ClientState.IDLE, PduType.ERROR_REPORT): _on_error_report,
    }
