"""The RTR listeners on sockets passed by systemd, with the settings configured for them.

A configured listener of the same kind (plain, TLS or SSH) at a passed socket's address gives its
allowed networks and TCP-MD5/AO keys; otherwise the socket admits every address (restrict it
in the .socket unit, e.g. with IPAddressAllow=). ``rtr-ssh`` sockets are served by
`rtr_server.ssh.SshService.bind_all`.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

from anyio.abc import SocketListener

from rtr_server.settings import ListenAddress
from rtr_server.socket_activation import InheritedSocket

__all__ = ["activated_listeners", "spec_for"]


def spec_for(passed: InheritedSocket, configured: Sequence[ListenAddress]) -> ListenAddress:
    """What a passed ``rtr``/``rtr-tls``/``rtr-ssh`` socket serves: a configured listener's.

    That is the settings of a listener of the same kind at the same port, same or wildcard host.
    """
    tls, ssh = passed.name == "rtr-tls", passed.name == "rtr-ssh"
    for candidate in configured:
        if (candidate.port, candidate.tls, candidate.ssh) == (
            passed.port,
            tls,
            ssh,
        ) and candidate.host in (
            passed.host,
            "::",
            "0.0.0.0",  # noqa: S104 (a wildcard listener matches any address)
        ):
            return ListenAddress(
                passed.host,
                passed.port,
                tls,
                candidate.allow,
                candidate.tcp_md5,
                candidate.tcp_ao,
                ssh=ssh,
            )
    return ListenAddress(passed.host, passed.port, tls, ssh=ssh)


async def activated_listeners(
    inherited: Sequence[InheritedSocket], configured: Sequence[ListenAddress]
) -> list[tuple[SocketListener, ListenAddress]]:
    """The anyio listeners on the passed ``rtr`` and ``rtr-tls`` sockets, each with its spec."""
    out: list[tuple[SocketListener, ListenAddress]] = []
    try:
        for passed in inherited:
            if passed.name in ("rtr", "rtr-tls"):
                listener = await SocketListener.from_socket(socket.socket(fileno=passed.fd))
                out.append((listener, spec_for(passed, configured)))
    except BaseException:
        for listener, _ in out:
            await listener.aclose()
        raise
    return out
