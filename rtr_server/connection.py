"""`RtrConnection`: the pump between one router's byte stream and its sans-IO `ServerSession`.

The connection's task is the only writer on its stream. It reads while idle; a Serial Notify
request from the server cancels that read (safe: unread bytes stay buffered) so the notify is
written between responses, never inside one. Responses are shared encoded bytes written in
``chunk_size`` slices; a router that accepts nothing for ``write_timeout`` is dropped, so it
holds at most the socket buffers and a reference to shared bytes, and never slows anyone else.
Unsolicited Error Reports (10 on a stall, 12/13 at shutdown; v2 only) are sent only when the
stream is at a PDU boundary: after a write cut short mid-PDU one would be misframed, so the
connection is just closed.

A query that arrives before the first publish is held (`Hold`) for at most ``arrival_hold``
seconds: the connection keeps reading (only EOF matters then) until the server's publish wakes
it and the session answers from the shared encoding, or until the hold time runs out and the
session answers No Data Available. A v0 session that got No Data is closed at the first data
(`ServerSession.redial`), so a router that ignores the Serial Notify for serial 0 asks again.

`hand_over` (``kill -USR2``, plain TCP only): at the next PDU boundary the pump duplicates the
socket's descriptor into ``handed`` and ends without closing the stream or saying goodbye, so
the router stays connected through the exec (`rtr_server.handover`).

With ``parking`` (plain TCP over `rtr_server.raw_stream.RawSocketStream`), a negotiated session
with nothing to send, no timer and no hand-over pending ends its `run` instead of waiting for
its router: `run` returns True and the server parks it (`rtr_server.parking`) until the router
sends something or `wake` is called; then `run` is called again and carries on.
"""

from __future__ import annotations

import logging
import math
import os
import ssl
from collections.abc import Callable
from typing import cast

import anyio
from anyio.abc import ByteStream, SocketAttribute

from rtr_protocol import (
    NEED_DATA,
    Close,
    CloseReason,
    ErrorCode,
    Hold,
    SendCacheReset,
    SendDelta,
    SendError,
    SendFull,
    ServerSession,
)
from rtr_server.connection_parked import ParkedIo
from rtr_server.raw_stream import RawSocketStream
from rtr_server.serving import ConnectionStats, HeldAnswer, ServingContext
from rtr_server.settings import ShutdownNotice
from snapshot import PublishedState

log = logging.getLogger(__name__)

RECEIVE_SIZE = 65_536
#: How long a router kept through a handover has to answer our unasked Cache Reset before it
#: is sent a Serial Notify too (`rtr_protocol.session_handover`); BIRD and GoBGP ask in ms.
HANDOVER_NOTIFY_AFTER = 1.0


class WriteStalledError(Exception):
    """Raised when the router accepts no bytes within the write timeout."""


