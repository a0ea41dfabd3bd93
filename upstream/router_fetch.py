"""One look at an RTR cache as a router: a full table (Reset Query) or one incremental answer.

The full table goes through the sans-IO `rtr_protocol.ClientSession` that `RtrSource` uses
(same validation, downgrades, legacy-ASPA handling); this module only owns the socket and a
deadline for the whole exchange. An incremental answer (Serial Query from a given session
and serial) is read PDU by PDU with the shared framer, since the client session applies a
delta only to data it holds: its announcements and withdrawals are returned as they came.

Every failure is a `FetchError` with one line saying what happened (connect, timeout, the
cache's Error Report, No Data Available, Cache Reset, a protocol error).
"""

from __future__ import annotations

import contextlib
import getpass
import ssl
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import anyio
from anyio.abc import ByteStream

from rtr_protocol import (
    NEED_DATA,
    ClientSession,
    Disconnect,
    Downgrade,
    PduFramer,
    PollAfter,
    Publish,
    Transmit,
)
from rtr_protocol.client_bounds import REPLY_BYTE_FLOOR, REPLY_RECORD_FLOOR
from rtr_protocol.constants import Timers
from rtr_protocol.errors import RtrProtocolError
from rtr_protocol.pdu import (
    AspaPdu,
    CacheReset,
    CacheResponse,
    EndOfData,
    ErrorReport,
    Ipv4Prefix,
    Ipv6Prefix,
    RouterKeyPdu,
    SerialNotify,
    SerialQuery,
    encode,
)
from snapshot.model import Aspa, RouterKey, Vrp, pack_v4, pack_v6
from snapshot.snapshot import Snapshot
from upstream.rtr_address import parse_rtr_url
from upstream.ssh_connect import SshConnectError, SshLogin, connect_ssh

__all__ = [
    "TLS_PORT",
    "CacheAddress",
    "Change",
    "FetchError",
    "FetchResult",
    "fetch",
    "parse_cache_url",
]

#: IANA port of rpki-rtr over TLS (RFC 7730 / bis §9), used for rtrs:// without a port.
TLS_PORT = 324
#: The SSH port, used for ssh:// without a port (RFC 6810 §7: the rpki-rtr subsystem).
SSH_PORT = 22
#: Bytes asked for per receive.
RECEIVE_SIZE = 65_536
#: An incremental answer may bring at most this many records and octets (a hostile cache
#: cannot fill memory within the timeout); the full table is bounded by `ClientSession`.
MAX_CHANGES = REPLY_RECORD_FLOOR
MAX_ANSWER_BYTES = REPLY_BYTE_FLOOR

Record = Vrp | Aspa | RouterKey


class FetchError(Exception):
    """The cache could not be read; the message is one line for the operator."""


@dataclass(frozen=True, slots=True)
class CacheAddress:
    """Where a cache listens and whether to speak TLS or SSH (as ``user``) to it."""

    host: str
    port: int
    tls: bool = False
    ssh_user: str | None = None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.ssh_user is not None:
            return f"ssh://{self.ssh_user}@{host}:{self.port}"
        return f"{'rtrs' if self.tls else 'rtr'}://{host}:{self.port}"


def parse_cache_url(url: str, *, tls: bool = False) -> CacheAddress:
    """The cache of ``rtr://``, ``rtrs://`` (TLS) or ``ssh://[USER@]`` ``HOST[:PORT]``; no I/O.

    Default ports 323, 324 and 22; ``ssh://`` without a user logs in as the login name.

    Raises:
        ValueError: for another scheme or a malformed URL (see `parse_rtr_url`).
    """
    scheme = urlsplit(url).scheme
    if scheme == "ssh":
        parts = urlsplit(url)
        user = parts.username or getpass.getuser()
        plain = "rtr://" + parts.netloc.rpartition("@")[2] + parts.path
        if parts.query or parts.fragment or parts.password is not None:
            raise ValueError(f"{url!r}: expected ssh://[USER@]HOST[:PORT]")
        host, port = parse_rtr_url(plain)
        return CacheAddress(host, SSH_PORT if parts.port is None else port, ssh_user=user)
    if scheme == "rtrs":
        plain = "rtr" + url[4:]
        host, port = parse_rtr_url(plain)
        if urlsplit(plain).port is None:
            port = TLS_PORT
        return CacheAddress(host, port, tls=True)
    if scheme != "rtr":
        raise ValueError(
            f"{url!r}: expected rtr://HOST[:PORT], rtrs://HOST[:PORT] or ssh://[USER@]HOST[:PORT]"
        )
    host, port = parse_rtr_url(url)
    return CacheAddress(host, port, tls)


