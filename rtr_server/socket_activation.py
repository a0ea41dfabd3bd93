"""systemd socket activation: the listening sockets passed in LISTEN_FDS, by LISTEN_FDNAMES name.

`inherited_sockets` reads ``LISTEN_PID``/``LISTEN_FDS``/``LISTEN_FDNAMES`` (sd_listen_fds(3):
descriptors from 3, for this process only) and checks each is a listening TCP socket with a
known name: ``rtr`` (plain RTR; also every unnamed one), ``rtr-tls``, ``rtr-ssh``, ``http``.
A bad environment is a `ValueError` (a configuration error: exit 2 before any network).
`rtr_server.inherited_listeners` serves on them. Connected router sockets handed over by a
re-executing rtr-serve (``kill -USR2``, `rtr_server.handover`) are named ``router`` (no query
yet) or ``router-vN[-ID-SERIAL]`` (negotiated version N, the session id and serial it
holds): `adopted_connections` reads those.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "NAMES",
    "SD_LISTEN_FDS_START",
    "AdoptedConnection",
    "InheritedSocket",
    "adopted_connections",
    "inherited_sockets",
    "local_address",
]

SD_LISTEN_FDS_START = 3
#: Most descriptors taken (listeners and handed-over router connections).
MAX_FDS = 65_536
#: What each name serves.
NAMES = {
    "rtr": "RTR over TCP",
    "rtr-tls": "RTR over TLS",
    "rtr-ssh": "RTR over SSH",
    "http": "the HTTP API",
}


@dataclass(frozen=True, slots=True)
class InheritedSocket:
    """A listening socket passed by systemd: its descriptor, name and bound address."""

    fd: int
    name: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class AdoptedConnection:
    """A router connection handed over: its descriptor, version (None: no query yet), ends."""

    fd: int
    version: int | None
    peer_host: str
    peer_port: int
    local_port: int
    #: The (session id, serial) the router holds (``router-vN-ID-SERIAL``), if it got data.
    known: tuple[int, int] | None = None


def _router_version(name: str) -> int | bool | None:
    """None for ``router``, N for ``router-vN[-ID-SERIAL]``, False for any other name.

    ID is a session id (0..65535) and SERIAL a serial (0..2**32-1), in decimal.
    """
    if name == "router":
        return None
    parts = name.split("-")
    if (
        parts[:1] == ["router"]
        and len(parts) in (2, 4)
        and parts[1] in ("v0", "v1", "v2")
        and all(p.isascii() and p.isdigit() for p in parts[2:])
        and (len(parts) == 2 or (int(parts[2]) <= 0xFFFF and int(parts[3]) <= 0xFFFF_FFFF))
    ):
        return int(parts[1][1])
    return False


def _known(name: str) -> tuple[int, int] | None:
    parts = name.split("-")
    return (int(parts[2]), int(parts[3])) if len(parts) == 4 else None


def local_address(fd: int) -> tuple[str, int]:
    """The (host, port) a listening TCP socket ``fd`` is bound to; raises ValueError."""
    sock = socket.socket(fileno=fd)
    try:
        if sock.type != socket.SOCK_STREAM or sock.family not in (
            socket.AF_INET,
            socket.AF_INET6,
        ):
            raise ValueError(f"descriptor {fd} is not a TCP socket")
        if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            raise ValueError(f"descriptor {fd} is not listening")
        host, port = sock.getsockname()[:2]
        return str(host), int(port)
    except OSError as exc:
        raise ValueError(f"descriptor {fd}: {exc.strerror or exc}") from None
    finally:
        sock.detach()  # the descriptor stays open: it is the service's


def _passed_names(environ: Mapping[str, str] | None, pid: int | None) -> list[str] | None:
    """One name per passed descriptor (from 3); None: nothing passed to this process."""
    env = os.environ if environ is None else environ
    if "LISTEN_FDS" not in env:
        return None
    listen_pid = env.get("LISTEN_PID", "")
    if not listen_pid.isdigit():
        raise ValueError(f"socket activation: LISTEN_PID={listen_pid!r} is not a process id")
    if int(listen_pid) != (os.getpid() if pid is None else pid):
        return None  # meant for another process (the one that started us)
    count_text = env["LISTEN_FDS"]
    if not count_text.isdigit() or not 0 < int(count_text) <= MAX_FDS:
        raise ValueError(
            f"socket activation: LISTEN_FDS={count_text!r} is not a count in 1..{MAX_FDS}"
        )
    count = int(count_text)
    names = env["LISTEN_FDNAMES"].split(":") if env.get("LISTEN_FDNAMES") else []
    if names and len(names) != count:
        raise ValueError(
            f"socket activation: LISTEN_FDNAMES has {len(names)} names for {count} descriptors"
        )
    out = [names[i] if names else "rtr" for i in range(count)]
    # systemd's names for an unnamed socket
    return ["rtr" if name in ("", "unknown", "stored") else name for name in out]


def adopted_connections(
    environ: Mapping[str, str] | None = None, pid: int | None = None
) -> tuple[AdoptedConnection, ...]:
    """The router connections handed to this process (``router``/``router-vN``)."""
    names = _passed_names(environ, pid) or []
    out: list[AdoptedConnection] = []
    for i, name in enumerate(names):
        version = _router_version(name)
        if version is False:
            continue
        fd = SD_LISTEN_FDS_START + i
        sock = socket.socket(fileno=fd)
        try:
            if sock.type != socket.SOCK_STREAM or sock.getsockopt(
                socket.SOL_SOCKET, socket.SO_ACCEPTCONN
            ):
                raise ValueError(f"descriptor {fd} ({name}) is not a connected TCP socket")
            host, port = sock.getpeername()[:2]
            local_port = int(sock.getsockname()[1])
        except OSError as exc:
            raise ValueError(f"descriptor {fd} ({name}): {exc.strerror or exc}") from None
        finally:
            sock.detach()
        out.append(AdoptedConnection(fd, version, str(host), int(port), local_port, _known(name)))
    return tuple(out)


def inherited_sockets(
    environ: Mapping[str, str] | None = None, pid: int | None = None
) -> tuple[InheritedSocket, ...]:
    """The sockets systemd passed to this process (none without LISTEN_FDS); raises ValueError."""
    names = _passed_names(environ, pid)
    if names is None:
        return ()
    sockets: list[InheritedSocket] = []
    for i, name in enumerate(names):
        fd = SD_LISTEN_FDS_START + i
        if _router_version(name) is not False:
            continue  # a handed-over router connection (`adopted_connections`)
        if name not in NAMES:
            known = ", ".join(NAMES)
            raise ValueError(
                f"socket activation: descriptor {fd} is named {name!r} (known names: {known}; "
                "set FileDescriptorName= in the .socket unit)"
            )
        try:
            host, port = local_address(fd)
        except ValueError as exc:
            raise ValueError(f"socket activation ({name}): {exc}") from None
        sockets.append(InheritedSocket(fd, name, host, port))
    if sum(s.name == "http" for s in sockets) > 1:
        raise ValueError("socket activation: more than one socket is named 'http'")
    return tuple(sockets)
