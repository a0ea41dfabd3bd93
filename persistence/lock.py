"""One owner per database file: an exclusive `flock` on ``PATH.owner-lock`` plus an in-process set.

The path is normalised (absolute, symlinks resolved) so two spellings of one file collide.
The lock lives as long as its file descriptor: a killed owner releases it with the process.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from persistence.errors import OwnerLockedError, TransientError

_held: set[str] = set()
_guard = threading.Lock()


def normalise(path: str | Path) -> Path:
    """Absolute, with symlinks resolved (the file itself need not exist yet)."""
    return Path(os.path.realpath(Path(path).expanduser()))


class OwnerLock:
    """An exclusive, non-blocking owner lock on one database path."""

    def __init__(self, path: str | Path) -> None:
        """Nothing is locked until `acquire`."""
        self.path = normalise(path)
        self.lock_path = self.path.with_name(self.path.name + ".owner-lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise `OwnerLockedError` naming the path."""
        key = str(self.path)
        with _guard:
            if key in _held:
                raise OwnerLockedError(f"{self.path} is already owned by this process")
            try:
                fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                raise TransientError(f"cannot open the lock file {self.lock_path}: {exc}") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise OwnerLockedError(
                    f"{self.path} is owned by another process (lock {self.lock_path}); "
                    "use --state-reader for a read-only follower"
                ) from None
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            _held.add(key)
            self._fd = fd

    def release(self) -> None:
        """Drop the lock (idempotent)."""
        with _guard:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
                _held.discard(str(self.path))
