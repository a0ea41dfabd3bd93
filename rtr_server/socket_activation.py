"""systemd socket activation: the listening sockets passed in LISTEN_FDS, by LISTEN_FDNAMES name.

`inherited_sockets` reads ``LISTEN_PID``/``LISTEN_FDS``/``LISTEN_FDNAMES`` (sd_listen_fds(3):
descriptors from 3, for this process only) and checks each is a listening TCP socket with a
known name: ``rtr`` (plain RTR; also every unnamed one), ``rtr-tls``, ``rtr-ssh``, ``http``.
A bad environment is a `ValueError` (a configuration error: exit 2 before any network).
`rtr_server.inherited_listeners` serves on them.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "NAMES",
    "SD_LISTEN_FDS_START",
    "InheritedSocket",
    "inherited_sockets",
    "local_address",
]

SD_LISTEN_FDS_START = 3
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


def inherited_sockets(
    environ: Mapping[str, str] | None = None, pid: int | None = None
) -> tuple[InheritedSocket, ...]:
    """The sockets systemd passed to this process (none without LISTEN_FDS); raises ValueError."""
    env = os.environ if environ is None else environ
    if "LISTEN_FDS" not in env:
        return ()
    listen_pid = env.get("LISTEN_PID", "")
    if not listen_pid.isdigit():
        raise ValueError(f"socket activation: LISTEN_PID={listen_pid!r} is not a process id")
    if int(listen_pid) != (os.getpid() if pid is None else pid):
        return ()  # meant for another process (the one that started us)
    count_text = env["LISTEN_FDS"]
    if not count_text.isdigit() or not 0 < int(count_text) <= 64:
        raise ValueError(f"socket activation: LISTEN_FDS={count_text!r} is not a count in 1..64")
    count = int(count_text)
    names = env["LISTEN_FDNAMES"].split(":") if env.get("LISTEN_FDNAMES") else []
    if names and len(names) != count:
        raise ValueError(
            f"socket activation: LISTEN_FDNAMES has {len(names)} names for {count} descriptors"
        )
    sockets: list[InheritedSocket] = []
    for i in range(count):
        fd = SD_LISTEN_FDS_START + i
        name = names[i] if names else "rtr"
        if name in ("", "unknown", "stored"):
            name = "rtr"  # systemd's names for an unnamed socket
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
