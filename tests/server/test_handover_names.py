"""The names a ``kill -USR2`` hand-over gives router connections (``router``, ``router-vN``,
``router-vN-ID-SERIAL``): `adopted_connections` reads version, peer and the router's session id
and serial from real passed descriptors; a name out of range or malformed is not taken for a
router connection, and `inherited_sockets` refuses it as an unknown name."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The child puts the passed descriptors at 3, 4, ... as systemd would, then reads them.
CHILD = """
import json, os, sys
from rtr_server.socket_activation import adopted_connections, inherited_sockets
fds = [int(x) for x in sys.argv[1].split(",")]
for i, fd in enumerate(fds):
    os.dup2(fd, 3 + i)
env = {"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": str(len(fds)), "LISTEN_FDNAMES": sys.argv[2]}
out = {}
try:
    out["adopted"] = [
        [a.fd, a.version, a.peer_host, a.peer_port, a.local_port, a.known]
        for a in adopted_connections(env)
    ]
    out["inherited"] = [s.name for s in inherited_sockets(env)]
except ValueError as exc:
    out["error"] = str(exc)
print(json.dumps(out))
"""


@pytest.fixture
def sockets() -> Iterator[tuple[socket.socket, socket.socket, socket.socket]]:
    """A listener, and the accepted end and the client end of one connection to it."""
    with ExitStack() as stack:
        listener = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
        client = stack.enter_context(socket.create_connection(listener.getsockname()))
        accepted, _ = listener.accept()
        stack.enter_context(accepted)
        yield listener, accepted, client


def _read(names: str, *socks: socket.socket) -> dict[str, object]:
    fds = [s.fileno() for s in socks]
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, ",".join(map(str, fds)), names],
        pass_fds=fds,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def test_router_names_give_version_peer_and_what_the_router_holds(
    sockets: tuple[socket.socket, socket.socket, socket.socket],
) -> None:
    listener, accepted, client = sockets
    port = listener.getsockname()[1]
    peer_port = client.getsockname()[1]
    got = _read("rtr:router-v1-65535-4294967295", listener, accepted)
    assert got == {
        "adopted": [[4, 1, "127.0.0.1", peer_port, port, [65535, 4294967295]]],
        "inherited": ["rtr"],
    }
    assert _read("router-v2", accepted)["adopted"] == [[3, 2, "127.0.0.1", peer_port, port, None]]
    assert _read("router", accepted)["adopted"] == [[3, None, "127.0.0.1", peer_port, port, None]]


@pytest.mark.parametrize(
    "name",
    [
        "router-v1-65536-0",  # session ids are 16 bits
        "router-v1-0-4294967296",  # serials are 32 bits
        "router-v3-1-1",  # no such version
        "router-v1-1",  # id without serial
        "router-v1-x-1",
        "router-v1-\u0661-1",  # a digit, but not ASCII
    ],
)
def test_a_malformed_router_name_is_refused(
    sockets: tuple[socket.socket, socket.socket, socket.socket], name: str
) -> None:
    _, accepted, _ = sockets
    got = _read(name, accepted)
    assert "error" in got
    assert f"named {name!r}" in str(got["error"]), got
