"""A local JSON export polled for changes (size, mtime, then content hash), parsed off the loop.

A file that does not exist yet is not an error: the source waits for it. A file whose content is
invalid is rejected with the reason and the previous payload stays in force; the same bytes are
not parsed again. Identical content (even with a new mtime) emits nothing.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

import anyio

from upstream.clock import Clock, SystemClock
from upstream.json_format import (
    DEFAULT_MAX_ASPA_PROVIDERS,
    FormatError,
    SourcePayload,
    decompress,
    parse_export,
)
from upstream.status import SourceState, SourceStatus

log = logging.getLogger(__name__)

PayloadSink = Callable[[str, SourcePayload], None]

#: 1 GiB: about ten times today's largest global export, uncompressed.
DEFAULT_MAX_BYTES = 1 << 30


def load_file(path: Path, max_aspa_providers: int = DEFAULT_MAX_ASPA_PROVIDERS) -> SourcePayload:
    """Read, decompress and parse one export synchronously (for tools and tests)."""
    return parse_export(decompress(path.read_bytes()), max_aspa_providers=max_aspa_providers)


def _read_and_parse(
    path: Path,
    known: tuple[bytes | None, ...],
    max_aspa_providers: int,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> tuple[bytes, int, SourcePayload | None]:
    """(digest, size, payload); payload is None when the digest is one of ``known``."""
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).digest()
    size = len(raw)
    if digest in known:
        return digest, size, None
    if size > max_bytes:
        raise FormatError(f"file of {size} bytes exceeds the limit of {max_bytes} bytes")
    data = decompress(raw, max_size=max_bytes)
    del raw
    return digest, size, parse_export(data, max_aspa_providers=max_aspa_providers)


def _digest_of(path: Path) -> bytes | None:
    try:
        return hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return None


class FileSource:
    """Polls one file every ``poll_interval`` seconds and emits each new valid payload."""

    kind = "file"

    def __init__(
        self,
        path: Path,
        *,
        name: str | None = None,
        poll_interval: float = 10.0,
        max_aspa_providers: int = DEFAULT_MAX_ASPA_PROVIDERS,
        clock: Clock | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        """Configure; touches no file (that happens in `run`)."""
        if poll_interval <= 0:
            raise ValueError("poll_interval must be positive")
        self.path = path
        self.name = name or str(path)
        self.poll_interval = poll_interval
        self.max_aspa_providers = max_aspa_providers
        #: Largest export accepted, compressed and decompressed (a decompression bomb is
        #: rejected like any malformed update).
        self.max_bytes = max_bytes
        self.clock = clock or SystemClock()
        self.status = SourceStatus(self.name, self.kind, str(path))
        self._signature: tuple[int, int, int] | None = None
        self._digest: bytes | None = None
        self._rejected_digest: bytes | None = None

    async def run(self, sink: PayloadSink) -> None:
        """Poll forever (until cancelled), calling ``sink(name, payload)`` on each new payload."""
        while True:
            await self.check(sink)
            await anyio.sleep(self.poll_interval)

    async def check(self, sink: PayloadSink) -> bool:
        """One poll; True when a new payload was emitted."""
        try:
            st = await anyio.to_thread.run_sync(os.stat, self.path)
        except FileNotFoundError:
            if self.status.state is not SourceState.WAITING:
                log.warning(
                    "source %s: %s does not exist yet; waiting for it", self.name, self.path
                )
            self.status.state = SourceState.WAITING
            self.status.attempted = True
            self._signature = None
            return False
        except OSError as exc:
            self._environment_error(exc)
            return False
        signature = (st.st_size, st.st_mtime_ns, st.st_ino)
        if signature == self._signature:
            return False
        started = self.clock.monotonic()
        try:
            digest, size, payload = await anyio.to_thread.run_sync(
                _read_and_parse,
                self.path,
                (self._digest, self._rejected_digest),
                self.max_aspa_providers,
                self.max_bytes,
            )
        except FileNotFoundError:
            return False  # removed between stat and read; the next poll says so
        except OSError as exc:
            self._environment_error(exc)
            return False
        except FormatError as exc:
            # Remember the bytes: the same broken content is not parsed (or counted) again.
            self._signature = signature
            self._rejected_digest = await anyio.to_thread.run_sync(_digest_of, self.path)
            self.status.failed("format", str(exc), self.clock.wall())
            log.error(
                "source %s: rejected update from %s: %s; the previous data stays in force",
                self.name,
                self.path,
                exc,
            )
            return False
        self._signature = signature
        self.status.bytes_read += size
        if payload is None:
            if digest == self._digest:
                self.status.syncs += 1  # the content in force, confirmed
            if digest == self._digest and self.status.state is not SourceState.OK:
                # The content in force is back (after a broken or missing file).
                self.status.state = SourceState.OK
                self.status.attempted = True
                log.info("source %s: %s is back to the content in force", self.name, self.path)
            else:
                log.debug("source %s: %s touched, content unchanged", self.name, self.path)
            return False
        self._digest = digest
        status = self.status
        status.state = SourceState.OK
        status.attempted = True
        status.syncs += 1
        status.last_success_wall = self.clock.wall()
        status.records = payload.counts()
        log.info(
            "source %s: loaded %s (%d bytes) in %.2f s: %s",
            self.name,
            self.path,
            size,
            self.clock.monotonic() - started,
            ", ".join(f"{k}={v}" for k, v in status.records.items()),
        )
        sink(self.name, payload)
        return True

    def _environment_error(self, exc: OSError) -> None:
        self.status.failed("environment", str(exc), self.clock.wall())
        log.error("source %s: cannot read %s: %s; will retry", self.name, self.path, exc)
