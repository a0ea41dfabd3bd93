"""`RtrServer`: TCP and TLS listeners, one task per router, access, limits, Notify, shutdown.

The server holds the one current `PublishedState`; `publish` swaps it in with one assignment, so
a response always comes from a single consistent state. Serial Notify goes to every negotiated,
idle session at most once per ``notify_interval``; publishes inside the interval are announced
together at its end. Connections over ``max_connections`` or ``max_per_ip`` are closed at
accept and counted, and so are routers outside a listener's allowed networks (before any read;
their log lines are rate-limited). On a TLS listener the handshake runs in the router's own task
(a slow one never delays accept), within ``tls_handshake_timeout``; a refused router is closed,
counted by reason and logged. SSH listeners (`rtr_server.ssh`) use the same admission
(`admit`, `session`, `run_session`). Cancelling `serve` is the shutdown: v2 sessions get Cache
Restart (or Cache Shutdown), every stream is closed.
"""

from __future__ import annotations

import logging
import math
import socket
from collections import Counter
from collections.abc import Sequence
from typing import cast

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

from rtr_protocol import SendDelta, SendFull
from rtr_server.accept import accept_forever
from rtr_server.access import LogRateLimit, is_allowed
from rtr_server.connection import RtrConnection
from rtr_server.responses import ResponseCache
from rtr_server.serving import ServerStats
from rtr_server.settings import ListenAddress, ServerSettings
from rtr_server.ssh import SshService
from rtr_server.tls import Refusal, TlsRefusedError, accept_tls, make_server_context
from snapshot.publisher import PublishedState

log = logging.getLogger(__name__)


