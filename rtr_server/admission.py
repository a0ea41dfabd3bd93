"""`Admission`: at the connection caps, a silent connection makes way; a router session never does.

Every admitted connection holds a `Ticket` until it ends. A ticket is *silent* until its router
sends a valid query (`Admission.negotiated`), and silent tickets are kept in admission order,
overall and per address. When a newcomer finds ``max_per_ip`` reached for its address, the
oldest silent connection of that address is evicted for it; when it finds ``max_connections``
reached, the oldest silent connection overall is. Only when no silent connection is left to
evict is the newcomer refused. A negotiated session is never evicted.

Under pressure (admitted connections at or above `PRESSURE_ON` of ``max_connections``) the
pre-query timeout shrinks to `PRESSURE_QUERY_TIMEOUT` (never above the configured one), so a
flood that never speaks is shed sooner; the episode ends below `PRESSURE_OFF`. Each episode is
logged once as it starts and once as it ends, with what it evicted and refused. Pure
bookkeeping: no sockets, clocks or tasks; eviction is the ticket's own callback.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count

__all__ = [
    "PRESSURE_OFF",
    "PRESSURE_ON",
    "PRESSURE_QUERY_TIMEOUT",
    "Admission",
    "AdmissionStats",
    "Ticket",
]

log = logging.getLogger(__name__)

#: Share of ``max_connections`` in use at which an episode of pressure starts, and below which
#: it ends.
PRESSURE_ON = 0.9
PRESSURE_OFF = 0.75
#: The pre-query timeout during pressure (seconds).
PRESSURE_QUERY_TIMEOUT = 5.0

_ORDER = count()


class Ticket:
    """One admitted connection: its address and how to evict it."""

    __slots__ = ("_evict", "order", "peer_ip", "released", "silent")

    def __init__(self, peer_ip: str, evict: Callable[[], None]) -> None:
        """A silent ticket for a connection from ``peer_ip``; ``evict`` closes that connection."""
        self.peer_ip = peer_ip
        self._evict = evict
        self.order = next(_ORDER)
        self.silent = True
        self.released = False

    def evict(self) -> None:
        """Close the connection (its task then ends and releases nothing more)."""
        self._evict()


@dataclass
class AdmissionStats:
    """Evictions and refusals by reason (``max_connections``, ``max_per_ip``), and episodes."""

    evicted: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    pressure_episodes: int = 0


class Admission:
    """The admission bookkeeping of one server (all its listeners and transports)."""

    def __init__(self, max_connections: int, max_per_ip: int) -> None:
        """Caps as configured; both at least 1."""
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.stats = AdmissionStats()
        self.under_pressure = False
        self._total = 0
        self._per_ip: Counter[str] = Counter()
        #: Silent tickets in admission order (dicts keep insertion order; values unused).
        self._silent: dict[Ticket, None] = {}
        self._silent_by_ip: dict[str, dict[Ticket, None]] = {}
        self._episode: Counter[str] = Counter()

    # ------------------------------------------------------------------ queries
    @property
    def admitted(self) -> int:
        """Connections holding a ticket."""
        return self._total

    @property
    def silent(self) -> int:
        """Admitted connections that have not sent a valid query yet."""
        return len(self._silent)

    def count_for(self, peer_ip: str) -> int:
        """Connections holding a ticket from ``peer_ip``."""
        return self._per_ip.get(peer_ip, 0)

    def query_timeout(self, configured: float) -> float:
        """The pre-query timeout for a connection starting now."""
        if self.under_pressure:
            return min(configured, PRESSURE_QUERY_TIMEOUT)
        return configured

    # ------------------------------------------------------------------ changes
    def admit(self, peer_ip: str, evict: Callable[[], None]) -> Ticket | str:
        """A ticket for a newcomer from ``peer_ip`` (evicting for it), or the refusal reason."""
        if self._per_ip.get(peer_ip, 0) >= self.max_per_ip:
            by_ip = self._silent_by_ip.get(peer_ip)
            if not by_ip:
                return self._refuse("max_per_ip")
            self._evict(next(iter(by_ip)), "max_per_ip")
        if self._total >= self.max_connections:
            if not self._silent:
                return self._refuse("max_connections")
            self._evict(next(iter(self._silent)), "max_connections")
        ticket = Ticket(peer_ip, evict)
        self._total += 1
        self._per_ip[peer_ip] += 1
        self._silent[ticket] = None
        self._silent_by_ip.setdefault(peer_ip, {})[ticket] = None
        self._check_pressure()
        return ticket

    def negotiated(self, ticket: Ticket) -> None:
        """``ticket``'s router sent a valid query: it is never evicted from now on."""
        if ticket.silent and not ticket.released:
            self._forget_silent(ticket)

    def release(self, ticket: Ticket) -> None:
        """``ticket``'s connection ended (idempotent; an evicted ticket is released already)."""
        if self._drop(ticket):
            self._check_pressure()

    # ------------------------------------------------------------------ internals
    def _drop(self, ticket: Ticket) -> bool:
        if ticket.released:
            return False
        ticket.released = True
        if ticket.silent:
            self._forget_silent(ticket)
        self._total -= 1
        self._per_ip[ticket.peer_ip] -= 1
        if self._per_ip[ticket.peer_ip] <= 0:
            del self._per_ip[ticket.peer_ip]
        return True

    def _forget_silent(self, ticket: Ticket) -> None:
        ticket.silent = False
        self._silent.pop(ticket, None)
        by_ip = self._silent_by_ip.get(ticket.peer_ip)
        if by_ip is not None:
            by_ip.pop(ticket, None)
            if not by_ip:
                del self._silent_by_ip[ticket.peer_ip]

    def _evict(self, victim: Ticket, reason: str) -> None:
        self.stats.evicted[reason] += 1
        self._episode[f"evicted {reason}"] += 1
        self._drop(victim)  # the newcomer takes its place: no end of pressure in between
        victim.evict()

    def _refuse(self, reason: str) -> str:
        self.stats.refused[reason] += 1
        self._episode[f"refused {reason}"] += 1
        return reason

    def _check_pressure(self) -> None:
        used = self._total / self.max_connections
        if not self.under_pressure and used >= PRESSURE_ON:
            self.under_pressure = True
            self.stats.pressure_episodes += 1
            self._episode.clear()
            log.warning(
                "admission under pressure: %d of %d connections in use (%d silent); "
                "silent connections make way for newcomers, pre-query timeout %.0f s",
                self._total,
                self.max_connections,
                len(self._silent),
                PRESSURE_QUERY_TIMEOUT,
            )
        elif self.under_pressure and used < PRESSURE_OFF:
            self.under_pressure = False
            done = ", ".join(f"{n} {what}" for what, n in sorted(self._episode.items()))
            log.warning(
                "admission pressure over: %d of %d connections in use; during it: %s",
                self._total,
                self.max_connections,
                done or "nothing evicted or refused",
            )
