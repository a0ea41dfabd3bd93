"""What the aggregator needs from a source (`Source`) and what a source hands over (`Delivery`).

Every source kind (file, HTTP, RTR) implements `Source` exactly; the aggregator never probes
for optional attributes. A source calls its sink with one `Delivery` per newly admitted raw
input (a new export, an RTR End of Data) or protocol withdrawal; an unchanged answer (an HTTP
304, an identical body, an untouched file) is no delivery at all: it refreshes nothing.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from snapshot.kinds import PayloadKind
from upstream.payload import SourcePayload
from upstream.status import SourceState, SourceStatus
from upstream.timekeeper import TimeKeeper

__all__ = [
    "Delivery",
    "DeliverySink",
    "HeldExport",
    "HoldsExports",
    "Preparable",
    "Source",
    "SourceSetupError",
    "payload_identity",
]


@dataclass(frozen=True, slots=True)
class Delivery:
    """One newly admitted raw input of a source, or the withdrawal of its data."""

    payload: SourcePayload
    #: Names the raw input: a delivery with the identity of the data in force is the same input
    #: read again (it keeps that data's clock anchor and trust state); another identity is new
    #: raw input (new anchor; it restores trust after a clock jump).
    identity: bytes
    #: Source-wide end of validity in effective UTC seconds (an RTR End of Data + Expire);
    #: None when only the entries' own expiry applies.
    expires_at: float | None = None
    #: The RTR cache's session id and serial of this data (None for exports).
    rtr_session: int | None = None
    rtr_serial: int | None = None
    #: The RTR protocol version the data was received at (None for exports).
    rtr_version: int | None = None
    #: The data was withdrawn by the protocol (a fatal error, Expire): nothing of it may serve
    #: until a new payload is admitted.
    revoked: bool = False

    @classmethod
    def withdrawal(cls, identity: bytes = b"withdrawn") -> Delivery:
        """The delivery that withdraws a source's data."""
        return cls(SourcePayload(), identity, revoked=True)


#: What a source calls with each delivery (synchronously, from its own task).
DeliverySink = Callable[[Delivery], None]


class Source(Protocol):
    """A source of RPKI payload run by the aggregator."""

    @property
    def name(self) -> str:
        """Unique name (logs, status, persisted state)."""
        ...

    @property
    def kind(self) -> str:
        """``file``, ``http`` or ``rtr``."""
        ...

    @property
    def online(self) -> bool:
        """True when its data depends on a live upstream (distrusted after a clock jump)."""
        ...

    @property
    def status(self) -> SourceStatus:
        """Its status, updated by its own task only."""
        ...

    @property
    def capabilities(self) -> frozenset[PayloadKind]:
        """The payload kinds it can deliver now (an RTR cache at version 1 has no ASPA)."""
        ...

    def refreshing(self) -> bool:
        """False once it can no longer refresh its data (see each source for its rule)."""
        ...

    def resync(self) -> None:
        """Ask for a fresh sync as soon as possible (after its data was distrusted)."""
        ...

    async def run(self, sink: DeliverySink) -> None:
        """Run until cancelled, calling ``sink`` with each delivery."""
        ...


class SourceSetupError(ValueError):
    """A source's configuration cannot work (e.g. its CA file cannot be used).

    Raised by `Preparable.prepare`, hence by entering a `Client` and by `Client.apply_config`.
    """


@runtime_checkable
class Preparable(Protocol):
    """A source with set-up I/O that can fail for configuration reasons (a CA file to read)."""

    async def prepare(self) -> None:
        """Do that set-up off the event loop, before any network activity.

        Raises `SourceSetupError` when the configuration can never work. Idempotent once it
        succeeded.
        """
        ...


