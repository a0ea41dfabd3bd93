"""Restart without losing routers (``kill -USR2``): listeners and idle TCP routers survive an exec.

`hand_over` (old image) duplicates the listening sockets, stops accepting and asks every
plain-TCP router session to detach at its next PDU boundary, waiting at most ``wait`` seconds;
TLS and SSH sessions (their crypto state lives in this process) and busy ones are closed by
the orderly stop that follows, each with a log line. `exec_handed` numbers the descriptors
from 3, sets ``LISTEN_PID``/``LISTEN_FDS``/``LISTEN_FDNAMES`` like systemd socket activation
(``rtr``, ``rtr-tls``, ``http``, and ``router``/``router-vN-ID-SERIAL`` per router) and
re-executes the same command line in the same process; it returns only when the exec failed.
`adopt_connections` (new image) serves each handed router as a session at its negotiated
version from the first byte; the access list and the caps are checked again.
"""

from __future__ import annotations

import fcntl
import gc
import logging
import os
import socket
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

import anyio
from anyio.abc import ByteStream, SocketStream, TaskGroup

from rtr_server.admission_slot import Slot
from rtr_server.connection import RtrConnection
from rtr_server.continuity import SERVED_ENV
from rtr_server.raw_stream import RawSocketStream
from rtr_server.settings import ListenAddress, ServerSettings
from rtr_server.socket_activation import SD_LISTEN_FDS_START
from snapshot import Serial

__all__ = ["HANDOVER_WAIT", "HandoverHost", "adopt_connections", "exec_handed", "hand_over"]

log = logging.getLogger("rtr_server.server")

#: Seconds a busy plain-TCP session gets to reach a PDU boundary before it is closed.
HANDOVER_WAIT = 2.0


class HandoverHost(Protocol):
    """What the hand-over needs of `rtr_server.server.RtrServer`."""

    settings: ServerSettings
    bound: list[tuple[ListenAddress, str, int]]
    accept_scopes: list[anyio.CancelScope]
    connections: set[RtrConnection]
    session_ended: anyio.Event | None

    @property
    def listening_sockets(self) -> list[socket.socket]:
        """The TCP and TLS listening sockets, in the order of ``bound``."""
        ...

    def admit(self, peer_ip: str, peer: str, spec: ListenAddress, listener: str) -> Slot | None:
        """Allowed networks and caps; None: refused (counted and logged)."""
        ...

    def session(self, stream: ByteStream, peer: str, transport: str, slot: Slot) -> RtrConnection:
        """The registered RTR session of an admitted stream."""
        ...

    @property
    def run_session(self) -> Callable[[RtrConnection, Slot, str], Coroutine[Any, Any, None]]:
        """Serve a registered session until it ends."""
        ...


def _dup(fd: int) -> int:
    return os.dup(fd)  # not inheritable until `exec_handed` places it


async def hand_over(
    server: HandoverHost, http_fd: int | None = None, wait: float = HANDOVER_WAIT
) -> list[tuple[int, str]]:
    """Stop accepting; the descriptors (and names) of the listeners and the idle TCP routers.

    ``http_fd`` is the HTTP API's socket when it came from systemd (handed on as ``http``).
    """
    handed = [
        (_dup(sock.fileno()), "rtr-tls" if spec.tls else "rtr")
        for sock, (spec, _, _) in zip(server.listening_sockets, server.bound, strict=False)
    ]
    if http_fd is not None:
        handed.append((_dup(http_fd), "http"))
    for scope in server.accept_scopes:
        scope.cancel()
    tcp = [c for c in server.connections if isinstance(c.stream, SocketStream)]
    for connection in server.connections:
        if connection not in tcp:
            log.warning(
                "router %s: a TLS or SSH session cannot be handed over: closed at the restart",
                connection.peer,
            )
    for connection in tcp:
        connection.hand_over()
    with anyio.move_on_after(wait):
        while any(c in server.connections for c in tcp):
            event = server.session_ended = anyio.Event()
            await event.wait()
    for connection in tcp:
        if connection.handed is not None:
            handed.append(connection.handed)
        elif connection in server.connections:
            log.warning(
                "router %s: still busy after %g s (half read or written): closed at the restart",
                connection.peer,
                wait,
            )
    return handed


def exec_handed(handed: Sequence[tuple[int, str]], served: str | None = None) -> None:
    """Re-execute this command with ``handed`` as LISTEN_FDS; returns (logged) when exec fails.

    ``served`` (`rtr_server.continuity.served_token`) is passed as ``RTR_SERVE_SERVED``.

    On failure the descriptors stay at 3.. and the environment names them, so starting again
    in this process adopts them (nothing is lost).
    """
    # Objects that still own a descriptor (e.g. the handed streams' original sockets) close it
    # when collected: collect now, and not again until the exec, so none closes a placed one.
    gc.collect()
    gc.disable()
    count = len(handed)
    ours = {fd for fd, _ in handed}
    base = max([*ours, SD_LISTEN_FDS_START + count]) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, base) for fd, _ in handed]
    for fd in ours:
        os.close(fd)
    for i, fd in enumerate(moved):
        target = SD_LISTEN_FDS_START + i
        try:
            os.fstat(target)
            log.warning("restart: descriptor %d was in use; it is replaced", target)
        except OSError:
            pass
        os.dup2(fd, target, inheritable=True)
        os.close(fd)
    names = [name for _, name in handed]
    os.environ.update(
        LISTEN_PID=str(os.getpid()), LISTEN_FDS=str(count), LISTEN_FDNAMES=":".join(names)
    )
    if served is None:
        os.environ.pop(SERVED_ENV, None)
    else:
        os.environ[SERVED_ENV] = served
    routers = sum(name.startswith("router") for name in names)
    log.info(
        "restarting (SIGUSR2): re-executing with %d listening sockets and %d router connections",
        count - routers,
        routers,
    )
    for handler in logging.getLogger().handlers:
        handler.flush()
    try:
        os.execv(sys.executable, sys.orig_argv)  # noqa: S606 (this very command, no shell)
    except OSError as exc:
        gc.enable()
        log.error(
            "restart: cannot re-execute %s: %s; serving on in this process", sys.executable, exc
        )


async def adopt_connections(server: HandoverHost, tg: TaskGroup, names: Sequence[str]) -> None:
    """Serve the router connections handed over by the previous image (``settings.adopted``).

    ``names`` are the listeners' names, in the order of ``server.bound``.
    """
    for adopted in server.settings.adopted:
        sock = socket.socket(fileno=adopted.fd)
        sock.set_inheritable(False)
        host, port = adopted.peer_host, adopted.peer_port
        peer = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        listener = next(
            (
                (spec, names[i])
                for i, (spec, _, bound_port) in enumerate(server.bound)
                if bound_port == adopted.local_port and not spec.tls and not spec.ssh
            ),
            None,
        )
        version = adopted.version
        slot = None if listener is None else server.admit(host, peer, *listener)
        if listener is None or slot is None:
            log.warning("router %s: handed over, but not admitted here: closed", peer)
            sock.close()
            continue
        connection = server.session(RawSocketStream(sock), peer, "tcp", slot)
        if version is not None:
            try:
                known = adopted.known
                connection.session.adopt(
                    version, None if known is None else (known[0], Serial(known[1]))
                )
            except ValueError as exc:
                log.warning("router %s: handed over at version %d: %s", peer, version, exc)
        how = "before its first query" if version is None else f"at version {version}"
        tg.start_soon(server.run_session, connection, slot, f" (kept through the restart, {how})")
