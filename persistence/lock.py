"""One owner per database file: exclusive `flock`s on ``PATH.owner-lock`` and on the file itself.

The path is normalised (absolute, symlinks resolved) so two spellings of one file collide; the
lock on the database file follows its identity (device and inode), so a hard link, which no
path normalisation can see through, collides too. Both locks live as long as their file
descriptors: a killed owner releases them with the process. `flock` locks are independent of
the POSIX ``fcntl`` locks SQLite and DuckDB take on the same file (on local file systems).

The process never opens the database file of an owner it already holds (closing such a
descriptor would drop the process's POSIX locks on it); an in-process set of held paths and
identities refuses those owners first.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from persistence.errors import ForkedProcessError, OwnerLockedError, TransientError

_held: set[str | tuple[int, int]] = set()
_guard = threading.Lock()


def normalise(path: str | Path) -> Path:
    """Absolute, with symlinks resolved (the file itself need not exist yet)."""
    return Path(os.path.realpath(Path(path).expanduser()))


def _flock(fd: int) -> bool:
    """Take an exclusive lock on ``fd`` without waiting; False if another holder has it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class OwnerLock:
    """An exclusive, non-blocking owner lock on one database file."""

    def __init__(self, path: str | Path) -> None:
        """Nothing is locked until `acquire`."""
        self.path = normalise(path)
        self.lock_path = self.path.with_name(self.path.name + ".owner-lock")
        self._fd: int | None = None
        self._db_fd: int | None = None
        self._identity: tuple[int, int] | None = None
        #: The process that took the lock (None while nothing is held).
        self._pid: int | None = None

    @property
    def inherited(self) -> bool:
        """Whether the lock is held by another process than this one (this is a forked child)."""
        return self._pid is not None and self._pid != os.getpid()

    def check_process(self) -> None:
        """`ForkedProcessError` in a process forked from the lock's owner."""
        if self.inherited:
            raise ForkedProcessError(
                f"the owner lock of {self.path} belongs to process {self._pid}, not to this "
                f"forked process {os.getpid()}"
            )

    def acquire(self) -> None:
        """Take the path lock, and the file lock if the file exists; `OwnerLockedError` if taken.

        When the database file does not exist yet, call `lock_database` right after creating it.
        """
        self.check_process()
        key = str(self.path)
        with _guard:
            if key in _held:
                raise OwnerLockedError(f"{self.path} is already owned by this process")
            try:
                fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                raise TransientError(f"cannot open the lock file {self.lock_path}: {exc}") from exc
            if not _flock(fd):
                os.close(fd)
                raise OwnerLockedError(
                    f"{self.path} is owned by another process (lock {self.lock_path}); "
                    "use --state-reader for a read-only follower"
                )
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            _held.add(key)
            self._fd = fd
            self._pid = os.getpid()
        try:
            self.lock_database(missing_ok=True)
        except BaseException:
            self.release()
            raise

    def lock_database(self, *, missing_ok: bool = False) -> None:
        """Take the lock on the database file itself (idempotent).

        Refuses with `OwnerLockedError` when an owner in this process or another one holds the
        same file under any name (a hard link included). A missing file is a `TransientError`
        unless ``missing_ok``.
        """
        if self._db_fd is not None:
            return
        with _guard:
            try:
                before = self.path.stat()
            except FileNotFoundError:
                if missing_ok:
                    return
                raise TransientError(f"{self.path} vanished before it could be locked") from None
            except OSError as exc:
                raise TransientError(f"cannot inspect {self.path}: {exc}") from exc
            identity = (before.st_dev, before.st_ino)
            if identity in _held:  # checked before opening it: see the module docstring
                raise OwnerLockedError(
                    f"{self.path} is already owned by this process under another name"
                )
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as exc:
                raise TransientError(f"cannot open {self.path} to lock it: {exc}") from exc
            opened = os.fstat(fd)
            if (opened.st_dev, opened.st_ino) != identity:
                os.close(fd)
                raise TransientError(f"{self.path} was replaced while it was being locked")
            if not _flock(fd):
                os.close(fd)
                raise OwnerLockedError(
                    f"{self.path} is owned by another process (under another name, e.g. a hard "
                    "link); use --state-reader for a read-only follower"
                )
            _held.add(identity)
            self._db_fd = fd
            self._identity = identity

    def release(self) -> None:
        """Drop both locks (idempotent); call it after the database connection is closed.

        In a forked child it does nothing: the locks are the parent's (an inherited ``flock``
        lives on the shared open file, and unlocking it here would unlock it for the parent).
        """
        if self.inherited:
            return
        with _guard:
            if self._db_fd is not None:
                os.close(self._db_fd)
                self._db_fd = None
                if self._identity is not None:
                    _held.discard(self._identity)
                self._identity = None
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
                _held.discard(str(self.path))
            self._pid = None
