"""How a `Client` is bound and prepared: its event loop and thread, its sources' set-up I/O.

Both happen on entering the client (`Preparable.prepare` reads, e.g., a CA file).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import anyio.lowlevel

from upstream.source import Preparable, Source

__all__ = ["loop_identity", "prepare_sources"]


def loop_identity(*, required: bool = True) -> tuple[object, int] | None:
    """(this event loop's token, this thread's id); None outside any loop unless required."""
    try:
        token = anyio.lowlevel.current_token()
    except Exception:
        if required:
            raise
        return None
    return token, threading.get_ident()


async def prepare_sources(sources: Iterable[Source]) -> None:
    """Await `Preparable.prepare` of every source that has set-up I/O, in order."""
    for source in sources:
        if isinstance(source, Preparable):
            await source.prepare()
