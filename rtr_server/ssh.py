"""RTR over SSH (RFC 8210 §9, 8210bis §9.1): the SSH listeners, router login and the subsystem.

`SshService` binds every ``ssh`` listener with asyncssh (asyncio only; or serves the
``rtr-ssh`` sockets systemd passed instead) and admits each
connection through the same `SessionHost` checks as TCP (allowed networks, max-connections,
max-per-ip; refusals counted and rate-limit logged) before the SSH version exchange. A router
logs in with a key from the authorized_keys file (its OpenSSH options such as ``from="..."``
are honoured by asyncssh) or, when the configuration file lists password users, with a
password checked against a scrypt hash; ``none`` is never accepted, and with ``allow_users``
other names are refused. A connection must be authenticated and have its session open
within ``login_timeout``. One session channel per connection, and only the ``rpki-rtr``
subsystem: a shell or exec request gets exit status 1 and the connection is closed;
forwarding (TCP, UNIX, agent, X11) is refused. The session then runs `RtrConnection`
unchanged on an `SshByteStream`, in the server's task group. Refusals before a session
(``ssh_*`` reasons) are counted in `ServerStats.ssh_refusals`.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Sequence
from typing import Protocol, cast

import anyio
import asyncssh
import sniffio
from anyio.abc import ByteStream, TaskGroup

from rtr_server.admission_slot import Slot
from rtr_server.connection import RtrConnection
from rtr_server.inherited_listeners import spec_for
from rtr_server.serving import ServerStats
from rtr_server.settings import ListenAddress
from rtr_server.socket_activation import InheritedSocket
from rtr_server.ssh_settings import SUBSYSTEM, SshSettings, verify_password
from upstream.ssh_stream import SshByteStream

__all__ = ["SessionHost", "SshConfigError", "SshService", "load_ssh_keys"]

log = logging.getLogger(__name__)

#: Password checks at once (each scrypt check takes 16 MiB and ~50 ms of CPU).
PASSWORD_CHECKS = 2
#: How often connections are checked against their login deadline (seconds).
LOGIN_SWEEP = 0.5
#: A keepalive goes out after this many seconds without a packet from the router (three
#: unanswered close the connection). Short because BIRD 2.0.12 (libssh) leaves the end of a
#: large answer in libssh's buffer until another packet arrives: its full table over SSH
#: completes only when the keepalive comes (interop-tests/test_ssh.py; README "RTR over SSH").
KEEPALIVE_INTERVAL = 5.0


class SshConfigError(ValueError):
    """An SSH key file is unusable (raised at start, before any network)."""


class SessionHost(Protocol):
    """What the SSH listeners need from the RTR server (`RtrServer`)."""

    @property
    def stats(self) -> ServerStats:
        """Server-wide counters."""
        ...

    def admit(
        self,
        peer_ip: str,
        peer: str,
        spec: ListenAddress,
        listener: str,
        on_evict: Callable[[], None] | None = None,
    ) -> Slot | None:
        """Apply allow lists and the caps (refusals counted and logged); a slot, or None.

        ``on_evict`` is called when the admission evicts the connection before its session.
        """
        ...

    def release(self, slot: Slot) -> None:
        """Give back the slot of an admitted connection (here: one that got no session)."""
        ...

    def session(self, stream: ByteStream, peer: str, transport: str, slot: Slot) -> RtrConnection:
        """Turn an admitted connection's slot into a registered RTR session on ``stream``."""
        ...

    async def run_session(self, connection: RtrConnection, slot: Slot, via: str = "") -> None:
        """Serve a registered session until it ends (gives the slot back)."""
        ...

    def log_refusal(self, kind: str, listener: str, peer: str, reason: str) -> None:
        """One rate-limited log line for a refused router."""
        ...


