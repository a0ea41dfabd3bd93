"""A store's cooperative cancel: asked for from any thread, it ends the store's running call.

`Interrupt.request` sets a flag and calls the driver's own cancel on the connection (sqlite3
``Connection.interrupt`` and DuckDB ``DuckDBPyConnection.interrupt``, both made to be called
from another thread): a statement in progress ends with the driver's interrupt error. The
store calls `Interrupt.check` before each statement, so a request that lands between two
statements ends the call at the next one. Rollback and close run `Interrupt.guarded`: no driver
interrupt reaches them, and none reaches a connection that is closing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from persistence.errors import CallInterruptedError

__all__ = ["Interrupt"]


class Interrupt:
    """Once requested, every later statement of the store fails with `CallInterruptedError`."""

    def __init__(self) -> None:
        """Not requested."""
        self._lock = threading.Lock()
        self._requested = False

    @property
    def requested(self) -> bool:
        """Whether `request` was called."""
        return self._requested

    def request(self, connection: Callable[[], Any]) -> None:
        """Interrupt the statement running on ``connection()`` now and every later one.

        Never blocks: while a rollback or close runs, only the flag is set (that call is the
        end of the transaction anyway).
        """
        self._requested = True
        if not self._lock.acquire(blocking=False):
            return
        try:
            db = connection()
            if db is not None:
                # A connection closed meanwhile raises its driver's "closed" error: nothing runs.
                with contextlib.suppress(Exception):
                    db.interrupt()
        finally:
            self._lock.release()

    def check(self) -> None:
        """Raise `CallInterruptedError` once requested (the store calls it before a statement)."""
        if self._requested:
            raise CallInterruptedError("interrupted at the close deadline before a statement")

    @contextlib.contextmanager
    def guarded(self) -> Iterator[None]:
        """Run a rollback or close without any driver interrupt reaching it."""
        with self._lock:
            yield
