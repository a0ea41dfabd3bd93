"""Accept loops for every listener (RTR and HTTP) that survive accept errors.

`accept_forever` hands out anyio streams (HTTP); `accept_sockets_forever` hands out the
accepted sockets themselves (RTR: `rtr_server.raw_stream`), taking a burst of waiting
connections at each wake. An accept error (EMFILE when the descriptors run out, ENOBUFS, ...)
never ends the listener: it is logged and counted, and the loop pauses before the next try,
doubling from 10 ms up to `ACCEPT_BACKOFF_MAX` (so it never spins), back to 10 ms after the
next success.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import Final

import anyio
from anyio.abc import SocketAttribute, SocketListener, SocketStream

__all__ = ["ACCEPT_BACKOFF_MAX", "ACCEPT_BACKOFF_MIN", "accept_forever", "accept_sockets_forever"]

log = logging.getLogger(__name__)

ACCEPT_BACKOFF_MIN = 0.01
ACCEPT_BACKOFF_MAX = 1.0
#: Connections taken from the backlog at one wake (then others run).
ACCEPT_BURST: Final = 64


async def accept_forever(
    listener: SocketListener,
    admit: Callable[[SocketStream], None],
    *,
    what: str,
    failed: Callable[[], None] | None = None,
) -> None:
    """Accept on ``listener`` until cancelled, handing each stream to ``admit``; closes it then.

    ``what`` names the listener in the log line of a failed accept; ``failed`` is called for
    each (a counter).
    """
    backoff = ACCEPT_BACKOFF_MIN
    async with listener:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                backoff = await _pause(exc, backoff, what, failed)
                continue
            backoff = ACCEPT_BACKOFF_MIN
            admit(stream)


async def accept_sockets_forever(
    listener: SocketListener,
    admit: Callable[[socket.socket], None],
    *,
    what: str,
    failed: Callable[[], None] | None = None,
) -> None:
    """Like `accept_forever`, but accepting on the listener's socket: ``admit`` gets sockets.

    The anyio listener only owns the socket (closed when this ends); its ``accept`` is not used.
    """
    sock = listener.extra(SocketAttribute.raw_socket)
    sock.settimeout(0.0)
    backoff = ACCEPT_BACKOFF_MIN
    async with listener:
        while True:
            await anyio.wait_readable(sock)
            for _ in range(ACCEPT_BURST):
                try:
                    conn, _ = sock.accept()
                except BlockingIOError:
                    break
                except OSError as exc:
                    backoff = await _pause(exc, backoff, what, failed)
                    break
                backoff = ACCEPT_BACKOFF_MIN
                admit(conn)
            await anyio.lowlevel.checkpoint()


async def _pause(
    exc: OSError, backoff: float, what: str, failed: Callable[[], None] | None
) -> float:
    """Count and log a failed accept, wait ``backoff``; the next backoff (doubled, capped)."""
    if failed is not None:
        failed()
    log.error("%s accept failed: %s; retrying in %.2f s", what, exc, backoff)
    await anyio.sleep(backoff)
    return min(backoff * 2, ACCEPT_BACKOFF_MAX)
