"""SLURM files of the upstream half: read and combined at once (`load_slurm_files`) or watched.

`SlurmFiles` polls its files every ``poll_interval`` seconds (size, mtime and inode of each; a
changed signature means a read), reads, parses and combines them in a worker thread, and
replaces the policy in force only by a valid combination of all the files: an invalid, missing
or conflicting file is rejected with the reason in the log (file, member path, why) and the
previous policy stays in force. Until a first valid set has loaded, ``policy`` is None and the
aggregator publishes nothing (routers get No Data Available). ``on_change`` is called whenever
the policy in force changes, so that a new snapshot is built.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio

from snapshot.slurm import EMPTY_POLICY, SlurmError, SlurmPolicy, parse_slurm
from snapshot.slurm_combine import combine

log = logging.getLogger(__name__)

#: A SLURM file is a few kilobytes; anything this big is a mistake, not a policy.
MAX_SLURM_BYTES = 64 << 20

Signature = tuple[int, int, int] | str


def read_slurm_files(paths: Sequence[str]) -> tuple[SlurmPolicy, bytes]:
    """Read, parse and combine ``paths`` (blocking): the policy and a digest of the contents.

    Raises:
        SlurmError: a file cannot be read, is invalid, or conflicts with another (RFC 8416
            §4.2); the message starts with the file name.
    """
    digest = hashlib.sha256()
    policies = []
    for path in paths:
        try:
            with Path(path).open("rb") as f:
                data = f.read(MAX_SLURM_BYTES + 1)
        except OSError as exc:
            raise SlurmError(f"{path}: cannot read: {exc.strerror or exc}") from None
        if len(data) > MAX_SLURM_BYTES:
            raise SlurmError(f"{path}: larger than {MAX_SLURM_BYTES} bytes")
        digest.update(len(path).to_bytes(8, "big") + path.encode())
        digest.update(len(data).to_bytes(8, "big") + data)
        policies.append(parse_slurm(data, path))
    return combine(policies), digest.digest()


def load_slurm_files(paths: Sequence[str]) -> SlurmPolicy:
    """`read_slurm_files` without the digest (start-up checks, ``check-config``)."""
    return read_slurm_files(paths)[0]


def _signatures(paths: Sequence[str]) -> tuple[Signature, ...]:
    out: list[Signature] = []
    for path in paths:
        try:
            st = Path(path).stat()
        except OSError as exc:
            out.append(exc.strerror or str(exc))
        else:
            out.append((st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(out)


class SlurmFiles:
    """The SLURM policy in force, reloaded when its files change; see the module docstring."""

    def __init__(
        self,
        paths: Sequence[str],
        *,
        poll_interval: float = 10.0,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        """Configure; reads nothing until `run` (or `check`)."""
        if poll_interval <= 0:
            raise ValueError("poll_interval must be positive")
        self.paths = tuple(paths)
        self.poll_interval = poll_interval
        self.on_change = on_change
        #: The policy in force (None: files configured, none valid yet).
        self.policy: SlurmPolicy | None = None if self.paths else EMPTY_POLICY
        #: Why the current contents are rejected (None when they are in force).
        self.error: str | None = None
        #: Policies put in force, and rejected contents, since the start.
        self.loads = 0
        self.rejections = 0
        self._signatures: tuple[Signature, ...] | None = None
        self._digest: bytes | None = None
        self._wake: anyio.Event | None = None

    def set_paths(self, paths: Sequence[str]) -> None:
        """Use ``paths`` from now on; the policy in force stays until they load validly."""
        paths = tuple(paths)
        if paths == self.paths:
            return
        self.paths = paths
        self._signatures = None
        if self._wake is not None:
            self._wake.set()

    async def run(self) -> None:
        """Check the files now and then every ``poll_interval`` seconds, until cancelled."""
        while True:
            self._wake = anyio.Event()
            await self.check()
            with anyio.move_on_after(self.poll_interval if self.paths else math.inf):
                await self._wake.wait()

    async def check(self) -> bool:
        """One poll; True when the policy in force changed."""
        paths = self.paths
        if not paths:
            return self._install(EMPTY_POLICY, b"", paths)
        signatures = await anyio.to_thread.run_sync(_signatures, paths)
        if signatures == self._signatures:
            return False
        try:
            policy, digest = await anyio.to_thread.run_sync(read_slurm_files, paths)
        except SlurmError as exc:
            self._signatures = signatures
            self._reject(str(exc))
            return False
        if paths != self.paths:
            return False  # reconfigured meanwhile: the next round reads the new files
        self._signatures = signatures
        if digest == self._digest:
            if self.error is not None:
                log.info("SLURM: %s back to the policy in force", ", ".join(paths))
                self.error = None
            return False
        return self._install(policy, digest, paths)

    def _install(self, policy: SlurmPolicy, digest: bytes, paths: tuple[str, ...]) -> bool:
        self.error = None
        self._digest = digest
        if policy == self.policy:
            return False
        self.policy = policy
        self.loads += 1
        if paths:
            log.info("SLURM: in force from %s: %s", ", ".join(paths), policy.summary())
        else:
            log.info("SLURM: no files configured any more; nothing is filtered or asserted")
        if self.on_change is not None:
            self.on_change()
        return True

    def _reject(self, reason: str) -> None:
        self.error = reason
        self.rejections += 1
        if self.policy is None:
            log.error("SLURM: rejected: %s; nothing is published until the files are valid", reason)
        else:
            log.error("SLURM: rejected: %s; the previous SLURM policy stays in force", reason)
