"""`open_listeners`: the RTR listening sockets of `ServerSettings`, with their TCP-MD5/AO keys.

Bound here for ``listen`` (keyed listeners get their keys between bind and listen), or taken
from systemd (``inherited``): those get their keys at once, and what waited in their backlog
from keyed prefixes before that is closed (`rtr_server.tcp_auth.drain_backlog`).
"""

from __future__ import annotations

import logging
import socket
from typing import cast

import anyio
from anyio.abc import SocketAttribute, SocketListener

from rtr_server.inherited_listeners import activated_listeners
from rtr_server.settings import ListenAddress, ServerSettings
from rtr_server.tcp_auth import apply_keys, bind_keyed, drain_backlog

__all__ = ["open_listeners"]

log = logging.getLogger("rtr_server.server")


async def open_listeners(
    settings: ServerSettings,
) -> tuple[list[tuple[SocketListener, ListenAddress]], list[tuple[socket.socket, int]]]:
    """Every listener with its spec, and the connections kept from inherited backlogs.

    Each kept connection comes with the index of its listener; on failure nothing stays open.
    """
    listeners: list[tuple[SocketListener, ListenAddress]] = []
    backlog: list[tuple[socket.socket, int]] = []  # (connection, listener index)
    try:
        if settings.inherited:  # socket activation: systemd's sockets, no bind
            listeners = await activated_listeners(settings.inherited, settings.listen)
        for address in () if settings.inherited else settings.listen:
            if address.ssh:
                continue  # bound by the SSH service (rtr_server.ssh)
            if address.tcp_md5 or address.tcp_ao:  # keys set before listen()
                for sock in bind_keyed(address.host, address.port, address.tcp_md5, address.tcp_ao):
                    listeners.append((await SocketListener.from_socket(sock), address))
                continue
            multi = await anyio.create_tcp_listener(
                local_host=address.host, local_port=address.port
            )
            listeners.extend(
                (lst, address) for lst in cast("list[SocketListener]", multi.listeners)
            )
        for i, (lst, spec) in enumerate(listeners if settings.inherited else ()):
            if spec.tcp_md5 or spec.tcp_ao:
                raw = lst.extra(SocketAttribute.raw_socket)
                apply_keys(raw, spec.tcp_md5, spec.tcp_ao)
                kept, closed = drain_backlog(raw, spec.tcp_md5, spec.tcp_ao)
                backlog += [(conn, i) for conn in kept]
                if closed:
                    log.warning(
                        "closed %d connections from keyed routers that were waiting on %s "
                        "before its TCP-MD5/AO keys were set (they reconnect signed)",
                        closed,
                        spec,
                    )
    except BaseException:
        for listener, _ in listeners:
            await listener.aclose()
        for conn, _ in backlog:
            conn.close()
        raise
    return listeners, backlog
