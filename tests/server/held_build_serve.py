"""``rtr-serve`` (`rtr_server.cli.main`) whose snapshot builds wait while a marker file exists.

Run as ``python -m tests.server.held_build_serve HOLD RELEASE ARGS...``: once the file ``HOLD``
exists, every build logs "build held" and waits in its worker thread until the file ``RELEASE``
exists (at most 60 s). SQLite's busy timeout is 0.2 s, so that a commit against a write-locked
file fails (and is retried) quickly. Only tests use this.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

from persistence import sqlite_backend
from rtr_server.cli import main
from upstream import aggregate, merge


def hold_builds(hold: Path, release: Path) -> None:
    """Make the aggregator's builds wait while ``hold`` exists, until ``release`` exists."""
    original = merge.build_snapshot

    def held(*args: Any) -> Any:
        if hold.exists():
            logging.getLogger("tests.held_build").info("build held")
            deadline = time.monotonic() + 60.0
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        return original(*args)

    aggregate.build_snapshot = held  # type: ignore[attr-defined,assignment]


if __name__ == "__main__":
    hold_file, release_file, *argv = sys.argv[1:]
    sqlite_backend.BUSY_TIMEOUT_MS = 200
    hold_builds(Path(hold_file), Path(release_file))
    sys.exit(main(argv))
