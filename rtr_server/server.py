"""`RtrServer`: TCP and TLS listeners, one task per router, access, admission, Notify, shutdown.

The server holds the one current `PublishedState`; `publish` swaps it in with one assignment, so a
response always comes from a single consistent state. Serial Notify goes to every negotiated, idle
session at most once per ``notify_interval``; publishes inside the interval are announced together
at its end. At ``max_connections`` or ``max_per_ip`` the oldest connection that has not sent a valid
query yet makes way for a newcomer (`rtr_server.admission`); only when none is left is the newcomer
closed at accept. Both are counted, and so are routers outside a listener's allowed networks (closed
before any read; their log lines are rate-limited). On a TLS listener the handshake runs in the
router's own task (a slow one never delays accept), within ``tls_handshake_timeout``; a refused
router is closed, counted by reason and logged. Cancelling `serve` is the shutdown: v2 sessions get
Cache Restart (or Cache Shutdown), every stream is closed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import anyio
from anyio.abc import (
    ByteStream,
    SocketAttribute,
    SocketListener,
    SocketStream,
    TaskGroup,
    TaskStatus,
)
from anyio.streams.tls import TLSAttribute

from rtr_protocol import CloseReason, Hold, SendDelta, SendFull
from rtr_server.accept import accept_sockets_forever
from rtr_server.access import LogRateLimit, is_allowed
from rtr_server.admission import Admission
from rtr_server.admission_slot import Slot
from rtr_server.connection import RtrConnection
from rtr_server.handover import adopt_connections
from rtr_server.open_listeners import open_listeners
from rtr_server.parking import ParkingLot
from rtr_server.raw_stream import RawSocketStream
from rtr_server.responses import ResponseCache
from rtr_server.serving import HeldAnswer, ServerStats
from rtr_server.session_log import log_close, log_response
from rtr_server.settings import ListenAddress, ServerSettings
from rtr_server.tcp_auth import rekey
from rtr_server.tls import Refusal, TlsRefusedError, accept_tls, make_server_context
from snapshot.publisher import PublishedState

if TYPE_CHECKING:
    from rtr_server.ssh import SshService

log = logging.getLogger(__name__)

#: Sessions the notifier wakes (or writes a parked one's Notify to) before it lets others run.
NOTIFY_BATCH = 256


class RtrServer:
    """Serves the current `PublishedState` to routers over TCP and TLS."""

    def __init__(self, settings: ServerSettings) -> None:
        """Configure; no socket is opened until `serve`.

        :raises ~rtr_server.tls.TlsConfigError: when the TLS files are unusable
        """
        self.settings = settings
        #: Built once; shared by every TLS connection.
        self.tls_context = make_server_context(settings.tls) if settings.tls else None
        self.ssh: SshService | None = None
        if settings.ssh is not None:
            from rtr_server.ssh import SshService  # asyncssh is imported only for SSH

            self.ssh = SshService(self, settings.ssh)
        self.state: PublishedState | None = None
        self.responses = ResponseCache(settings.timers, settings.response_cache_bytes)
        self.stats = ServerStats()
        self.connections: set[RtrConnection] = set()
        #: Who holds a connection slot, and who makes way at the caps (every transport).
        self.admission = Admission(settings.max_connections, settings.max_per_ip)
        self._published: anyio.Event | None = None
        self._refusal_log = LogRateLimit()
        self.addresses: list[tuple[str, int]] = []
        #: What each bound socket serves, in the order of ``addresses``.
        self.bound: list[tuple[ListenAddress, str, int]] = []
        self._sockets: list[socket.socket] = []
        #: One per accept loop: cancelled to stop accepting (`rtr_server.handover`).
        self.accept_scopes: list[anyio.CancelScope] = []
        #: Set when a session ends (then replaced by whoever waits; `rtr_server.handover`).
        self.session_ended: anyio.Event | None = None
        #: Idle plain-TCP sessions held without a task (`rtr_server.parking`).
        self.parking = ParkingLot(self._resume, self._close_parked)
        self._tg: TaskGroup | None = None

    # ------------------------------------------------------------------ data
    def publish(self, state: PublishedState) -> None:
        """Make ``state`` current and schedule a Serial Notify round.

        At the first publish, held queries are answered and v0 sessions that got No Data are
        closed for a redial at once (not at the notify round).
        """
        first = self.state is None
        self.state = state
        self.responses.retain_serial(state.serial.value)
        if first:
            waiting = [c for c in self.connections if c.session.held or c.session.wants_redial]
            if waiting:
                log.info(
                    "first data: answering %d held queries, closing %d v0 sessions for a redial",
                    sum(c.session.held for c in waiting),
                    sum(c.session.wants_redial for c in waiting),
                )
            for connection in waiting:
                connection.wake()
        if self._published is not None:
            self._published.set()

    @property
    def held_now(self) -> int:
        """Queries held for the first data right now."""
        return sum(1 for c in self.connections if c.session.held)

    def query_held(self, peer: str, action: Hold) -> None:
        """Count and log a query held for the first data."""
        self.stats.held_queries += 1
        log.info(
            "router %s: %s query v%d held until the first data (at most %g s)",
            peer,
            "serial" if action.serial_query else "reset",
            action.version,
            self.settings.arrival_hold,
        )

    def hold_expired(self, peer: str) -> None:
        """Count and log a held query that gets No Data Available."""
        self.stats.hold_timeouts += 1
        log.warning(
            "router %s: no data within the arrival hold (%g s): No Data Available",
            peer,
            self.settings.arrival_hold,
        )

    async def response(self, action: SendFull | SendDelta) -> Sequence[bytes]:
        """The shared encoded chunks of a full or delta reply (see `ResponseCache`)."""
        return await self.responses.response(action)

    def ready_response(self, action: SendFull | SendDelta) -> Sequence[bytes] | None:
        """Those chunks without waiting: encoded, or small and encoded now (None: `response`)."""
        return self.responses.ready(action)

    def response_sent(
        self, peer: str, action: SendFull | SendDelta, size: int, held: HeldAnswer | None = None
    ) -> None:
        """Called by a connection after it wrote a full or delta response of ``size`` octets."""
        log_response(log, peer, action, size, held)

    # ------------------------------------------------------------------ serving
    async def serve(
        self, *, task_status: TaskStatus[list[tuple[str, int]]] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on every configured address until cancelled; reports the bound addresses."""
        self._published = anyio.Event()
        if self.state is not None:
            self._published.set()
        listeners, backlog = await open_listeners(self.settings)
        ssh_bound: list[tuple[ListenAddress, str, int]] = []
        try:
            if self.ssh is not None:
                ssh_bound = await self.ssh.bind_all(self.settings.listen, self.settings.inherited)
        except BaseException:
            for listener, _ in listeners:
                await listener.aclose()
            if self.ssh is not None:
                await self.ssh.close_listeners()
            raise
        self.bound = [
            (
                spec,
                str(lst.extra(SocketAttribute.local_address)[0]),
                lst.extra(SocketAttribute.local_port),
            )
            for lst, spec in listeners
        ]
        self.addresses = [(host, port) for _, host, port in self.bound]
        self._sockets = [lst.extra(SocketAttribute.raw_socket) for lst, _ in listeners]
        self.bound += ssh_bound  # after the TCP ones: `_sockets` and `rekey` index those
        self.addresses = [(host, port) for _, host, port in self.bound]
        for spec, host, port in self.bound:
            log.info(
                "listening for routers on %s port %d%s%s%s%s",
                host,
                port,
                " (TLS)" if spec.tls else " (SSH)" if spec.ssh else "",
                " (socket from systemd)" if self._from_systemd(spec) else "",
                "" if spec.allow is None else f", allowed: {', '.join(map(str, spec.allow))}",
                _keys_text(spec),
            )
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self.parking.run)
            names = []
            for (listener, spec), (_, host, port) in zip(listeners, self.bound, strict=False):
                names.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
                tg.start_soon(self._accept_loop, listener, spec, names[-1], tg)
            for conn, i in backlog:  # waited in an inherited listener's backlog: served now
                self._admit(conn, tg, listeners[i][1], names[i])
            await adopt_connections(self, tg, names)
            if self.ssh is not None:
                tg.start_soon(self.ssh.serve, tg)
            tg.start_soon(self._notifier)
            task_status.started(self.addresses)

    def _from_systemd(self, spec: ListenAddress) -> bool:
        names = {s.name for s in self.settings.inherited}
        return bool(names) and (not spec.ssh or "rtr-ssh" in names)

    @property
    def listening_sockets(self) -> list[socket.socket]:
        """The TCP and TLS listening sockets, in the order of ``bound``."""
        return self._sockets

    def rekey(self, listen: Sequence[ListenAddress]) -> list[str]:
        """Apply the TCP-MD5/AO keys of ``listen`` to the live listeners at the same addresses.

        New keys are added before old ones are removed (rollover); returns what changed.
        """
        changes: list[str] = []
        for i, (spec, host, port) in enumerate(self.bound):
            if spec.ssh:
                continue  # SSH listeners take no TCP keys (and come after the TCP ones)
            for new in listen:
                if (str(new), new.tls) == (str(spec), spec.tls) or (
                    self.settings.inherited and (new.port, new.tls) == (spec.port, spec.tls)
                ):
                    old_keys = (spec.tcp_md5, spec.tcp_ao)
                    done = rekey(self._sockets[i], old_keys, (new.tcp_md5, new.tcp_ao))
                    changes += [f"{text} on {host} port {port}" for text in done]
                    self.bound[i] = (
                        dataclasses.replace(spec, tcp_md5=new.tcp_md5, tcp_ao=new.tcp_ao),
                        host,
                        port,
                    )
                    break
        return changes

    async def _accept_loop(
        self, listener: SocketListener, spec: ListenAddress, name: str, tg: TaskGroup
    ) -> None:
        def failed() -> None:
            self.stats.accept_errors += 1

        scope = anyio.CancelScope()
        self.accept_scopes.append(scope)
        with scope:
            await accept_sockets_forever(
                listener,
                lambda conn: self._admit(conn, tg, spec, name),
                what=name,
                failed=failed,
            )

    def _admit(self, conn: socket.socket, tg: TaskGroup, spec: ListenAddress, name: str) -> None:
        stream = RawSocketStream(conn)
        try:
            remote = conn.getpeername()
        except OSError:
            remote = "?"
        if isinstance(remote, tuple):
            peer_ip, port = str(remote[0]), int(remote[1])
        else:
            peer_ip, port = str(remote), 0
        peer = f"[{peer_ip}]:{port}" if ":" in peer_ip else f"{peer_ip}:{port}"
        slot = self.admit(peer_ip, peer, spec, name)
        if slot is None:
            tg.start_soon(_close_quietly, stream)
            return
        with contextlib.suppress(OSError):
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if spec.tls:
            tg.start_soon(self._run_tls, stream, peer, name, slot)
            return
        tg.start_soon(self.run_session, self.session(stream, peer, "tcp", slot), slot)

    # ------------------------------------------------------------------ admission
    def admit(
        self,
        peer_ip: str,
        peer: str,
        spec: ListenAddress,
        listener: str,
        on_evict: Callable[[], None] | None = None,
    ) -> Slot | None:
        """Allowed networks and the caps for a new connection (any transport); None: refused.

        A refusal is counted and logged. The slot then belongs to the caller: `session` makes
        it an RTR session, `release` gives it back (a refused handshake or login). While it has
        no session, an eviction calls ``on_evict``.
        """
        if not is_allowed(peer_ip, spec.allow):
            self.stats.rejected_not_allowed += 1
            self.stats.rejected_not_allowed_by_listener[listener] += 1
            self.log_refusal("not-allowed", listener, peer, "address not in the allowed networks")
            return None
        slot = Slot(on_evict)
        admitted = self.admission.admit(peer_ip, slot.evict)
        if isinstance(admitted, str):
            if admitted == "max_connections":
                self.stats.rejected_max_connections += 1
                reason = f"max-connections ({self.settings.max_connections}) reached"
            else:
                self.stats.rejected_max_per_ip += 1
                reason = f"max-per-ip ({self.settings.max_per_ip}) reached for {peer_ip}"
            self.log_refusal(admitted, listener, peer, f"{reason}, every connection a session")
            return None
        slot.ticket = admitted
        return slot

    def session(self, stream: ByteStream, peer: str, transport: str, slot: Slot) -> RtrConnection:
        """The RTR session of an admitted stream, registered; its first query negotiates it."""
        self.stats.accepted += 1
        self.stats.accepted_by_transport[transport] += 1
        ticket = slot.ticket
        assert ticket is not None
        connection = RtrConnection(
            stream,
            self,
            peer,
            query_timeout=self.admission.query_timeout(self.settings.query_timeout),
            on_query=lambda: self.admission.negotiated(ticket),
        )
        slot.connection = connection
        connection.slot = slot
        connection.parking = isinstance(stream, RawSocketStream) and ParkingLot.available
        if slot.evicted:
            connection.evict()
        self.connections.add(connection)
        return connection

    def log_refusal(self, kind: str, listener: str, peer: str, reason: str) -> None:
        """One line per refusal, at most a few per listener and kind every 10 s."""
        logged, suppressed = self._refusal_log.allow(f"{kind} {listener}", anyio.current_time())
        if logged:
            more = f" ({suppressed} more refused like this not logged)" if suppressed else ""
            log.warning("refused router %s on %s: %s%s", peer, listener, reason, more)

    def release(self, slot: Slot) -> None:
        """Give back an admitted connection's slot: its session ended, or it got none."""
        if slot.ticket is not None:
            self.admission.release(slot.ticket)

    async def _run_tls(self, stream: SocketStream, peer: str, name: str, slot: Slot) -> None:
        """Handshake and address check, then the RTR session over the TLS stream."""
        assert self.tls_context is not None
        assert slot.ticket is not None
        try:
            with slot.scope:  # an eviction during the handshake cancels it
                tls = await accept_tls(
                    stream,
                    self.tls_context,
                    peer_ip=slot.ticket.peer_ip,
                    deadline=anyio.current_time() + self.settings.tls_handshake_timeout,
                )
            if slot.scope.cancelled_caught:
                self.stats.disconnects[CloseReason.EVICTED] += 1
                self.log_refusal("evicted", name, peer, "evicted during the TLS handshake")
                self.release(slot)
                await _close_quietly(stream)
                return
        except TlsRefusedError as exc:
            if exc.refusal is Refusal.HANDSHAKE_TIMEOUT:
                self.stats.tls_handshake_timeouts += 1
            elif exc.refusal is Refusal.IP_MISMATCH:
                self.stats.rejected_tls_ip_mismatch += 1
            else:
                self.stats.tls_handshake_failures += 1
            self.log_refusal(exc.refusal.value, name, peer, exc.reason)
            self.release(slot)
            await _close_quietly(stream)
            return
        except BaseException:  # shutdown during the handshake
            self.release(slot)
            await _close_quietly(stream)
            raise
        connection = self.session(tls, peer, "tls", slot)
        await self.run_session(connection, slot, f" over {tls.extra(TLSAttribute.tls_version)}")

    async def run_session(self, connection: RtrConnection, slot: Slot, via: str = "") -> None:
        """Serve a registered session until it ends (or is parked); then give its slot back."""
        connection.started = anyio.current_time()
        connection.slot = slot
        log.info(
            "router %s connected%s (%d connections)",
            connection.peer,
            via,
            len(self.connections),
            extra={
                "event": "session_open",
                "peer": connection.peer,
                "connections": len(self.connections),
                "transport": via.strip() or "tcp",
            },
        )
        await self._serve(connection)

    async def _serve(self, connection: RtrConnection) -> None:
        """Run a session until it ends, or park it when it stops at an idle point."""
        parked = False
        try:
            parked = await connection.run()
        finally:
            if not parked:
                self._session_over(connection)
        fd = connection.stream.fileno() if isinstance(connection.stream, RawSocketStream) else -1
        if parked and not self.parking.park(connection, fd):
            connection.parking = False  # cannot be parked (shutting down): runs on
            self._resume(connection)

    def _resume(self, connection: RtrConnection) -> None:
        """Run a woken parked session again (in the server's task group)."""
        assert self._tg is not None
        self._tg.start_soon(self._serve, connection)

    async def _close_parked(self, connection: RtrConnection) -> None:
        """End a parked session at shutdown."""
        try:
            await connection.close_parked()
        finally:
            self._session_over(connection)

    def _session_over(self, connection: RtrConnection) -> None:
        """A session ended: forget it, give its slot back, count and log it."""
        self.connections.discard(connection)
        if isinstance(connection.slot, Slot):
            self.release(connection.slot)
        self.stats.disconnects[connection.close_reason] += 1
        log_close(log, connection, anyio.current_time() - connection.started)
        if self.session_ended is not None:
            self.session_ended.set()

    async def _notifier(self) -> None:
        """Serial Notify after each publish, at most once per ``notify_interval`` per session.

        A session not notified within the interval is notified at once; one notified less than
        an interval ago is notified when its interval ends (publishes in between are announced
        together). A connection gone meanwhile is dropped from the pending set.
        """
        assert self._published is not None
        interval = self.settings.notify_interval
        pending: set[RtrConnection] = set()
        next_due = math.inf
        while True:
            with anyio.move_on_after(next_due - anyio.current_time()):
                await self._published.wait()
            if self._published.is_set():
                self._published = anyio.Event()
                pending |= self.connections
            now = anyio.current_time()
            next_due = math.inf
            requested = False
            for done, connection in enumerate(list(pending)):
                if done % NOTIFY_BATCH == NOTIFY_BATCH - 1:
                    await anyio.lowlevel.checkpoint()  # thousands of parked writes: let others run
                due = connection.notified_at + interval
                if connection not in self.connections:
                    pending.discard(connection)
                elif due <= now:
                    pending.discard(connection)
                    connection.request_notify()
                    requested = True
                else:
                    next_due = min(next_due, due)
            if requested:
                self.stats.notify_rounds += 1


def _keys_text(spec: ListenAddress) -> str:
    """``, TCP-MD5 for …`` and ``, TCP-AO for …`` (the peers, never the keys)."""
    text = ""
    if spec.tcp_md5:
        text += f", TCP-MD5 for {', '.join(str(k.peer) for k in spec.tcp_md5)}"
    if spec.tcp_ao:
        text += f", TCP-AO for {', '.join(f'{k.peer} (key {k.key_id})' for k in spec.tcp_ao)}"
    return text


async def _close_quietly(stream: SocketStream) -> None:
    with anyio.move_on_after(1.0, shield=True):
        await stream.aclose()
