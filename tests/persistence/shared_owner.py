"""An owner in another process for the shared reader tests.

``python -m tests.persistence.shared_owner PATH``: opens PATH as the owner, commits generation
1, prints ``ready STORE_ID``; then each line ``commit`` on stdin commits the next generation
and prints ``committed N``; end of input closes the store and exits.
"""

from __future__ import annotations

import sys
import time

import anyio

from persistence.backend import ThreadedBackend
from persistence.sqlite_backend import SQLiteBackend
from persistence.state import StateId
from tests.persistence.shared_states import state


async def main(path: str) -> None:
    """Own ``path`` and commit as told on stdin."""
    backend = ThreadedBackend(SQLiteBackend(path))
    await backend.open()
    try:
        assert backend.store_id is not None
        previous = StateId(1, 1)
        await backend.commit(state(backend.store_id, previous, time.time()), None)
        print("ready", backend.store_id, flush=True)
        while line := await anyio.to_thread.run_sync(sys.stdin.readline):
            if line.strip() != "commit":
                continue
            nxt = StateId(1, previous.generation + 1)
            asn = 64496 + nxt.generation
            await backend.commit(state(backend.store_id, nxt, time.time(), asn=asn), previous)
            previous = nxt
            print("committed", nxt.generation, flush=True)
    finally:
        await backend.close()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
