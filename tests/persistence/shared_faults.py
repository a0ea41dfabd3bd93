"""Scripted delays and failures for the shared reader tests, around the real code.

`GatedJudge` is the real `judge_state` held at a gate for the states it picks (a slow build in
its thread); `GatedStore` a real read-only SQLite store whose header read waits at a gate once
armed (a read blocking the owner thread); `FailingCloseStore` one whose connection close fails
the first ``failures`` times.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from persistence.shared.convert import judge_state
from persistence.sqlite_backend import SQLiteStore
from persistence.state import PersistedState, StateHeader
from snapshot.kinds import PayloadKind
from snapshot.slurm import SlurmPolicy
from snapshot.snapshot import Snapshot

#: Longest a gate holds a thread (a test that forgets to open it fails, it does not hang).
GATE_TIMEOUT = 10.0


class GatedJudge:
    """`judge_state`, held at ``gate`` for the states ``hold`` picks; counts threads inside."""

    def __init__(self, hold: Callable[[PersistedState], bool]) -> None:
        self.hold = hold
        self.gate = threading.Event()
        #: A held build reached the gate.
        self.entered = threading.Event()
        self._lock = threading.Lock()
        self.inside = 0
        #: The most builds that ran at once.
        self.most = 0
        #: The generation of every state judged, in order.
        self.calls: list[int] = []

    def __call__(
        self,
        state: PersistedState,
        now: float,
        *,
        own: Mapping[str, float] | None = None,
        policy: SlurmPolicy | None = None,
    ) -> tuple[Snapshot, dict[PayloadKind, float | None]]:
        with self._lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
            self.calls.append(state.state_id.generation)
        try:
            if self.hold(state) and not self.gate.is_set():
                self.entered.set()
                if not self.gate.wait(GATE_TIMEOUT):
                    raise RuntimeError("the test never opened the gate")
            return judge_state(state, now, own=own, policy=policy)
        finally:
            with self._lock:
                self.inside -= 1


class GatedStore(SQLiteStore):
    """A real read-only SQLite store whose header read waits at ``gate`` once ``armed``."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, read_only=True)
        self.armed = threading.Event()
        self.entered = threading.Event()
        self.gate = threading.Event()

    def read_header_sync(self) -> StateHeader | None:
        if self.armed.is_set() and not self.gate.is_set():
            self.entered.set()
            if not self.gate.wait(GATE_TIMEOUT):
                raise RuntimeError("the test never opened the gate")
        return super().read_header_sync()


class FailingCloseStore(SQLiteStore):
    """A real read-only SQLite store whose connection close fails the first ``failures`` times."""

    def __init__(self, path: Path, failures: int) -> None:
        super().__init__(path, read_only=True)
        self.failures = failures

    def _close_connection(self, db: Any) -> None:
        if self.failures:
            self.failures -= 1
            raise sqlite3.OperationalError("disk I/O error (scripted close failure)")
        super()._close_connection(db)

    @property
    def connected(self) -> bool:
        """Whether the connection is still held."""
        return self._db is not None
