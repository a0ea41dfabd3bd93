"""Pure data model of rtr-serve: payload values, snapshots, deltas, serials, publishing.

Standard library only, no I/O and no clock reads. Start with `snapshot.model` (values),
`snapshot.packed` (the packed key layout), then `snapshot.snapshot`, `snapshot.delta`,
`snapshot.difflog` and `snapshot.publisher`; `snapshot.backoff` is the one retry-delay rule.
"""

from snapshot.delta import EMPTY_DELTA, AspaChange, Delta, apply, compose, compute_delta
from snapshot.difflog import DiffLog
from snapshot.model import Aspa, PayloadError, RouterKey, Vrp
from snapshot.publisher import Continuation, PublishedState, Publisher, SessionIds
from snapshot.serial import Serial
from snapshot.snapshot import Snapshot, SnapshotBuilder

__all__ = [
    "EMPTY_DELTA",
    "Aspa",
    "AspaChange",
    "Continuation",
    "Delta",
    "DiffLog",
    "PayloadError",
    "PublishedState",
    "Publisher",
    "RouterKey",
    "Serial",
    "SessionIds",
    "Snapshot",
    "SnapshotBuilder",
    "Vrp",
    "apply",
    "compose",
    "compute_delta",
]
