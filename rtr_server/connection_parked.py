"""`ParkedIo`: what a parked router session does without a task of its own (`rtr_server.parking`).

A publish's Serial Notify is written straight from the notifier (`notify_parked`), and a query
that arrives is answered at once (`serve_parked`) when its answer is a small delta (encoded once
into the shared cache, there and then if no session did yet) and the socket buffer takes it
whole: no task is started for either, so a
publish reaches ten thousand parked routers at the cost of a read and two short non-blocking
writes each. Everything else (a full table, an answer to encode, a write that does not fit, a
Cache Reset or an error, a closing router, a kept router's first answers) is left to the
session's pump: these return False, and what was already read or decided waits for the pump in
``_pending_action`` (a PDU taken, not acted on), ``_unsent`` (the rest of a write the socket
took in part; with ``_unsent_response`` the answer it completes) or ``_pending_error``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final, cast

import anyio

from rtr_protocol import NEED_DATA, Action, SendDelta, ServerSession
from rtr_server.raw_stream import RawSocketStream
from rtr_server.serving import ConnectionStats, ServingContext

__all__ = ["INLINE_ANSWER_MAX", "INLINE_PDUS", "ParkedIo"]

#: The largest answer written from the parking lot (a delta of a few thousand changes).
INLINE_ANSWER_MAX: Final = 256 * 1024
#: PDUs a parked session answers at one wake; a router that sent more is served by its task,
#: which lets others run between its writes.
INLINE_PDUS: Final = 32
#: Octets read at once.
_RECEIVE_SIZE: Final = 65_536


class ParkedIo:
    """The parked half of `rtr_server.connection.RtrConnection` (its base)."""

    __slots__ = (
        "_aligned",
        "_notify_wanted",
        "_pending_action",
        "_pending_error",
        "_unpark",
        "_unsent",
        "_unsent_response",
        "notified_at",
        "parking",
    )

    # Set by RtrConnection.
    session: ServerSession
    server: ServingContext
    stream: anyio.abc.ByteStream
    stats: ConnectionStats
    peer: str

    def __init__(self) -> None:
        """Not parked, nothing pending, no Notify wanted or sent yet."""
        self._notify_wanted = False
        #: When this session was last sent a Serial Notify (event-loop time; -inf: never).
        self.notified_at = -math.inf
        #: False while a write is cut short mid-PDU: nothing more may be sent then.
        self._aligned = True
        #: May `run` end at an idle point for the session to be parked (set by the server).
        self.parking = False
        #: Wakes the session while it is parked (`rtr_server.parking`).
        self._unpark: Callable[[], None] | None = None
        self._pending_action: Action | None = None
        self._pending_error: Exception | None = None
        self._unsent: memoryview | None = None
        self._unsent_response: tuple[SendDelta, int] | None = None

    def parked(self, unpark: Callable[[], None] | None) -> None:
        """The session is parked (``unpark`` wakes it) or, with None, no longer."""
        self._unpark = unpark

    def notify_parked(self) -> bool:
        """The wanted Serial Notify of a parked session, written now; False: run the session."""
        state = self.server.state
        session = self.session
        if state is None or session.last_serial == state.serial:
            self._notify_wanted = False  # nothing to announce (as the pump decides)
            return True
        if session.kept_unconfirmed:
            return False  # the pump confirms it or sends its unasked Cache Reset
        data = session.serial_notify(state)
        if data is None:
            self._notify_wanted = False
            return True
        sent = self._send_now(data)
        if not sent:
            return False  # the pump writes it (within its write timeout) or meets the error
        self._notify_wanted = False
        self.notified_at = anyio.current_time()
        self.stats.notifies += 1
        self.server.stats.notifies += 1
        return sent == len(data)

    def serve_parked(self) -> bool:
        """The router of a parked session sent something; True: answered, parked on.

        False: run the session, with what was read and decided kept for it.
        """
        try:
            data = cast("RawSocketStream", self.stream).receive_nowait(_RECEIVE_SIZE)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            self._pending_error = exc
            return False
        if data is None:
            return True
        self.stats.bytes_received += len(data)
        session = self.session
        session.receive_data(data)
        state = self.server.state
        for taken in range(INLINE_PDUS + 1):
            if not data or session.kept_unconfirmed:
                break
            action = session.next_action(state)
            if action is NEED_DATA:
                return state is None or not session.wants_redial
            if taken == INLINE_PDUS:  # enough for one wake: the task takes it from here
                self._pending_action = action
                return False
            answered = self._answer_now(action) if isinstance(action, SendDelta) else None
            if answered is None:
                self._pending_action = action
                return False
            if not answered:
                return False
        return False  # the router closed, or a kept router

    def _answer_now(self, action: SendDelta) -> bool | None:
        """Write a cached delta; True: all of it went, False: part (the pump writes the rest).

        None: none did, or it is large or being encoded (the pump answers it).
        """
        chunks = self.server.ready_response(action)
        if chunks is None:
            return None
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if len(data) > INLINE_ANSWER_MAX:
            return None
        sent = self._send_now(data)
        if not sent:
            return None
        self.stats.serial_queries += 1
        self.server.stats.serial_queries += 1
        if sent < len(data):
            self._unsent_response = action, len(data)
            return False
        self.session.response_sent()
        self.server.response_sent(self.peer, action, len(data))
        return True

    def _send_now(self, data: bytes) -> int:
        """What the socket takes of ``data`` now (a partial write leaves ``_unsent``)."""
        try:
            sent = cast("RawSocketStream", self.stream).send_nowait(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            self._pending_error = exc
            return 0
        self.stats.bytes_sent += sent
        self.server.stats.bytes_sent += sent
        if 0 < sent < len(data):
            self._unsent = memoryview(data)[sent:]
            self._aligned = False  # nothing else goes out before the rest
        return sent