class RtrConnection(ParkedIo):
    """One router connection; `run` owns the stream and closes it on every path."""

    __slots__ = (
        "_evicted",
        "_follow_up_at",
        "_handing_over",
        "_on_query",
        "_query_timeout",
        "_receive_scope",
        "close_detail",
        "close_reason",
        "handed",
        "peer",
        "server",
        "session",
        "slot",
        "started",
        "stats",
        "stream",
    )

    def __init__(
        self,
        stream: ByteStream,
        server: ServingContext,
        peer: str,
        *,
        query_timeout: float | None = None,
        on_query: Callable[[], None] | None = None,
    ) -> None:
        """Wrap an accepted stream; the connection closes it when `run` ends.

        ``query_timeout`` overrides the settings' pre-query timeout (admission under pressure);
        ``on_query`` is called once, when the router's first valid query negotiated a version.
        """
        super().__init__()
        self.stream = stream
        self.server = server
        self.peer = peer
        settings = server.settings
        self.session = ServerSession(
            max_version=settings.max_version,
            min_version=settings.min_version,
            hold=settings.arrival_hold > 0,
        )
        self.stats = ConnectionStats()
        #: Why the session ended (a bounded set) and what exactly happened (for the log).
        self.close_reason = CloseReason.UNKNOWN
        self.close_detail = "unknown"
        #: When a kept router that has not answered our unasked Cache Reset gets a Notify.
        self._follow_up_at = math.inf
        self._receive_scope: anyio.CancelScope | None = None
        self._evicted = False
        self._handing_over = False
        #: The duplicated descriptor and its LISTEN_FDNAMES name once handed over.
        self.handed: tuple[int, str] | None = None
        self._query_timeout = settings.query_timeout if query_timeout is None else query_timeout
        self._on_query = on_query
        #: The server's records of the session: its admission slot, when it began.
        self.slot: object = None
        self.started = 0.0

    # ------------------------------------------------------------------ server side
    def request_notify(self) -> None:
        """Ask for a Serial Notify at the next point between responses."""
        self._notify_wanted = True
        self.wake()

    def wake(self) -> None:
        """Interrupt the read so the pump looks at the server's state again (e.g. a publish)."""
        unpark = self._unpark
        if unpark is not None:
            if self._notify_wanted and not self._handing_over and self.notify_parked():
                return  # written at once: parked on
            unpark()  # run again by the server
            return
        scope = self._receive_scope
        if scope is not None:
            scope.cancel()

    def hand_over(self) -> None:
        """Hand the connection to the next process image at the next PDU boundary."""
        self._handing_over = True
        self.wake()

    def evict(self) -> None:
        """Close a connection that has not sent a valid query yet (to admit a newcomer)."""
        self._evicted = True
        scope = self._receive_scope
        if scope is not None:
            scope.cancel()

    # ------------------------------------------------------------------ the pump
    async def run(self) -> bool:
        """Serve the router until it leaves, misbehaves, stalls or we shut down.

        True when the session stopped at an idle point to be parked (``parking``): the stream
        stays open and `run` is called again once the session is woken.
        """
        parked = False
        try:
            parked = await self._pump()
        except _HandedOverError:
            self._ended(CloseReason.HANDED_OVER, "handed over to the restarted server")
        except _QueryTimeoutError:
            self._ended(CloseReason.QUERY_TIMEOUT, "no query within the query timeout")
        except _EvictedError:
            self._ended(CloseReason.EVICTED, "no query yet: made way for a newcomer at a cap")
        except WriteStalledError:
            self._ended(CloseReason.WRITE_STALLED, "write stalled")
            if self._aligned:
                await self._goodbye(ErrorCode.TRANSPORT_FAILURE, "write stalled")
        except (
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            ConnectionError,
            ssl.SSLError,  # TLS: a bad record or an alert from the router
        ) as exc:
            self._ended(CloseReason.CONNECTION_LOST, f"connection lost ({type(exc).__name__})")
        except anyio.get_cancelled_exc_class():
            self._ended(CloseReason.SHUTDOWN, "server shutdown")
            with anyio.CancelScope(shield=True):
                if not self._aligned:
                    pass  # a reply was cut mid-PDU: an Error Report would be misframed
                elif self.server.settings.shutdown_notice is ShutdownNotice.SHUTDOWN:
                    await self._goodbye(ErrorCode.CACHE_SHUTDOWN, "cache shutting down")
                else:
                    await self._goodbye(ErrorCode.CACHE_RESTART, "cache restarting")
            raise
        finally:
            # A handed-over stream stays open (closed at exec), a parked one for its next run.
            if self.handed is None and not parked:
                with anyio.CancelScope(shield=True):
                    await self.stream.aclose()
        return parked

    async def close_parked(self) -> None:
        """End a parked session at shutdown as a running one ends: goodbye (v2), then close."""
        self._ended(CloseReason.SHUTDOWN, "server shutdown")
        try:
            if self.server.settings.shutdown_notice is ShutdownNotice.SHUTDOWN:
                await self._goodbye(ErrorCode.CACHE_SHUTDOWN, "cache shutting down")
            else:
                await self._goodbye(ErrorCode.CACHE_RESTART, "cache restarting")
        finally:
            with anyio.CancelScope(shield=True):
                await self.stream.aclose()

    async def _pump(self) -> bool:
        session = self.session
        server = self.server
        query_deadline = anyio.current_time() + self._query_timeout
        hold_deadline = math.inf
        held_at: float | None = None
        await self._after_parking()
        while True:
            if session.kept_unconfirmed and server.state is not None:
                self._confirm_kept(server.state)
            action = self._pending_action or session.next_action(server.state)
            self._pending_action = None
            if self._on_query is not None and session.version is not None:
                self._on_query()  # a valid query negotiated it: never evicted from now on
                self._on_query = None
            if action is NEED_DATA:
                if self._handing_over and session.at_boundary:
                    self._detach()
                if session.held and anyio.current_time() >= hold_deadline:
                    server.hold_expired(self.peer)
                    held_at = None
                    action = session.hold_expired()
                elif server.state is not None and session.wants_redial:
                    action = session.redial()
                else:
                    if self._notify_wanted:
                        await self._maybe_notify()
                    if session.held:
                        deadline = hold_deadline
                    elif session.version is None:
                        deadline = query_deadline
                    else:
                        deadline = self._follow_up_at
                    if self._may_park():
                        data = cast("RawSocketStream", self.stream).receive_nowait(RECEIVE_SIZE)
                        if data is None:
                            return True  # nothing waiting: parked until the router sends
                    else:
                        data = await self._receive(deadline)
                    if data is None:
                        if self._evicted:
                            raise _EvictedError
                        if session.version is None and anyio.current_time() >= deadline:
                            raise _QueryTimeoutError
                        if anyio.current_time() >= self._follow_up_at:
                            self._follow_up_at = math.inf
                            self._notify_wanted |= session.awaits_reset_query
                        continue  # woken (notify, publish) or the hold time is up
                    self.stats.bytes_received += len(data)
                    session.receive_data(data)
                    continue
            if isinstance(action, Hold):
                held_at = anyio.current_time()
                hold_deadline = held_at + server.settings.arrival_hold
                server.query_held(self.peer, action)
            elif isinstance(action, SendFull | SendDelta):
                self._count_query(serial=isinstance(action, SendDelta))
                asked = anyio.current_time()
                chunks = await server.response(action)
                ready = anyio.current_time()
                for chunk in chunks:
                    await self._write(chunk)
                session.response_sent()
                held = None
                if held_at is not None:
                    done = anyio.current_time()
                    held = HeldAnswer(asked - held_at, ready - asked, done - ready)
                    held_at = None
                server.response_sent(self.peer, action, sum(map(len, chunks)), held)
            elif isinstance(action, SendCacheReset):
                held_at = None
                server.stats.cache_resets += 1
                log.info("router %s: serial query answered with Cache Reset", self.peer)
                await self._write(action.data)
            elif isinstance(action, SendError):
                self._count_error(action.code)
                await self._write(action.data)
            elif isinstance(action, Close):
                self._ended(action.reason, action.detail)
                if action.error is not None:
                    self._count_error(action.error)
                if action.data:
                    await self._write(action.data)
                return False

    async def _after_parking(self) -> None:
        """What the parked session left to do (`rtr_server.connection_parked`)."""
        if self._pending_error is not None:
            error, self._pending_error = self._pending_error, None
            raise error
        if self._unsent is not None:
            rest, self._unsent = self._unsent, None
            await self._write(cast("bytes", rest))
            if self._unsent_response is not None:
                (action, size), self._unsent_response = self._unsent_response, None
                self.session.response_sent()
                self.server.response_sent(self.peer, action, size)

    def _may_park(self) -> bool:
        """Nothing to do but wait for the router: negotiated, no timer, Notify or hand-over."""
        return (
            self.parking
            and self.session.version is not None
            and not self.session.held
            and self._follow_up_at == math.inf
            and not (self._notify_wanted or self._handing_over or self._evicted)
        )

    def _confirm_kept(self, state: PublishedState) -> None:
        """A router kept in the session this image continued: say so, once (see the session)."""
        if not self.session.confirm_kept(state):
            return
        log.info(
            "router %s: kept through the handover, holding session %s serial %s: nothing to resend",
            self.peer,
            self.session.session_id,
            self.session.last_serial,
        )

    def _detach(self) -> None:
        """Duplicate the descriptor for the next process image; raises _HandedOverError."""
        session = self.session
        name = "router" if session.version is None else f"router-v{session.version}"
        if session.session_id is not None and session.last_serial is not None:
            name += f"-{session.session_id}-{int(session.last_serial)}"
        raw = self.stream.extra(SocketAttribute.raw_socket)
        self.handed = (os.dup(raw.fileno()), name)
        raise _HandedOverError

    async def _receive(self, deadline: float) -> bytes | None:
        """Next chunk from the router, b"" at EOF, None when woken or at ``deadline``."""
        with anyio.CancelScope(deadline=deadline) as scope:
            self._receive_scope = scope
            try:
                if self._notify_wanted or self._evicted:
                    scope.cancel()
                return await self.stream.receive(RECEIVE_SIZE)
            except anyio.EndOfStream:
                return b""
            finally:
                self._receive_scope = None
        return None

    async def _maybe_notify(self) -> None:
        self._notify_wanted = False
        state = self.server.state
        if state is None:
            return
        self._confirm_kept(state)
        if self.session.last_serial == state.serial:
            return
        reset = self.session.handover_reset()
        if reset is not None:
            log.info("router %s: kept through the handover: Cache Reset sent unasked", self.peer)
            self.server.stats.cache_resets += 1
            self._follow_up_at = anyio.current_time() + HANDOVER_NOTIFY_AFTER
            await self._write(reset)
            return
        data = self.session.serial_notify(state)
        if data is not None:
            self.notified_at = anyio.current_time()
            self.stats.notifies += 1
            self.server.stats.notifies += 1
            await self._write(data)

    async def _write(self, data: bytes) -> None:
        view = memoryview(data)
        size = self.server.settings.chunk_size
        timeout = self.server.settings.effective_write_timeout
        self._aligned = False  # every call writes whole PDUs
        for offset in range(0, len(view), size):
            piece = view[offset : offset + size]
            with anyio.move_on_after(timeout) as scope:
                # Slices of the shared bytes, not copies; every backend accepts buffers.
                await self.stream.send(cast("bytes", piece))
            if scope.cancelled_caught:
                raise WriteStalledError
            self.stats.bytes_sent += len(piece)
            self.server.stats.bytes_sent += len(piece)
        self._aligned = True

    async def _goodbye(self, code: ErrorCode, text: str) -> None:
        data = self.session.goodbye(code, text)
        if not data:
            return
        with anyio.move_on_after(1.0):
            try:
                await self.stream.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                return
            self.stats.bytes_sent += len(data)
            self.server.stats.bytes_sent += len(data)
            self._count_error(code)  # a goodbye report is an Error Report sent like any other

    def _count_query(self, *, serial: bool) -> None:
        if serial:
            self.stats.serial_queries += 1
            self.server.stats.serial_queries += 1
        else:
            self.stats.reset_queries += 1
            self.server.stats.reset_queries += 1

    def _ended(self, reason: CloseReason, detail: str) -> None:
        self.close_reason = reason
        self.close_detail = detail

    def _count_error(self, code: ErrorCode) -> None:
        number = int(code)
        self.stats.errors_sent[number] = self.stats.errors_sent.get(number, 0) + 1
        server_errors = self.server.stats.errors_sent
        server_errors[number] = server_errors.get(number, 0) + 1


class _HandedOverError(Exception):
    """Handed over at a PDU boundary (`RtrConnection.hand_over`)."""


class _QueryTimeoutError(Exception):
    """No query arrived within the query timeout."""


class _EvictedError(Exception):
    """Evicted before its first query (`RtrConnection.evict`)."""
