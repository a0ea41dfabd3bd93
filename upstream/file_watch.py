"""`watch_file`: wake a file source when its export is written or replaced (inotify via watchfiles).

The directory holding the export is watched (not the file: an export replaced by rename is a new
inode), and only events for the export's own name count. Changes are grouped until the
directory has been quiet for `QUIET_MS` (at most `DEBOUNCE_MS`), so a writer's burst wakes the
source once. A directory that does not exist yet is looked for again every poll interval (one
warning) and watched once it exists. Where no watch can be set up (the kernel's watch limit is
reached, another failure of the notify backend), `watch_file` says so once and returns: the
source's poll interval goes on alone. Polling stays on beside the watch in any case, as the
safety net for file systems whose changes raise no events (network mounts).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import anyio
import watchfiles

from upstream.status import SourceStatus

__all__ = ["DEBOUNCE_MS", "QUIET_MS", "watch_file"]

log = logging.getLogger(__name__)

#: Longest time changes are grouped before the source is woken.
DEBOUNCE_MS = 1000
#: The quiet time that ends a group of changes (also how often the watch thread looks at its
#: stop flag).
QUIET_MS = 50


async def watch_file(
    path: Path,
    status: SourceStatus,
    wake: Callable[[], None],
    retry: float,
) -> None:
    """Call ``wake`` after each group of changes to ``path``; return when no watch can run.

    While the directory does not exist it is looked for again every ``retry`` seconds.
    ``status.watching`` is True once the watch is set up, False when it cannot be.
    Cancellation stops the watch thread within `QUIET_MS` (its stop flag is set before the
    thread is waited for).
    """
    directory = path.parent
    name = status.name
    missing_said = False
    while not await anyio.to_thread.run_sync(directory.is_dir):
        if not missing_said:
            missing_said = True
            log.warning(
                "source %s: directory %s does not exist; polling until it does, then watching",
                name,
                directory,
            )
        await anyio.sleep(retry)
    stop = threading.Event()
    async with anyio.create_task_group() as tg:

        async def consume() -> None:
            try:
                await _consume(directory, path.name, stop, wake, status)
            finally:
                tg.cancel_scope.cancel()  # ended by itself: nothing more to wait for

        tg.start_soon(consume)
        try:
            await anyio.sleep_forever()
        finally:
            stop.set()


async def _consume(
    directory: Path,
    target: str,
    stop: threading.Event,
    wake: Callable[[], None],
    status: SourceStatus,
) -> None:
    def ours(_change: watchfiles.Change, changed: str) -> bool:
        return Path(changed).name == target

    changes = watchfiles.awatch(
        directory,
        watch_filter=ours,
        debounce=DEBOUNCE_MS,
        step=QUIET_MS,
        # A thread-safe flag: the watch thread reads it (watchfiles' type names only the
        # event loops' events, which have the same is_set/set).
        stop_event=stop,  # type: ignore[arg-type]
        recursive=False,
        force_polling=False,
    )
    status.watching = True
    log.info("source %s: watching %s for changes to %s", status.name, directory, target)
    try:
        async for _ in changes:
            wake()
    except (OSError, RuntimeError) as exc:
        # watchfiles raises FileNotFoundError when the directory went away, OSError for the
        # kernel's watch limit (ENOSPC) and RuntimeError for other failures of its backend.
        status.watching = False
        log.warning(
            "source %s: cannot watch %s for changes (%s); polling only",
            status.name,
            directory,
            exc,
        )
    finally:
        await changes.aclose()
