"""`ContractBackend`: what the backend contract suite needs to know about one backend.

A backend under test is described by how to build an unopened instance (``make``), its name and
whether it offers shared reads, and an importable reference to the description itself (``ref``,
``"package.module:NAME"``) so a subprocess can build the same backend (the cross-process
ownership test). ``make(path, wall)`` builds an owner on ``path`` whose wall-clock time is
``wall()`` (Unix seconds): the suite checks the stored ``written_at`` against a fake clock.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from persistence.backend import AsyncPersistenceBackend, ThreadedBackend
from persistence.duckdb_backend import DuckDBBackend
from persistence.sqlite_backend import SQLiteBackend
from tests.clock import FakeClock
from tests.persistence.helpers import START

__all__ = ["DUCKDB", "SQLITE", "ContractBackend", "load"]

#: Builds an unopened owner backend on a path with a wall clock (Unix seconds).
Factory = Callable[[Path, Callable[[], float]], AsyncPersistenceBackend]


@dataclass(frozen=True)
class ContractBackend:
    """One backend as the contract suite runs it."""

    #: `BackendCapabilities.backend_name` of the backend.
    name: str
    make: Factory
    #: `BackendCapabilities.shared_read` of the backend.
    shared_read: bool
    #: ``"module:NAME"`` where this description can be imported from (by a subprocess).
    ref: str

    def build(self, path: Path, clock: FakeClock | None = None) -> AsyncPersistenceBackend:
        """An unopened backend on ``path``; its wall clock is ``clock`` (default: at `START`)."""
        return self.make(path, (clock or FakeClock(wall=START)).wall)

    @asynccontextmanager
    async def opened(
        self, path: Path, clock: FakeClock | None = None
    ) -> AsyncIterator[AsyncPersistenceBackend]:
        """An open backend, closed (and checked closed in time) on exit."""
        backend = self.build(path, clock)
        await backend.open()
        try:
            yield backend
        finally:
            assert await backend.close()


def load(ref: str) -> ContractBackend:
    """The `ContractBackend` named by ``"module:NAME"``."""
    module, _, name = ref.partition(":")
    found = getattr(importlib.import_module(module), name)
    assert isinstance(found, ContractBackend), ref
    return found


SQLITE = ContractBackend(
    name="sqlite",
    make=lambda path, wall: ThreadedBackend(SQLiteBackend(path, wall=wall)),
    shared_read=True,
    ref="tests.persistence.contract_backend:SQLITE",
)
DUCKDB = ContractBackend(
    name="duckdb",
    make=lambda path, wall: ThreadedBackend(DuckDBBackend(path, wall=wall)),
    shared_read=False,
    ref="tests.persistence.contract_backend:DUCKDB",
)
