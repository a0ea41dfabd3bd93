"""The shared read-only reader of an owner's SQLite state (core install, standard ``sqlite3``).

`SharedSnapshotClient` follows another process's (or this one's) SQLite store read-only and
hands out immutable `SharedSnapshot` objects that refuse a payload kind past its usable-until
time. Importing this module pulls in neither duckdb, nor the upstream or server halves.
"""

from persistence.shared.client import SharedSnapshotClient
from persistence.shared.types import (
    CLOSE_DEADLINE,
    DEFAULT_CLOCK_TOLERANCE,
    Afi,
    ReaderId,
    ReaderState,
    SharedEvent,
    SharedMetrics,
    SharedReaderConfig,
    SharedReaderLimits,
    SharedSnapshot,
    SharedStatus,
    SharedWatch,
    UpstreamId,
)
from snapshot.queries import ResyncRequiredError, SnapshotExpiredError

__all__ = [
    "CLOSE_DEADLINE",
    "DEFAULT_CLOCK_TOLERANCE",
    "Afi",
    "ReaderId",
    "ReaderState",
    "ResyncRequiredError",
    "SharedEvent",
    "SharedMetrics",
    "SharedReaderConfig",
    "SharedReaderLimits",
    "SharedSnapshot",
    "SharedSnapshotClient",
    "SharedStatus",
    "SharedWatch",
    "SnapshotExpiredError",
    "UpstreamId",
]
