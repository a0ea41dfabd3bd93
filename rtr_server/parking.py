"""`ParkingLot`: idle router sessions held without a task, their sockets in one epoll set.

A negotiated plain-TCP session with nothing to send and nothing buffered has only to wait for
its router. Waiting in a task of its own costs about 5 KiB (the task, its coroutine frames, a
cancel scope); parked here it costs its socket's place in one epoll set. One task waits on that
set (its descriptor is readable whenever a parked socket is); a ready session answers there
when it can (`RtrConnection.serve_parked`: a delta already encoded, written whole) and is given
back to the server to run otherwise (`resume`): a full table, a closing router, an error. The
server's Serial Notify is written to a parked session at once, and a hand-over wakes it
(`RtrConnection.wake`). At shutdown every parked session gets the goodbye of a running one
(`close_parked`).

Linux only (``select.epoll``); elsewhere `ParkingLot.available` is False and sessions keep their
tasks.
"""

from __future__ import annotations

import logging
import select
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final

import anyio

if TYPE_CHECKING:
    from rtr_server.connection import RtrConnection

__all__ = ["ParkingLot"]

log = logging.getLogger("rtr_server.server")

#: Readiness that ends a parking: data, the router's FIN, an error or a hang-up.
_EVENTS: Final = getattr(select, "EPOLLIN", 1) | getattr(select, "EPOLLRDHUP", 0x2000)
#: Ready sockets taken from the set at a time.
_BATCH: Final = 4096


class ParkingLot:
    """Parked sessions by socket descriptor; `run` hands back the ones whose socket is ready."""

    available: Final = hasattr(select, "epoll")

    def __init__(
        self,
        resume: Callable[[RtrConnection], None],
        close: Callable[[RtrConnection], Coroutine[Any, Any, None]],
    ) -> None:
        """``resume`` runs a session again; ``close`` ends a parked one at shutdown."""
        self._resume = resume
        self._close = close
        self._epoll = select.epoll() if self.available else None
        self._parked: dict[int, RtrConnection] = {}
        #: Sessions parked, and given back to run (a full table, a closing router, ...).
        self.parks = 0
        self.resumed = 0

    def __len__(self) -> int:
        """Sessions parked now."""
        return len(self._parked)

    def park(self, connection: RtrConnection, fd: int) -> bool:
        """Hold ``connection`` (socket ``fd``) until its router or the server wakes it.

        False when it cannot be parked (no epoll, the socket is gone): run it on.
        """
        if self._epoll is None or fd < 0:
            return False
        try:
            self._epoll.register(fd, _EVENTS)
        except OSError:
            return False
        self._parked[fd] = connection
        connection.parked(lambda: self._unpark(fd))
        self.parks += 1
        return True

    def _unpark(self, fd: int) -> None:
        connection = self._parked.pop(fd, None)
        if connection is None:
            return
        assert self._epoll is not None
        self._epoll.unregister(fd)
        connection.parked(None)
        self.resumed += 1
        self._resume(connection)

    async def run(self) -> None:
        """Hand back sessions as their sockets become ready, until cancelled; then end them all."""
        epoll = self._epoll
        if epoll is None:
            await anyio.sleep_forever()
            return
        try:
            while True:
                await anyio.wait_readable(epoll.fileno())
                for fd, _ in epoll.poll(0, _BATCH):
                    connection = self._parked.get(fd)
                    if connection is not None and not connection.serve_parked():
                        self._unpark(fd)
        finally:
            with anyio.CancelScope(shield=True):
                await self._close_all()
            epoll.close()
            self._epoll = None

    async def _close_all(self) -> None:
        """Each parked session ends as a running one does at shutdown (with its goodbye)."""
        parked = list(self._parked.items())
        self._parked.clear()
        if not parked:
            return
        assert self._epoll is not None
        for fd, connection in parked:
            self._epoll.unregister(fd)
            connection.parked(None)
        log.info("shutdown: closing %d idle router sessions", len(parked))
        async with anyio.create_task_group() as tg:
            for _, connection in parked:
                tg.start_soon(self._close, connection)
