"""`accept_forever`: one accept loop for every listener (RTR and HTTP) that survives accept errors.

An accept error (EMFILE when the descriptors run out, ENOBUFS, ...) never ends the listener: it
is logged and counted, and the loop pauses before the next try, doubling from 10 ms up to
`ACCEPT_BACKOFF_MAX` (so it never spins), back to 10 ms after the next success.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
from anyio.abc import SocketListener, SocketStream

__all__ = ["ACCEPT_BACKOFF_MAX", "ACCEPT_BACKOFF_MIN", "accept_forever"]

log = logging.getLogger(__name__)

ACCEPT_BACKOFF_MIN = 0.01
ACCEPT_BACKOFF_MAX = 1.0


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
                if failed is not None:
                    failed()
                log.error("%s accept failed: %s; retrying in %.2f s", what, exc, backoff)
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, ACCEPT_BACKOFF_MAX)
                continue
            backoff = ACCEPT_BACKOFF_MIN
            admit(stream)
