"""`RtrSource`: another RTR cache (``rtr://host:port``) as a source, through `ClientSession`."""

# The sans-IO `rtr_protocol.ClientSession` decides everything about the protocol (what
# to send, when data is complete, downgrades, errors); this module owns the socket, the timers
# and the hand-over to the aggregator. One task (`RtrSource.run`) owns one connection at a
# time and closes it on every path; a second task watches Expire on the injected clock's
# monotonic time. Refresh/Retry waits run on the event loop's clock.
#
# Decisions: connection failures, a cache closing the connection and Cache Restart keep the
# data (until Expire) and reconnect with exponential backoff plus jitter (``retry_initial`` ..
# ``retry_max``, reset by every successful sync); a version downgrade reconnects at once.
# After a fatal error the data is withdrawn at once (a revoking `Delivery`). Every End of
# Data is a new successful sync: it is delivered (the same payload object when nothing
# changed; data a downgrade trimmed keeps its sync's time and version) with a source-wide
# deadline of the shared effective time plus the cache's Expire interval, which is what the
# aggregator judges; the Expire watch below also withdraws the
# data and resets the session on the monotonic clock. A query that gets no byte of answer
# within ``response_timeout`` seconds ends the connection.
#
# Refreshing (for failover): in sync on the current connection, or within the cache's Retry
# interval of losing it; never before a first sync. `resync` sends the next query at once.
#
# Budgets for a hostile cache (issue 12). Each breach ends the connection as an error of its
# class (one warning, shown in the status) and backs off as above; the data of the last End of
# Data stays until Expire. Class ``protocol``: a Cache Reset answering a Reset Query (it
# answers only a Serial Query; answering it with another Reset Query was a tight loop), and a
# reply past the memory bounds of `ClientSession` (staged records at most max(3,000,000, 4 ×
# records held), octets at most max(128 MiB, 4 × wire size held); the floors are the options
# ``reply_record_floor`` and ``reply_byte_floor``). Class ``timeout``: a reply breaking a rule
# of `upstream.rtr_progress.ReplyProgress`, timed on the event loop's clock from the query:
# no byte for ``response_timeout`` (60 s) after the query or inside a reply; less than
# ``min_rate`` (1 KiB/s) over any ``progress_window`` (30 s) once its first byte came, so a
# drip of one byte a second is dropped ~30 s in; not complete ``reply_deadline`` (1800 s)
# after its query, which a 1.5 M-VRP full table (~34 MB) still meets at 150 kbit/s and a
# 1 M-VRP one (~22 MB) at 100 kbit/s.

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import socket
from array import array

import anyio
from anyio.abc import SocketAttribute, SocketStream

from rtr_protocol import (
    NEED_DATA,
    ClientSession,
    ClientState,
    Disconnect,
    Downgrade,
    PollAfter,
    Publish,
    Transmit,
)
from rtr_protocol.client_bounds import REPLY_BYTE_FLOOR, REPLY_RECORD_FLOOR
from snapshot.backoff import jittered_backoff
from snapshot.kinds import PayloadKind
from snapshot.snapshot import Snapshot
from upstream.clock import Clock
from upstream.payload import NO_EXPIRY, SourcePayload
from upstream.rtr_address import parse_rtr_url
from upstream.rtr_progress import ReplyProgress, ResponseTimeoutError
from upstream.source import Delivery, DeliverySink
from upstream.status import SourceState, SourceStatus
from upstream.timekeeper import as_keeper

log = logging.getLogger(__name__)