def payload_identity(payload: SourcePayload, form: str = "json") -> bytes:
    """The identity of an export's raw input.

    With a stated build time it is (format, build time): the same export read again keeps its
    anchor even if its bytes differ. Without one it is the digest of the declared records and
    their expiry times, so a change of metadata alone names the same data.
    """
    if payload.generated is not None:
        return f"{form}:generated:{payload.generated}".encode()
    h = hashlib.sha256(f"{form}:records\x00".encode())
    for packed, expires in ((payload.v4, payload.v4_expires), (payload.v6, payload.v6_expires)):
        h.update(len(packed).to_bytes(8, "big"))
        h.update(packed)
        h.update(expires.tobytes())  # native order: identities live in one process
    for key, key_expires in payload.router_keys:
        h.update(key.sort_key())
        h.update(len(key.spki).to_bytes(4, "big"))
        h.update(key.spki)
        h.update(key_expires.to_bytes(8, "big", signed=True))
    for aspa, aspa_expires in payload.aspas:
        h.update(aspa.customer.to_bytes(4, "big"))
        h.update(len(aspa.providers).to_bytes(4, "big"))
        h.update(b"".join(p.to_bytes(4, "big") for p in aspa.providers))
        h.update(aspa_expires.to_bytes(8, "big", signed=True))
    h.update(len(payload.aspa_afis).to_bytes(8, "big"))
    h.update(payload.aspa_afis)
    return h.digest()


def check_generated(generated: int | None, wall: float, tolerance: float) -> str | None:
    """Why an export built at ``generated`` cannot be admitted at raw wall time ``wall``.

    An export stating a build time later than the wall clock plus ``tolerance`` comes from a
    clock we cannot reconcile with ours: it is held back (None: it may be admitted).
    """
    if generated is None or generated <= wall + tolerance:
        return None
    return (
        f"the export says it was built at {generated}, {generated - wall:.0f} s after the wall "
        f"clock ({wall:.0f}); beyond the clock tolerance of {tolerance:g} s"
    )


@dataclass(frozen=True, slots=True)
class HeldExport:
    """An export read and parsed but not delivered yet (its build time may be ahead)."""

    #: SHA-256 of its bytes as read (the source's content in force once delivered).
    digest: bytes
    delivery: Delivery
    #: Size and read time, for the log line of the load.
    how: str = ""


class HoldsExports:
    """Mixin of the export sources (file, HTTP): an export is delivered once its time is due.

    An export built later than the raw wall clock plus the tolerance is held back: the status
    records a ``time`` error (logged once) and the source tries again at its next look without
    reading the export anew. Offline evaluation (a frozen clock) has no clock to check against.
    """

    keeper: TimeKeeper
    status: SourceStatus
    #: The export read last and not delivered yet.
    _held: HeldExport | None
    #: SHA-256 of the content in force.
    _digest: bytes | None
    #: The module logger of the source (its lines keep their logger name).
    _log: logging.Logger

    def _location(self) -> str:
        """Where the source reads from, for log lines."""
        raise NotImplementedError

    def _admit_held(self, sink: DeliverySink) -> bool:
        """Deliver the export read last, unless its build time is still ahead of the clock."""
        held = self._held
        if held is None:
            return False
        keeper, status = self.keeper, self.status
        payload = held.delivery.payload
        reason = (
            None
            if keeper.frozen
            else check_generated(payload.generated, keeper.wall(), keeper.tolerance)
        )
        if reason is not None:
            if status.last_error != reason:
                self._log.error(
                    "source %s: export from %s held back: %s; the previous data stays in force",
                    status.name,
                    self._location(),
                    reason,
                )
            status.failed("time", reason, keeper.wall())
            return False
        self._held = None
        self._digest = held.digest
        status.state = SourceState.OK
        status.attempted = True
        status.syncs += 1
        status.last_success_wall = keeper.wall()
        status.records = payload.counts()
        self._log.info(
            "source %s: loaded %s%s: %s",
            status.name,
            self._location(),
            held.how,
            ", ".join(f"{k}={v}" for k, v in status.records.items()),
        )
        sink(held.delivery)
        return True