def load_ssh_keys(
    settings: SshSettings,
) -> tuple[asyncssh.SSHKey, asyncssh.SSHAuthorizedKeys | None]:
    """Read the host key and the authorized keys; raises `SshConfigError` naming the file."""
    try:
        host_key = asyncssh.read_private_key(settings.host_key)
    except (OSError, asyncssh.KeyImportError, ValueError) as exc:
        raise SshConfigError(f"SSH host key {settings.host_key}: {_why(exc)}") from None
    keys = None
    if settings.authorized_keys is not None:
        try:
            keys = asyncssh.read_authorized_keys(str(settings.authorized_keys))
        except (OSError, asyncssh.KeyImportError, ValueError) as exc:
            raise SshConfigError(
                f"SSH authorized keys {settings.authorized_keys}: {_why(exc)}"
            ) from None
    return host_key, keys


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return f"cannot read: {exc.strerror or exc}"
    return str(exc) or type(exc).__name__


class SshService:
    """The SSH listeners of one `RtrServer` and their connections."""

    def __init__(self, host: SessionHost, settings: SshSettings) -> None:
        """Read the key files (raises `SshConfigError`); nothing is bound yet."""
        self.host = host
        self.settings = settings
        self.host_key, self.authorized_keys = load_ssh_keys(settings)
        self.connections: set[_Router] = set()
        self.task_group: TaskGroup | None = None
        self.password_checks = anyio.Semaphore(PASSWORD_CHECKS)
        self._acceptors: list[asyncssh.SSHAcceptor] = []
        # asyncssh logs every packet exchange at INFO; our own lines say what matters.
        logging.getLogger("asyncssh").setLevel(logging.WARNING)

    async def bind_all(
        self, listen: Sequence[ListenAddress], inherited: Sequence[InheritedSocket]
    ) -> list[tuple[ListenAddress, str, int]]:
        """Listen on the ``rtr-ssh`` sockets from systemd, or else on the ``ssh`` addresses.

        Each bound (spec, host, port); raises OSError when one cannot be used.
        """
        passed = [s for s in inherited if s.name == "rtr-ssh"]
        bound: list[tuple[ListenAddress, str, int]] = []
        for one in passed:
            spec = spec_for(one, listen)
            sock = socket.socket(fileno=one.fd)
            bound += [(spec, host, port) for host, port in await self.bind(spec, sock)]
        for spec in () if passed else listen:
            if spec.ssh:
                bound += [(spec, host, port) for host, port in await self.bind(spec)]
        return bound

    async def bind(
        self, spec: ListenAddress, sock: socket.socket | None = None
    ) -> list[tuple[str, int]]:
        """Listen on ``spec`` (or on ``sock``, already listening); the bound (host, port) pairs.

        Raises OSError when it cannot.
        """
        if sniffio.current_async_library() != "asyncio":
            raise SshConfigError("SSH listeners need the asyncio backend (--async-backend)")
        name = [_listener_name(spec.host, spec.port)]  # the bound port, once known
        where: dict[str, object] = (
            {"sock": sock} if sock is not None else {"host": spec.host, "port": spec.port}
        )
        acceptor = await asyncssh.listen(
            **where,
            server_factory=lambda: _Router(self, spec, name[0]),
            server_host_keys=[self.host_key],
            kex_algs=list(self.settings.kex_algorithms) if self.settings.kex_algorithms else (),
            encoding=None,
            login_timeout=self.settings.login_timeout,
            agent_forwarding=False,
            x11_forwarding=False,
            allow_scp=False,
            keepalive_interval=KEEPALIVE_INTERVAL,
            keepalive_count_max=3,
            reuse_address=sock is None,
        )
        self._acceptors.append(acceptor)
        bound = [(str(s.getsockname()[0]), int(s.getsockname()[1])) for s in acceptor.sockets]
        if bound:
            name[0] = _listener_name(*bound[0])
        return bound

    async def close_listeners(self) -> None:
        """Stop accepting (after a failed start or at shutdown)."""
        for acceptor in self._acceptors:
            acceptor.close()
        self._acceptors.clear()

    async def serve(self, task_group: TaskGroup) -> None:
        """Run sessions in ``task_group`` until cancelled; then close every connection."""
        self.task_group = task_group
        try:
            while True:
                await anyio.sleep(LOGIN_SWEEP)
                now = time.monotonic()
                for router in list(self.connections):
                    if router.connection is None and router.deadline <= now:
                        router.login_expired()
        finally:
            with anyio.CancelScope(shield=True):
                await self.close_listeners()
                # Sessions say goodbye and close their own connection; the rest go now.
                for router in list(self.connections):
                    if router.connection is None:
                        router.close()