#: Bytes asked for per receive; a 64 KiB chunk is about 3,000 prefix PDUs of work per step.
RECEIVE_SIZE = 65_536
#: A write that makes no progress for this long ends the connection.
SEND_TIMEOUT = 30.0
#: A query unanswered (no byte at all) for this long ends the connection, and so does a reply
#: that stops sending for this long.
RESPONSE_TIMEOUT = 60.0
#: Once a reply is under way, every PROGRESS_WINDOW seconds of it must bring MIN_RATE × the
#: window octets (30 KiB): a drip of one octet a second is dropped ~30 s after its first octet.
PROGRESS_WINDOW = 30.0
MIN_RATE = 1024.0
#: A reply must be complete this long after its query: a 1.5 M-VRP full table (~34 MB) needs
#: 150 kbit/s, a 1 M-VRP one (~22 MB) 100 kbit/s.
REPLY_DEADLINE = 1800.0
#: How often the Expire deadline is compared with the clock (the clock may be a test's fake).
EXPIRE_CHECK = 1.0
#: TCP keepalive: idle seconds before the first probe, seconds between probes, probes.
KEEPALIVE = (("TCP_KEEPIDLE", 60), ("TCP_KEEPINTVL", 15), ("TCP_KEEPCNT", 4))

_CAPABILITIES = {
    0: frozenset({PayloadKind.VRP}),
    1: frozenset({PayloadKind.VRP, PayloadKind.ROUTER_KEY}),
    2: frozenset(PayloadKind),
}


def payload_of(snapshot: Snapshot | None) -> SourcePayload:
    """The `SourcePayload` of a cache's data: every entry lives until withdrawn (NO_EXPIRY)."""
    if snapshot is None:
        return SourcePayload()
    forever = array("q", [NO_EXPIRY])
    return SourcePayload(
        v4=snapshot.v4,
        v4_expires=forever * snapshot.v4_count,
        v6=snapshot.v6,
        v6_expires=forever * snapshot.v6_count,
        router_keys=tuple((key, NO_EXPIRY) for key in snapshot.router_keys),
        aspas=tuple((aspa, NO_EXPIRY) for aspa in snapshot.aspas),
    )


def _enable_keepalive(stream: SocketStream) -> None:
    sock = stream.extra(SocketAttribute.raw_socket)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in KEEPALIVE:
        number = getattr(socket, option, None)
        if number is not None:
            sock.setsockopt(socket.IPPROTO_TCP, number, value)