class RtrServer:
    """Serves the current `PublishedState` to routers over TCP, TLS and SSH."""

    def __init__(self, settings: ServerSettings) -> None:
        """Configure; no socket is opened until `serve`.

        :raises ~rtr_server.tls.TlsConfigError: when the TLS files are unusable
        :raises ~rtr_server.ssh.SshConfigError: when the SSH key files are unusable
        """
        self.settings = settings
        #: Built once; shared by every TLS connection.
        self.tls_context = make_server_context(settings.tls) if settings.tls else None
        self.ssh = SshService(self, settings.ssh) if settings.ssh is not None else None
        self.state: PublishedState | None = None
        self.responses = ResponseCache(settings.timers, settings.response_cache_bytes)
        self.stats = ServerStats()
        self.connections: set[RtrConnection] = set()
        self._per_ip: Counter[str] = Counter()
        self._published: anyio.Event | None = None
        self._handshaking = 0
        self._refusal_log = LogRateLimit()
        self.addresses: list[tuple[str, int]] = []
        #: What each bound socket serves, in the order of ``addresses``.
        self.bound: list[tuple[ListenAddress, str, int]] = []

    # ------------------------------------------------------------------ data
    def publish(self, state: PublishedState) -> None:
        """Make ``state`` current and schedule a Serial Notify round."""
        self.state = state
        self.responses.retain_serial(state.serial.value)
        if self._published is not None:
            self._published.set()

    async def response(self, action: SendFull | SendDelta) -> Sequence[bytes]:
        """The shared encoded chunks of a full or delta reply (see `ResponseCache`)."""
        return await self.responses.response(action)

    def response_sent(self, peer: str, action: SendFull | SendDelta, size: int) -> None:
        """Called by a connection after it wrote a full or delta response of ``size`` octets."""
        state = action.state
        if isinstance(action, SendFull):
            log.info(
                "router %s: reset query v%d -> full table, serial %s (%d bytes)",
                peer,
                action.version,
                state.serial,
                size,
            )
        else:
            counts = action.delta.counts()
            # Only what this version carries: no router keys on v0, no ASPA below v2.
            if action.version < 1:
                counts["router_key_announce"] = counts["router_key_withdraw"] = 0
            if action.version < 2:
                counts["aspa_announce"] = counts["aspa_withdraw"] = 0
            log.info(
                "router %s: serial query v%d from serial %s -> delta to serial %s "
                "(+%d/-%d VRPs, +%d/-%d router keys, %d/%d ASPA announce/withdraw; %d bytes)",
                peer,
                action.version,
                action.from_serial,
                state.serial,
                counts["vrp_announce"],
                counts["vrp_withdraw"],
                counts["router_key_announce"],
                counts["router_key_withdraw"],
                counts["aspa_announce"],
                counts["aspa_withdraw"],
                size,
            )

    # ------------------------------------------------------------------ serving
    async def serve(
        self, *, task_status: TaskStatus[list[tuple[str, int]]] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on every configured address until cancelled; reports the bound addresses."""
        self._published = anyio.Event()
        if self.state is not None:
            self._published.set()
        listeners: list[tuple[SocketListener, ListenAddress]] = []
        ssh_bound: list[tuple[ListenAddress, str, int]] = []
        try:
            for address in self.settings.listen:
                if address.ssh:
                    continue
                multi = await anyio.create_tcp_listener(
                    local_host=address.host, local_port=address.port
                )
                listeners.extend(
                    (lst, address) for lst in cast("list[SocketListener]", multi.listeners)
                )
            for address in self.settings.listen:
                if address.ssh and self.ssh is not None:
                    ssh_bound += [(address, h, p) for h, p in await self.ssh.bind(address)]
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
        ] + ssh_bound
        self.addresses = [(host, port) for _, host, port in self.bound]
        for spec, host, port in self.bound:
            log.info(
                "listening for routers on %s port %d%s%s",
                host,
                port,
                " (TLS)" if spec.tls else " (SSH)" if spec.ssh else "",
                "" if spec.allow is None else f", allowed: {', '.join(map(str, spec.allow))}",
            )
        async with anyio.create_task_group() as tg:
            for (listener, spec), (_, host, port) in zip(listeners, self.bound, strict=False):
                name = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
                tg.start_soon(self._accept_loop, listener, spec, name, tg)
            if self.ssh is not None:
                tg.start_soon(self.ssh.serve, tg)
            tg.start_soon(self._notifier)
            task_status.started(self.addresses)

    async def _accept_loop(
        self, listener: SocketListener, spec: ListenAddress, name: str, tg: TaskGroup
    ) -> None:
        def failed() -> None:
            self.stats.accept_errors += 1

        await accept_forever(
            listener, lambda stream: self._admit(stream, tg, spec, name), what=name, failed=failed
        )

    def _admit(self, stream: SocketStream, tg: TaskGroup, spec: ListenAddress, name: str) -> None:
        try:
            remote = stream.extra(SocketAttribute.remote_address)
        except OSError:
            remote = "?"
        if isinstance(remote, tuple):
            peer_ip, port = str(remote[0]), int(remote[1])
        else:
            peer_ip, port = str(remote), 0
        peer = f"[{peer_ip}]:{port}" if ":" in peer_ip else f"{peer_ip}:{port}"
        if not self.admit(peer_ip, peer, spec, name):
            tg.start_soon(_close_quietly, stream)
            return
        try:
            sock = stream.extra(SocketAttribute.raw_socket)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        except (OSError, TypeError):
            pass
        if spec.tls:
            tg.start_soon(self._run_tls, stream, peer, peer_ip, name)
            return
        connection = self.session(stream, peer, "tcp")
        tg.start_soon(self.run_session, connection, peer_ip)

    # ------------------------------------------------------------------ admission
    def admit(self, peer_ip: str, peer: str, spec: ListenAddress, listener: str) -> bool:
        """Allowed networks and limits for a new connection; True takes a slot for it.

        A refusal is counted and logged. The slot (one of ``max_connections`` and of the
        address's ``max_per_ip``) then belongs to the caller: `session` makes it an RTR
        session, `abandon` gives it back (a refused handshake or login).
        """
        if not is_allowed(peer_ip, spec.allow):
            self.stats.rejected_not_allowed += 1
            self.stats.rejected_not_allowed_by_listener[listener] += 1
            self._log_refusal("not-allowed", listener, peer, "address not in the allowed networks")
            return False
        reason = None
        if len(self.connections) + self._handshaking >= self.settings.max_connections:
            self.stats.rejected_max_connections += 1
            reason = f"max-connections ({self.settings.max_connections}) reached"
        elif self._per_ip[peer_ip] >= self.settings.max_per_ip:
            self.stats.rejected_max_per_ip += 1
            reason = f"max-per-ip ({self.settings.max_per_ip}) reached for {peer_ip}"
        if reason is not None:
            log.warning("refused router %s: %s", peer, reason)
            return False
        self._per_ip[peer_ip] += 1
        self._handshaking += 1
        return True

    def abandon(self, peer_ip: str) -> None:
        """Give back the slot of an admitted connection that got no session."""
        self._handshaking -= 1
        self._release_ip(peer_ip)

    def session(self, stream: ByteStream, peer: str, transport: str) -> RtrConnection:
        """Make an admitted connection's slot a registered RTR session on ``stream``."""
        self._handshaking -= 1
        self.stats.accepted += 1
        self.stats.accepted_by_transport[transport] += 1
        connection = RtrConnection(stream, self, peer)
        self.connections.add(connection)
        return connection

    def log_refusal(self, kind: str, listener: str, peer: str, reason: str) -> None:
        """One line per refusal, at most a few per listener and kind every 10 s."""
        self._log_refusal(kind, listener, peer, reason)

    def _log_refusal(self, kind: str, listener: str, peer: str, reason: str) -> None:
        """One line per refusal, at most a few per listener and kind every 10 s."""
        logged, suppressed = self._refusal_log.allow(f"{kind} {listener}", anyio.current_time())
        if logged:
            more = f" ({suppressed} more refused like this not logged)" if suppressed else ""
            log.warning("refused router %s on %s: %s%s", peer, listener, reason, more)

    def _release_ip(self, peer_ip: str) -> None:
        self._per_ip[peer_ip] -= 1
        if self._per_ip[peer_ip] <= 0:
            del self._per_ip[peer_ip]

    async def _run_tls(self, stream: SocketStream, peer: str, peer_ip: str, name: str) -> None:
        """Handshake and address check, then the RTR session over the TLS stream."""
        assert self.tls_context is not None
        try:
            tls = await accept_tls(
                stream,
                self.tls_context,
                peer_ip=peer_ip,
                deadline=anyio.current_time() + self.settings.tls_handshake_timeout,
            )
        except TlsRefusedError as exc:
            if exc.refusal is Refusal.HANDSHAKE_TIMEOUT:
                self.stats.tls_handshake_timeouts += 1
            elif exc.refusal is Refusal.IP_MISMATCH:
                self.stats.rejected_tls_ip_mismatch += 1
            else:
                self.stats.tls_handshake_failures += 1
            self._log_refusal(exc.refusal.value, name, peer, exc.reason)
            self.abandon(peer_ip)
            await _close_quietly(stream)
            return
        except BaseException:  # shutdown during the handshake
            self.abandon(peer_ip)
            await _close_quietly(stream)
            raise
        connection = self.session(tls, peer, "tls")
        await self.run_session(connection, peer_ip, f" over {tls.extra(TLSAttribute.tls_version)}")

    async def run_session(self, connection: RtrConnection, peer_ip: str, via: str = "") -> None:
        """Serve a registered session until it ends; then give its slot back and log."""
        started = anyio.current_time()
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
        try:
            await connection.run()
        finally:
            self.connections.discard(connection)
            self._release_ip(peer_ip)
            self.stats.disconnects[connection.close_reason] += 1
            _log_close(connection, anyio.current_time() - started)

    async def _notifier(self) -> None:
        last_round = -math.inf
        assert self._published is not None
        while True:
            await self._published.wait()
            wait = last_round + self.settings.notify_interval - anyio.current_time()
            if wait > 0:
                await anyio.sleep(wait)
            self._published = anyio.Event()
            last_round = anyio.current_time()
            self.stats.notify_rounds += 1
            for connection in list(self.connections):
                connection.request_notify()


def _log_close(connection: RtrConnection, duration: float) -> None:
    """The one line per closed session (event ``session_close``)."""
    session = connection.session
    stats = connection.stats
    serial = None if session.last_serial is None else int(session.last_serial.value)
    log.info(
        "router %s closed: %s (version %s, session %s, serial %s, %d reset + %d serial queries, "
        "%d notifies, %d bytes sent, %d bytes received, %.1f s)",
        connection.peer,
        connection.close_detail,
        session.version,
        session.session_id,
        serial,
        stats.reset_queries,
        stats.serial_queries,
        stats.notifies,
        stats.bytes_sent,
        stats.bytes_received,
        duration,
        extra={
            "event": "session_close",
            "peer": connection.peer,
            "reason": connection.close_detail,
            "reason_class": connection.close_reason.value,
            "version": session.version,
            "session_id": session.session_id,
            "serial": serial,
            "reset_queries": stats.reset_queries,
            "serial_queries": stats.serial_queries,
            "notifies": stats.notifies,
            "errors_sent": {str(code): n for code, n in stats.errors_sent.items()},
            "bytes_sent": stats.bytes_sent,
            "bytes_received": stats.bytes_received,
            "duration_s": round(duration, 3),
        },
    )


async def _close_quietly(stream: SocketStream) -> None:
    with anyio.move_on_after(1.0, shield=True):
        await stream.aclose()