@dataclass(frozen=True, slots=True)
class Change:
    """One record of an incremental answer: announced (True) or withdrawn (False)."""

    announce: bool
    record: Record


@dataclass(slots=True)
class FetchResult:
    """What the cache answered, up to and including its End of Data."""

    version: int
    session_id: int
    serial: int
    timers: Timers | None
    #: The complete table (a full dump); None for an incremental answer.
    snapshot: Snapshot | None = None
    #: The records of an incremental answer, in the order received.
    changes: list[Change] = field(default_factory=list)
    #: Version changes on the way (e.g. "2 -> 1: ..."), for the operator.
    downgrades: list[str] = field(default_factory=list)


async def fetch(
    address: CacheAddress,
    *,
    version: int = 2,
    negotiate: bool = True,
    serial_query: tuple[int, int] | None = None,
    within: float = 60.0,
    ca_file: str | None = None,
    client_cert: tuple[str, str] | None = None,
    ssh_key: str | None = None,
    ssh_known_hosts: str | None = None,
) -> FetchResult:
    """Connect, ask, read to End of Data, close; all within ``within`` seconds.

    Over TLS the cache's certificate is verified (system CAs, or ``ca_file``) and
    ``client_cert`` (certificate and key files) is presented when given. Over SSH the
    cache's host key must be in ``ssh_known_hosts`` (default ``~/.ssh/known_hosts``) and
    ``ssh_key`` logs in (default: the agent and ``~/.ssh`` keys).
    ``negotiate`` lets a full dump follow the cache down from ``version`` (a fixed
    ``--version`` turns it off: a cache asking for another version is then an error).

    Raises:
        FetchError: for every way this can fail, with one line saying why.
    """
    tls: ssl.SSLContext | SshLogin | None = None
    if address.ssh_user is not None:
        tls = SshLogin(address.ssh_user, ssh_key, ssh_known_hosts)
    elif address.tls:
        try:
            tls = ssl.create_default_context(cafile=ca_file)
            if client_cert is not None:
                tls.load_cert_chain(*client_cert)
        except (OSError, ssl.SSLError) as exc:
            raise FetchError(f"cannot use the TLS files: {exc}") from None
    try:
        with anyio.fail_after(within):
            if serial_query is not None:
                return await _incremental(address, version, serial_query, tls)
            return await _full(address, version, negotiate, tls)
    except TimeoutError:
        raise FetchError(f"{address}: no End of Data within {within:g} s") from None


Transport = ssl.SSLContext | SshLogin | None


async def _connect(address: CacheAddress, tls: Transport) -> ByteStream:
    try:
        if isinstance(tls, SshLogin):
            return await connect_ssh(address.host, address.port, tls)
        if tls is not None:
            return await anyio.connect_tcp(
                address.host, address.port, ssl_context=tls, tls_standard_compatible=False
            )
        return await anyio.connect_tcp(address.host, address.port)
    except SshConnectError as exc:
        raise FetchError(f"{address}: {exc}") from None
    except (OSError, ssl.SSLError) as exc:
        raise FetchError(f"cannot connect to {address}: {exc}") from None


async def _receive(stream: ByteStream) -> bytes:
    try:
        return await stream.receive(RECEIVE_SIZE)
    except anyio.EndOfStream:
        return b""
    except (anyio.BrokenResourceError, OSError) as exc:
        raise FetchError(f"connection lost: {exc}") from None


async def _send(stream: ByteStream, data: bytes) -> None:
    try:
        await stream.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
        raise FetchError(f"connection lost: {exc}") from None


async def _close(stream: ByteStream) -> None:
    with anyio.CancelScope(shield=True), anyio.move_on_after(1.0), contextlib.suppress(Exception):
        await stream.aclose()


async def _full(
    address: CacheAddress, version: int, negotiate: bool, tls: Transport
) -> FetchResult:
    session = ClientSession(max_version=version)
    downgrades: list[str] = []
    for _ in range(version + 1):  # at most one reconnect per version below ours
        stream = await _connect(address, tls)
        try:
            snapshot = await _pump(stream, session, downgrades, negotiate, address)
        finally:
            session.connection_lost()
            await _close(stream)
        if snapshot is not None:
            assert session.session_id is not None
            assert session.serial is not None
            timers = session.timers if session.version > 0 else None
            return FetchResult(
                session.version,
                session.session_id,
                session.serial,
                timers,
                snapshot=snapshot,
                downgrades=downgrades,
            )
    raise FetchError(f"{address}: no version could be agreed ({'; '.join(downgrades)})")


