"""`Slot`: one admitted connection's place, and how to evict it at any stage of its life.

Made before `rtr_server.admission.Admission.admit` (its `evict` is the ticket's callback): while
a TLS handshake or an SSH login runs, eviction cancels `scope` and calls ``on_evict`` (an SSH
listener closes its connection there); once the RTR session exists, it asks the session to
end (`rtr_server.connection.RtrConnection.evict`).
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from rtr_server.admission import Ticket
from rtr_server.connection import RtrConnection

__all__ = ["Slot"]


class Slot:
    """One admitted connection's place: its ticket, and how to evict it at any stage."""

    __slots__ = ("connection", "evicted", "on_evict", "scope", "ticket")

    def __init__(self, on_evict: Callable[[], None] | None = None) -> None:
        """An empty place; the server fills in its ticket once admitted."""
        self.ticket: Ticket | None = None
        self.connection: RtrConnection | None = None
        #: Cancels a TLS handshake still running when the slot is evicted.
        self.scope = anyio.CancelScope()
        self.on_evict = on_evict
        self.evicted = False

    @property
    def peer_ip(self) -> str:
        """The address the ticket was taken for."""
        assert self.ticket is not None
        return self.ticket.peer_ip

    def evict(self) -> None:
        """End the connection before its first query (the admission chose it)."""
        self.evicted = True
        if self.connection is not None:
            self.connection.evict()
            return
        self.scope.cancel()
        if self.on_evict is not None:
            self.on_evict()
