"""`SourceEntry`: everything the aggregator knows about one source incarnation, in one object.

Payload, raw-input identity, clock anchor, trust, revocation, recovery and the source-wide
deadline live together and change only through the methods below, so they can never drift
apart. `SourceEntry.availability` judges the data at an effective time (`upstream.timekeeper`):

* ``ready`` — complete data, usable (possibly empty: an export with no entries);
* ``ready_empty`` — the source's own validity has not ended but every record it delivered has
  expired naturally (still a complete, valid, empty set);
* ``expired`` — the source's own validity ended (an RTR cache not synced within Expire);
* ``untrusted`` — a wall-clock jump beyond the tolerance since the data was admitted: unusable
  until new raw input is admitted (an unchanged answer restores nothing);
* ``revoked`` — withdrawn by the protocol: unusable until a new payload is admitted;
* ``none`` — nothing delivered (or recovered) yet.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field

import anyio

from upstream.payload import SourcePayload
from upstream.source import Delivery, Source
from upstream.timekeeper import Anchor, TimeKeeper

__all__ = ["Availability", "Recovered", "SourceEntry"]

log = logging.getLogger(__name__)


class Availability(enum.Enum):
    """What a source's data is worth at a given effective time."""

    NONE = "none"
    READY = "ready"
    READY_EMPTY = "ready_empty"
    EXPIRED = "expired"
    UNTRUSTED = "untrusted"
    REVOKED = "revoked"

    @property
    def usable(self) -> bool:
        """True for complete valid data (empty or not)."""
        return self in (Availability.READY, Availability.READY_EMPTY)


@dataclass(frozen=True, slots=True)
class Recovered:
    """A payload restored from persisted state, seeded into a source before it runs."""

    payload: SourcePayload
    #: When the payload was first accepted (effective UTC seconds).
    accepted_wall: float
    #: The state's write time: the effective time is never below it (`TimeKeeper.observe`).
    not_before_wall: float
    #: Source-wide end of validity (an RTR cache's End of Data + Expire), if any.
    expires_at: float | None = None
    rtr_session: int | None = None
    rtr_serial: int | None = None
    #: The RTR protocol version the payload was received at (None for exports).
    rtr_version: int | None = None


@dataclass(eq=False, slots=True)
class SourceEntry:
    """One incarnation of a configured source, owned by the aggregator."""

    source: Source
    group: str
    payload: SourcePayload | None = None
    identity: bytes | None = None
    #: Raw wall and monotonic clocks when the raw input in force was admitted.
    anchor: Anchor | None = None
    #: Effective time at which the raw input in force was first admitted (persisted).
    accepted_at: float | None = None
    expires_at: float | None = None
    rtr_session: int | None = None
    rtr_serial: int | None = None
    #: The RTR protocol version of the data in force (None for exports).
    rtr_version: int | None = None
    untrusted: bool = False
    revoked: bool = False
    #: Holds a recovered payload its source has not replaced yet.
    recovered: bool = False
    #: False once removed or replaced by a configuration change: late deliveries are dropped.
    current: bool = True
    #: Bumped by every change of what this entry contributes (payload, trust, revocation).
    version: int = 0
    #: When its last record expires (None: some never does); cached per payload.
    last_record_expiry: float | None = None
    scope: anyio.CancelScope | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        """The source's name."""
        return self.source.name

    # ------------------------------------------------------------------ changes
    def seed(self, recovered: Recovered, keeper: TimeKeeper) -> None:
        """Hold ``recovered`` until the source delivers; its time floor goes to ``keeper``."""
        keeper.observe(recovered.not_before_wall)
        self._set_payload(recovered.payload)
        self.identity = None
        self.anchor = keeper.anchor()
        self.accepted_at = recovered.accepted_wall
        self.expires_at = recovered.expires_at
        self.rtr_session = recovered.rtr_session
        self.rtr_serial = recovered.rtr_serial
        self.rtr_version = recovered.rtr_version
        self.recovered = True
        self.untrusted = self.revoked = False
        self.version += 1

    def accept(self, delivery: Delivery, keeper: TimeKeeper) -> bool:
        """Apply ``delivery``; False when the entry is retired (the delivery is dropped)."""
        if not self.current:
            return False
        self.version += 1
        if delivery.revoked:
            self._set_payload(None)
            self.identity = None
            self.expires_at = None
            self.revoked = True
            self.recovered = False
            return True
        same_input = delivery.identity == self.identity and self.anchor is not None
        self._set_payload(delivery.payload)
        self.expires_at = delivery.expires_at
        self.rtr_session = delivery.rtr_session
        self.rtr_serial = delivery.rtr_serial
        self.rtr_version = delivery.rtr_version
        self.revoked = False
        self.recovered = False
        if same_input:
            # The same raw input read again (same build time, or the same records): it keeps
            # its anchor and its trust state; it renews nothing.
            return True
        self.identity = delivery.identity
        self.anchor = keeper.anchor()
        self.accepted_at = keeper.now()
        if self.untrusted:
            log.info("source %s: new raw input admitted; its time state is trusted", self.name)
        self.untrusted = False
        return True

    def distrust(self, drift: float) -> None:
        """Mark the data unusable after a wall-clock jump of ``drift`` seconds."""
        self.untrusted = True
        self.version += 1
        log.warning(
            "source %s: the wall clock moved %+.0f s against the monotonic clock since its data "
            "was admitted; its data is not used until new raw input is admitted",
            self.name,
            drift,
            extra={"event": "source_untrusted", "source": self.name, "drift_s": round(drift)},
        )

    def retire(self) -> None:
        """The source left the configuration: stop its task, drop whatever it delivers later."""
        self.current = False
        self.version += 1
        if self.scope is not None:
            self.scope.cancel()

    def _set_payload(self, payload: SourcePayload | None) -> None:
        if payload is not self.payload:
            self.payload = payload
            # Unknown until a build (in a worker thread) scans the payload: see `learn`.
            self.last_record_expiry = None

    def learn(self, payload: SourcePayload, last_record_expiry: float | None) -> None:
        """Take a worker thread's scan of ``payload`` (ignored if the payload changed since)."""
        if payload is self.payload:
            self.last_record_expiry = last_record_expiry

    # ------------------------------------------------------------------ judgement
    def availability(self, now: float) -> Availability:
        """What the data is worth at effective time ``now``."""
        if self.revoked:
            return Availability.REVOKED
        if self.payload is None:
            return Availability.NONE
        if self.untrusted:
            return Availability.UNTRUSTED
        if self.expires_at is not None and now >= self.expires_at:
            return Availability.EXPIRED
        if self.last_record_expiry is not None and now >= self.last_record_expiry:
            return Availability.READY_EMPTY
        return Availability.READY