async def _pump(
    stream: ByteStream,
    session: ClientSession,
    downgrades: list[str],
    negotiate: bool,
    address: CacheAddress,
) -> Snapshot | None:
    """One connection; the table at End of Data, None to reconnect at a lower version."""
    await _send(stream, session.connection_made())
    while True:
        action = session.next_action()
        if action is NEED_DATA:
            session.receive_data(await _receive(stream))
        elif isinstance(action, Transmit):
            await _send(stream, action.data)
        elif isinstance(action, Publish):
            if action.synced:
                return action.snapshot
        elif isinstance(action, PollAfter):
            if action.no_data:
                raise FetchError(f"{address}: the cache has no data yet ({action.reason})")
        elif isinstance(action, Downgrade):
            text = f"version {action.old} -> {action.new}: {action.reason}"
            if not negotiate:
                why = action.reason.split(";")[0]
                raise FetchError(
                    f"{address}: version {action.old} was asked for (--version), but the cache "
                    f"needs version {action.new}: {why}"
                )
            downgrades.append(text)
        elif isinstance(action, Disconnect):
            if action.data:
                with contextlib.suppress(FetchError):
                    await _send(stream, action.data)
            if action.reconnect_now and negotiate:
                return None
            raise FetchError(f"{address}: {action.reason}")


async def _incremental(
    address: CacheAddress, version: int, query: tuple[int, int], tls: Transport
) -> FetchResult:
    session_id, serial = query
    stream = await _connect(address, tls)
    try:
        await _send(stream, encode(SerialQuery(version, session_id, serial)))
        return await _read_delta(stream, version, address)
    finally:
        await _close(stream)


async def _read_delta(stream: ByteStream, version: int, address: CacheAddress) -> FetchResult:
    framer = PduFramer()
    changes: list[Change] = []
    answered: int | None = None
    received = 0
    while True:
        try:
            pdu = framer.next_pdu()
        except RtrProtocolError as exc:
            raise FetchError(f"{address}: protocol error: {exc}") from None
        if pdu is NEED_DATA:
            data = await _receive(stream)
            if not data:
                raise FetchError(f"{address}: the cache closed the connection before End of Data")
            received += len(data)
            if received > MAX_ANSWER_BYTES:
                raise FetchError(f"{address}: the answer exceeds {MAX_ANSWER_BYTES} octets")
            framer.receive_data(data)
            continue
        if isinstance(pdu, ErrorReport):
            name = pdu.error_code.name if pdu.error_code is not None else str(pdu.code)
            raise FetchError(f"{address}: Error Report {name}: {pdu.text or '(no text)'}")
        if isinstance(pdu, SerialNotify):
            continue
        if pdu.version != version:
            raise FetchError(f"{address}: answered at version {pdu.version}, asked at {version}")
        if isinstance(pdu, CacheReset):
            raise FetchError(
                f"{address}: Cache Reset: that session and serial are not available "
                "(ask for a full dump)"
            )
        if isinstance(pdu, CacheResponse):
            answered = pdu.session_id
        elif answered is None:
            raise FetchError(f"{address}: {type(pdu).__name__} before Cache Response")
        elif isinstance(pdu, EndOfData):
            return FetchResult(pdu.version, pdu.session_id, pdu.serial, pdu.timers, changes=changes)
        else:
            changes.append(_change(pdu, address))
            if len(changes) > MAX_CHANGES:
                raise FetchError(f"{address}: the answer exceeds {MAX_CHANGES} records")


def _change(pdu: object, address: CacheAddress) -> Change:
    if isinstance(pdu, Ipv4Prefix | Ipv6Prefix):
        return Change(pdu.announce, Vrp.from_key(_prefix_key(pdu)))
    if isinstance(pdu, RouterKeyPdu):
        return Change(pdu.announce, RouterKey(pdu.ski, pdu.asn, pdu.spki))
    if isinstance(pdu, AspaPdu):
        # A withdrawal carries no providers; (0,) stands in (formatters print none for it).
        return Change(pdu.announce, Aspa(pdu.customer, pdu.providers or (0,)))
    raise FetchError(f"{address}: unexpected {type(pdu).__name__} in an answer")


def _prefix_key(pdu: Ipv4Prefix | Ipv6Prefix) -> bytes:
    pack = pack_v4 if isinstance(pdu, Ipv4Prefix) else pack_v6
    return pack(pdu.prefix, pdu.prefix_length, pdu.max_length, pdu.asn)