class RtrSource:
    """Follows one RTR cache and emits its complete data after every End of Data that changes it.

    Args:
        url: ``rtr://HOST[:PORT]`` (port 323 by default).
        name: the source name in logs and status; the URL by default.
        clock: monotonic time for Expire, wall time for the status; the system clock by
            default.
        max_version: the protocol version tried first (2); downgrades follow the cache.
        connect_timeout: seconds allowed for one TCP connect.
        retry_initial: first reconnect backoff in seconds; doubles per failure.
        retry_max: backoff ceiling in seconds; also the retry after No Data before the cache
            has told us its Retry interval.
        progress_window: seconds over which a reply under way must average ``min_rate``.
        min_rate: octets per second a reply under way must bring (0 turns the rule off).
        reply_deadline: seconds from a query by which its reply must be complete.
        reply_record_floor: records one unfinished reply may stage at least (the bound is
            ``max(floor, 4 × records held)``, see `ClientSession`).
        reply_byte_floor: octets one unfinished reply may take at least (the bound is
            ``max(floor, 4 × wire size of the data held)``).

    Raises:
        ValueError: for a malformed URL, a non-positive interval or bound, or a negative
            ``min_rate``.
    """

    kind = "rtr"
    #: Its data comes from a live upstream: distrusted after a clock jump.
    online = True

    def __init__(
        self,
        url: str,
        *,
        name: str | None = None,
        clock: Clock | None = None,
        max_version: int = 2,
        connect_timeout: float = 10.0,
        retry_initial: float = 1.0,
        retry_max: float = 60.0,
        progress_window: float = PROGRESS_WINDOW,
        min_rate: float = MIN_RATE,
        reply_deadline: float = REPLY_DEADLINE,
        reply_record_floor: int = REPLY_RECORD_FLOOR,
        reply_byte_floor: int = REPLY_BYTE_FLOOR,
    ) -> None:
        """Configure; nothing connects until `run`."""
        self.host, self.port = parse_rtr_url(url)
        if connect_timeout <= 0 or retry_initial <= 0 or retry_max < retry_initial:
            raise ValueError("need connect_timeout > 0 and 0 < retry_initial <= retry_max")
        if progress_window <= 0 or reply_deadline <= 0 or min_rate < 0:
            raise ValueError("need progress_window > 0, reply_deadline > 0 and min_rate >= 0")
        self.url = url
        self.name = name or url
        self.keeper = as_keeper(clock)
        self.clock: Clock = self.keeper
        self.connect_timeout = connect_timeout
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self.response_timeout = RESPONSE_TIMEOUT
        self.progress_window = progress_window
        self.min_rate = min_rate
        self.reply_deadline = reply_deadline
        self.expire_check = EXPIRE_CHECK
        self.session = ClientSession(
            max_version=max_version,
            no_data_retry=retry_max,
            reply_record_floor=reply_record_floor,
            reply_byte_floor=reply_byte_floor,
        )
        self.status = SourceStatus(self.name, self.kind, url, connected=False)
        #: True while a TCP connection to the cache is up.
        self.connected = False
        #: TCP connections established so far.
        self.connections = 0
        #: Payloads handed to the sink so far (withdrawals included).
        self.emitted = 0
        #: Connections in a row that ended without a successful sync (drives the backoff).
        self._failures = 0
        self._expire_at: float | None = None
        #: True while the sink holds data from us (not withdrawn).
        self._live = False
        #: Monotonic time until which the source counts as refreshing (inf: in sync now).
        self._healthy_until = -math.inf
        #: The payload handed over last and the snapshot it was made from (reused unchanged).
        self._payload: tuple[Snapshot, SourcePayload] | None = None
        self._syncs = 0
        self._sync: tuple[float, int, float | None] | None = None  # time, version, expiry
        #: Cancelled by `resync` to end the wait for the next poll.
        self._idle_scope: anyio.CancelScope | None = None
        self._resync = False

    @property
    def has_data(self) -> bool:
        """True while our last hand-over is live data (not withdrawn after Expire or errors)."""
        return self._live

    def refreshing(self) -> bool:
        """See the module comment: in sync, or within Retry of losing the connection."""
        if not self.status.attempted:
            return True
        return self.clock.monotonic() < self._healthy_until

    def resync(self) -> None:
        """Send the next query as soon as the connection is idle."""
        self._resync = True
        if self._idle_scope is not None:
            self._idle_scope.cancel()

    @property
    def capabilities(self) -> frozenset[PayloadKind]:
        """What this cache can deliver at the version in use (ASPA needs v2, keys v1)."""
        return _CAPABILITIES[min(self.session.version, 2)]

    @property
    def cache(self) -> str:
        """``host:port`` of the cache, for log messages."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    async def run(self, sink: DeliverySink) -> None:
        """Follow the cache until cancelled, calling ``sink(name, payload)`` with each new state."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch_expiry, sink, name=f"expiry of {self.name}")
            while True:
                if await self._connect_once(sink):
                    continue  # a version change: reconnect at once (at most twice: 2 → 1 → 0)
                delay = jittered_backoff(self._failures, self.retry_initial, self.retry_max)
                self._failures += 1
                log.info("source %s: reconnecting to %s in %.1f s", self.name, self.cache, delay)
                await anyio.sleep(delay)

    # ------------------------------------------------------------------ one connection
    async def _connect_once(self, sink: DeliverySink) -> bool:
        """One connection, from connect to close; True to reconnect without a backoff."""
        stream: SocketStream | None = None
        try:
            try:
                with anyio.fail_after(self.connect_timeout):
                    stream = await anyio.connect_tcp(self.host, self.port)
            except (OSError, TimeoutError) as exc:
                self._failed("connect", f"cannot connect to {self.cache}: {str(exc) or 'timeout'}")
                return False
            _enable_keepalive(stream)
            self.connected = self.status.connected = True
            self.connections += 1
            log.info(
                "source %s: connected to %s (protocol version %d)",
                self.name,
                self.cache,
                self.session.version,
            )
            return await self._pump(stream, sink)
        except ResponseTimeoutError as exc:
            self._failed("timeout", f"{self.cache} {exc.violation.message}")
            return False
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError, TimeoutError) as exc:
            self._failed("connection", f"connection to {self.cache} lost: {exc!r}")
            return False
        finally:
            self.connected = self.status.connected = False
            if self._healthy_until == math.inf:
                self._healthy_until = self.clock.monotonic() + self.session.timers.retry
            if self.session.state is not ClientState.DISCONNECTED:
                self.session.connection_lost()
            if stream is not None:
                with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
                    await stream.aclose()

    async def _pump(self, stream: SocketStream, sink: DeliverySink) -> bool:
        session = self.session
        progress = ReplyProgress(
            stall=self.response_timeout,
            window=self.progress_window,
            min_rate=self.min_rate,
            deadline=self.reply_deadline,
        )
        await self._query(stream, session.connection_made(), progress)
        poll_at = math.inf
        while True:
            action = session.next_action()
            if action is NEED_DATA:
                busy = session.busy
                if busy:
                    now = anyio.current_time()
                    if not progress.active:  # pragma: no cover - every query goes by _query
                        progress.start(now)
                    violation = progress.violation(now)
                    if violation is not None:
                        raise ResponseTimeoutError(violation)
                    deadline = progress.next_check(now)
                else:
                    progress.stop()
                    deadline = poll_at
                data: bytes | None = None
                if not busy and self._resync:
                    deadline = anyio.current_time()  # distrusted: ask again at once
                    self._resync = False
                with anyio.CancelScope(deadline=deadline) as scope:
                    self._idle_scope = None if busy else scope
                    try:
                        data = await stream.receive(RECEIVE_SIZE)
                    except anyio.EndOfStream:
                        data = b""
                self._idle_scope = None
                if data is not None:
                    self.status.bytes_read += len(data)
                    progress.received(len(data), anyio.current_time())
                    session.receive_data(data)
                elif not busy:
                    poll_at = math.inf
                    query = session.poll()
                    if query is not None:
                        await self._query(stream, query, progress)
                # else a progress rule is due: checked at the top
            elif isinstance(action, Transmit):
                await self._query(stream, action.data, progress)
            elif isinstance(action, Publish):
                self._on_publish(action, sink)
            elif isinstance(action, PollAfter):
                poll_at = anyio.current_time() + action.delay
                if action.no_data:
                    self._no_data(action)
                else:
                    log.debug("source %s: next query in %.0f s", self.name, action.delay)
            elif isinstance(action, Downgrade):
                level = logging.WARNING if action.legacy_aspa else logging.INFO
                log.log(
                    level,
                    "source %s: RTR cache %s: %s; protocol version %d -> %d",
                    self.name,
                    self.cache,
                    action.reason,
                    action.old,
                    action.new,
                )
            else:
                return await self._on_disconnect(stream, action, sink)

    async def _send(self, stream: SocketStream, data: bytes) -> None:
        with anyio.fail_after(SEND_TIMEOUT):
            await stream.send(data)

    async def _query(self, stream: SocketStream, query: bytes, progress: ReplyProgress) -> None:
        """Write a query (every Transmit is one) and start timing its reply."""
        await self._send(stream, query)
        progress.start(anyio.current_time())

    # ------------------------------------------------------------------ outcomes
    def _on_publish(self, action: Publish, sink: DeliverySink) -> None:
        status = self.status
        snapshot = action.snapshot
        status.records = snapshot.counts()
        if action.synced:
            self._expire_at = self.clock.monotonic() + self.session.timers.expire
            self._healthy_until = math.inf
            self._failures = 0
            self._syncs += 1
            status.state = SourceState.OK
            status.syncs += 1
            # The sync is marked in the shared effective time (never moving back), like its
            # deadline and the payload's generation time below.
            status.last_success_wall = self.keeper.now()
        payload = self._payload_of(snapshot)
        if not action.changed and self._live:
            log.debug("source %s: serial %s, no change", self.name, self.session.serial)
            self._emit(sink, payload, synced=action.synced)
            return
        log.info(
            "source %s: %s serial %s (session %s, version %d): %s",
            self.name,
            "synced to" if action.synced else "trimmed at",
            self.session.serial,
            self.session.session_id,
            self.session.version,
            ", ".join(f"{k}={v}" for k, v in status.records.items()),
        )
        self._emit(sink, payload, synced=action.synced)

    def _payload_of(self, snapshot: Snapshot) -> SourcePayload:
        cached = self._payload
        if cached is not None and cached[0] is snapshot:
            return cached[1]
        payload = payload_of(snapshot)
        self._payload = (snapshot, payload)
        return payload

    async def _on_disconnect(
        self, stream: SocketStream, action: Disconnect, sink: DeliverySink
    ) -> bool:
        if action.data:
            # The report is a courtesy: the connection ends anyway.
            with (
                anyio.move_on_after(1.0),
                contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError),
            ):
                await stream.send(action.data)
        if action.reconnect_now:
            log.info(
                "source %s: closing the connection to %s: %s", self.name, self.cache, action.reason
            )
            return True
        if action.drop_data:
            self._failed("protocol", f"{self.cache}: {action.reason}")
            self._withdraw(sink, f"{action.reason}")
        else:
            # A protocol error that keeps the data (a Cache Reset refusing a Reset Query, a
            # reply past its bounds): the data of the last End of Data serves on.
            error_class = "protocol" if action.protocol_error else "connection"
            self._failed(error_class, f"{self.cache}: {action.reason}")
        return False

    def _no_data(self, action: PollAfter) -> None:
        status = self.status
        if status.state is not SourceState.WAITING:
            log.info(
                "source %s: %s; asking again in %.0f s", self.name, action.reason, action.delay
            )
        if status.state not in (SourceState.OK, SourceState.EXPIRED):
            status.state = SourceState.WAITING  # the data of the last sync (if any) stays
        status.attempted = True

    def _failed(self, error_class: str, message: str) -> None:
        if self.status.state is SourceState.OK or self.status.last_error != message:
            log.warning("source %s: %s", self.name, message)
        self.status.failed(error_class, message, self.clock.wall())

    def _withdraw(self, sink: DeliverySink, reason: str) -> None:
        self._expire_at = None
        self._healthy_until = -math.inf
        self._payload = None
        self.status.records = {}
        if self._live:
            log.warning("source %s: data from %s withdrawn (%s)", self.name, self.cache, reason)
            self._live = False
            self.emitted += 1
            sink(Delivery.withdrawal(f"rtr:withdrawn:{self._syncs}".encode()))

    def _emit(self, sink: DeliverySink, payload: SourcePayload, *, synced: bool) -> None:
        """Hand ``payload`` over as the data of the latest sync (its Expire runs from then).

        A downgrade's trim (not ``synced``) keeps that sync's time and version (P-33).
        """
        self._live = True
        self.status.attempted = True
        self.emitted += 1
        remaining = None if self._expire_at is None else self._expire_at - self.clock.monotonic()
        if synced or self._sync is None:
            now = self.keeper.now()
            expires = None if remaining is None else now + remaining
            self._sync = (now, self.session.version, expires)
        synced_at, version, expires = self._sync
        sink(
            Delivery(
                dataclasses.replace(payload, generated=math.floor(synced_at)),
                f"rtr:sync:{self._syncs}".encode(),
                expires_at=expires,
                rtr_session=self.session.session_id,
                rtr_serial=self.session.serial,
                rtr_version=version,
            )
        )

    async def _watch_expiry(self, sink: DeliverySink) -> None:
        """Withdraw the data once Expire has passed since the last successful sync."""
        while True:
            expire_at = self._expire_at
            remaining = math.inf if expire_at is None else expire_at - self.clock.monotonic()
            if remaining <= 0:
                self.session.expire()
                self.status.state = SourceState.EXPIRED
                self._withdraw(
                    sink,
                    f"expired: no successful sync for the Expire interval of "
                    f"{self.session.timers.expire} s",
                )
                continue
            await anyio.sleep(min(remaining, self.expire_check))