def _listener_name(host: str, port: int) -> str:
    return f"[{host}]:{port} (ssh)" if ":" in host else f"{host}:{port} (ssh)"


class _Router(asyncssh.SSHServer):
    """One router's SSH connection: admission, login, the one ``rpki-rtr`` session."""

    def __init__(self, service: SshService, spec: ListenAddress, listener: str) -> None:
        self.service = service
        self.spec = spec
        self.listener = listener
        self.conn: asyncssh.SSHServerConnection | None = None
        self.peer_ip = "?"
        self.peer = "?"
        self.user: str | None = None
        self.slot: Slot | None = None
        self.authenticated = False
        self.by_password = False
        self.session_requested_once = False
        self.connection: RtrConnection | None = None
        #: Why this connection is being refused (an ``ssh_*`` reason without the prefix).
        self.refusal: str | None = None
        self.failed_logins: list[str] = []
        #: `time.monotonic` by which the session must be open (asyncio's clock).
        self.deadline = time.monotonic() + service.settings.login_timeout

    # ------------------------------------------------------------------ connection
    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn
        peername = conn.get_extra_info("peername")
        if isinstance(peername, tuple):
            self.peer_ip, port = str(peername[0]), int(peername[1])
        else:
            self.peer_ip, port = str(peername), 0
        self.peer = f"[{self.peer_ip}]:{port}" if ":" in self.peer_ip else f"{self.peer_ip}:{port}"
        slot = self.service.host.admit(
            self.peer_ip, self.peer, self.spec, self.listener, self.evicted
        )
        if slot is None:
            # asyncssh closes the connection at once, before its version string.
            raise _RefusedError
        self.slot = slot
        self.service.connections.add(self)

    def evicted(self) -> None:
        """The admission made this connection (not logged in yet) way for a newcomer."""
        self.refusal = "evicted"
        self.close()

    def login_expired(self) -> None:
        """The login deadline passed without a session: close (counted as login_timeout)."""
        if self.refusal is None:
            self.refusal = "login_timeout"
        self.close()

    def close(self) -> None:
        """Close the SSH connection (idempotent)."""
        if self.conn is not None:
            self.conn.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.service.connections.discard(self)
        slot = self.slot
        if slot is None or self.connection is not None:
            return  # refused at accept, or the session gives its slot back itself
        self.slot = None
        reason = self.refusal
        if reason == "evicted":  # counted by the admission (rtr_evicted_connections_total)
            self.service.host.release(slot)
            return
        if reason is None:
            if isinstance(exc, asyncssh.ConnectionLost) and "timeout" in str(exc).lower():
                reason = "login_timeout"
            elif not self.authenticated:
                reason = "auth_failed" if self.failed_logins else "no_login"
            else:
                reason = "no_session"
        self._refused(reason)
        self.service.host.release(slot)

    def _refused(self, reason: str) -> None:
        self.service.host.stats.ssh_refusals[reason] += 1
        detail = {
            "login_timeout": "not logged in with the rpki-rtr subsystem open within "
            f"{self.service.settings.login_timeout:g} s",
            "auth_failed": "SSH login failed (" + ", ".join(self.failed_logins[:3]) + ")",
            "user_not_allowed": f"SSH user {self.user!r} not allowed",
            "no_login": "closed before logging in",
            "no_session": "logged in but opened no rpki-rtr session",
            "bad_channel": "asked for something else than the rpki-rtr subsystem",
        }.get(reason, reason)
        self.service.host.log_refusal(f"ssh-{reason}", self.listener, self.peer, detail)

    # ------------------------------------------------------------------ login
    def begin_auth(self, username: str) -> bool:
        self.user = username
        if not self.service.settings.user_allowed(username):
            self.refusal = "user_not_allowed"
        elif self.service.authorized_keys is not None and self.conn is not None:
            self.conn.set_authorized_keys(self.service.authorized_keys)
        return True  # authentication is always required: "none" never succeeds

    def public_key_auth_supported(self) -> bool:
        return self.service.authorized_keys is not None

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        # Only reached for keys the authorized_keys file does not admit (or not from here).
        note = f"publickey {key.get_algorithm()} {key.get_fingerprint()} as {username!r}"
        if note not in self.failed_logins:
            self.failed_logins.append(note)
        return False

    def password_auth_supported(self) -> bool:
        return bool(self.service.settings.users)

    async def validate_password(self, username: str, password: str) -> bool:
        stored = self.service.settings.password_hash(username)
        ok = False
        if stored is not None and self.service.settings.user_allowed(username):
            async with self.service.password_checks:
                ok = await anyio.to_thread.run_sync(verify_password, password, stored)
        if not ok:
            self.failed_logins.append(f"password as {username!r}")
        self.by_password = ok
        return ok

    def auth_completed(self) -> None:
        self.authenticated = True
        log.info(
            "router %s: SSH login as %r (%s) on %s",
            self.peer,
            self.user,
            "password" if self.by_password else "publickey",
            self.listener,
        )

    # ------------------------------------------------------------------ the session
    def session_requested(self) -> Callable[..., None] | bool:
        if self.session_requested_once or self.refusal is not None:
            return False  # one session per connection
        self.session_requested_once = True
        return self._start_session

    def _start_session(
        self,
        stdin: asyncssh.SSHReader[bytes],
        stdout: asyncssh.SSHWriter[bytes],
        stderr: asyncssh.SSHWriter[bytes],
    ) -> None:
        channel = cast("asyncssh.SSHServerChannel[bytes]", stdout.channel)
        subsystem = channel.get_subsystem()
        group = self.service.task_group
        if subsystem != SUBSYSTEM or group is None:
            command = channel.get_command()
            what = f"subsystem {subsystem!r}" if subsystem else "exec" if command else "shell"
            self.refusal = "bad_channel"
            log.info("router %s: SSH %s refused", self.peer, what)
            if group is None:
                self.close()
            else:
                group.start_soon(self._refuse, channel, stderr)
            return
        slot = self.slot
        assert slot is not None
        stream = SshByteStream(stdin, stdout)
        connection = self.service.host.session(stream, self.peer, "ssh", slot)
        self.connection = connection
        group.start_soon(self._run, connection, slot)

    async def _refuse(
        self, channel: asyncssh.SSHServerChannel[bytes], stderr: asyncssh.SSHWriter[bytes]
    ) -> None:
        """Tell a shell or exec request why, with exit status 1; then close the connection."""
        try:
            with anyio.move_on_after(1.0):
                stderr.write(f"rtr-serve: only the {SUBSYSTEM} subsystem is served\n".encode())
                await stderr.drain()
                channel.exit(1)
                await channel.wait_closed()
        except (asyncssh.Error, OSError):
            pass
        finally:
            self.close()

    async def _run(self, connection: RtrConnection, slot: Slot) -> None:
        try:
            await self.service.host.run_session(connection, slot, f" over SSH as {self.user!r}")
        finally:
            self.close()


class _RefusedError(Exception):
    """Raised in `_Router.connection_made` to have asyncssh drop a refused connection."""
