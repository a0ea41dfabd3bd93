"""A local JSON export watched and polled for changes (size, mtime, content hash), parsed off-loop.

A file that does not exist yet is not an error: the source waits for it. A file whose content is
invalid is rejected with the reason and the previous payload stays in force; the same bytes are
not parsed again. Identical content (even with a new mtime) delivers nothing and refreshes
nothing. An export whose stated build time lies beyond the raw wall clock plus the clock
tolerance is held back (class ``time``) and admitted once the wall clock allows it. The source
can refresh (`FileSource.refreshing`) while its last look found a readable, valid file. With
``watch`` (the default) the export's directory is watched too (`upstream.file_watch`): a write or
a rename onto the export is looked at at once, and the poll interval is only the safety net.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import anyio

from snapshot.kinds import ALL_KINDS, PayloadKind
from upstream.clock import Clock
from upstream.decompress import decompress
from upstream.export_file import DEFAULT_MAX_BYTES, read_export
from upstream.format_error import FormatError
from upstream.json_format import DEFAULT_MAX_ASPA_PROVIDERS, parse_export
from upstream.payload import SourcePayload
from upstream.pieces import PieceMemo
from upstream.source import DeliverySink, HeldExport, HoldsExports
from upstream.status import SourceState, SourceStatus
from upstream.timekeeper import as_keeper

log = logging.getLogger(__name__)


def load_file(path: Path, max_aspa_providers: int = DEFAULT_MAX_ASPA_PROVIDERS) -> SourcePayload:
    """Read, decompress and parse one export synchronously (for tools and tests)."""
    return parse_export(decompress(path.read_bytes()), max_aspa_providers=max_aspa_providers)


#: (digest, size, delivery) of the export file (`upstream.export_file`), in a worker thread.
_read_and_parse = read_export


def _digest_of(path: Path) -> bytes | None:
    try:
        return hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return None


class FileSource(HoldsExports):
    """Polls one file every ``poll_interval`` seconds and emits each new valid payload."""

    kind = "file"
    _log = log
    #: A local file: its data is judged by its entries' absolute expiry alone.
    online = False
    #: An export can hold every kind.
    capabilities: frozenset[PayloadKind] = ALL_KINDS

    def __init__(
        self,
        path: Path,
        *,
        name: str | None = None,
        poll_interval: float = 10.0,
        max_aspa_providers: int = DEFAULT_MAX_ASPA_PROVIDERS,
        clock: Clock | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        watch: bool = True,
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
        #: Watch the export's directory for changes besides polling.
        self.watch = watch
        self.keeper = as_keeper(clock)
        self.clock: Clock = self.keeper
        self.status = SourceStatus(self.name, self.kind, str(path))
        self._signature: tuple[int, int, int] | None = None
        self._digest: bytes | None = None
        self._rejected_digest: bytes | None = None
        #: A valid export held back because its build time is ahead of the wall clock.
        self._held: HeldExport | None = None
        #: The pieces of the last export read: the next read decodes only the changed ones.
        self._memo = PieceMemo()

    def refreshing(self) -> bool:
        """True before the first look and while the last one found a readable, valid file."""
        return not self.status.attempted or self.status.state is SourceState.OK

    def resync(self) -> None:
        """Nothing to do: a file's data is not distrusted by clock jumps (see ``online``)."""

    async def run(self, sink: DeliverySink) -> None:
        """Look forever (until cancelled), calling ``sink`` with each new delivery.

        A look happens every ``poll_interval`` seconds and, with ``watch``, as soon as the
        export's directory reports a change to the export.
        """
        woken = anyio.Event()  # set by the watch only; without one, each wait is the interval

        def wake() -> None:
            woken.set()

        async with anyio.create_task_group() as tg:
            if self.watch:
                # watchfiles is compiled: loaded only for a watch, so that the state's readers
                # under other interpreters need only pure-Python dependencies (P-38).
                from upstream.file_watch import watch_file

                tg.start_soon(watch_file, self.path, self.status, wake, self.poll_interval)
            while True:
                await self.check(sink)
                with anyio.move_on_after(self.poll_interval):
                    await woken.wait()
                woken = anyio.Event()

    async def check(self, sink: DeliverySink) -> bool:
        """One poll; True when a new payload was delivered."""
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
            return self._admit_held(sink)
        self._held = None
        started = self.clock.monotonic()
        try:
            digest, size, delivery = await anyio.to_thread.run_sync(
                _read_and_parse,
                self.path,
                (self._digest, self._rejected_digest),
                self.max_aspa_providers,
                self.max_bytes,
                self._memo,
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
        if delivery is None:
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
        how = f" ({size} bytes) in {self.clock.monotonic() - started:.2f} s"
        self._held = HeldExport(digest, delivery, how)
        return self._admit_held(sink)

    def _location(self) -> str:
        return str(self.path)

    def _environment_error(self, exc: OSError) -> None:
        self.status.failed("environment", str(exc), self.clock.wall())
        log.error("source %s: cannot read %s: %s; will retry", self.name, self.path, exc)
