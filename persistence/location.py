"""``--state`` / ``--state-reader`` values (``sqlite:PATH``, ``duckdb:PATH``) and their backends."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from persistence.backend import CLOSE_TIMEOUT, ThreadedBackend
from persistence.duckdb_backend import DuckDBBackend
from persistence.sqlite_backend import SQLiteBackend

BACKENDS = ("sqlite", "duckdb")


@dataclass(frozen=True, slots=True)
class StateLocation:
    """A backend name and a database path (absolute or relative to the working directory)."""

    backend: str
    path: Path

    def __str__(self) -> str:
        return f"{self.backend}:{self.path}"

    def make_sync_backend(
        self, *, read_only: bool = False, **options: Any
    ) -> SQLiteBackend | DuckDBBackend:
        """A new, unopened synchronous backend for this location (``options``: its keywords)."""
        if self.backend == "sqlite":
            return SQLiteBackend(self.path, read_only=read_only, **options)
        if read_only:
            raise ValueError("only sqlite state can be read by a follower (--state-reader)")
        return DuckDBBackend(self.path, **options)

    def make_backend(
        self, *, read_only: bool = False, close_timeout: float = CLOSE_TIMEOUT, **options: Any
    ) -> ThreadedBackend:
        """A new, unopened backend for this location, in its async adapter."""
        return ThreadedBackend(
            self.make_sync_backend(read_only=read_only, **options), close_timeout=close_timeout
        )


def parse_state_location(text: str, *, reader: bool = False) -> StateLocation:
    """Parse ``BACKEND:PATH``; raises `ValueError` with the accepted forms."""
    backend, sep, path = text.partition(":")
    allowed = ("sqlite",) if reader else BACKENDS
    if not sep or backend not in allowed or not path:
        forms = " or ".join(f"{b}:PATH" for b in allowed)
        raise ValueError(f"{text!r}: expected {forms}")
    return StateLocation(backend, Path(path))
