"""Upstream sources (JSON files, HTTP, RTR caches) that produce complete snapshots.

The public face of the upstream half is what this package exports: `Client` and its
configuration (`ClientConfig`, `SourceConfig`, `GroupConfig`), its snapshots, status and
events, and the error entering it raises for a source that can never work (`SourceSetupError`);
with `ClientConfig.state` the client owns its state file (recovered on entering, committed as it
goes, `Client.flush`, the bounded final commit of `Client.close_report` and its `ShutdownReport`),
and a host may take every committed snapshot through a ``publish`` hook (`Publication`).
Time has no public API (the client samples UTC and monotonic time itself;
`ClientConfig.reference_time` freezes UTC for an offline evaluation). Everything in the
submodules that is not exported here is internal. ::

    async with Client(ClientConfig(sources=(SourceConfig("rpki", "/var/lib/rpki/export.json"),)))
            as client:
        async with anyio.create_task_group() as tg:
            await tg.start(client.run)
            snapshot = await client.wait_ready()
"""

from snapshot.kinds import PayloadKind
from upstream.client import (
    Client,
    ClientSnapshot,
    ClientState,
    ClientStatus,
    Event,
    ResyncRequiredError,
    SnapshotEvent,
    SnapshotExpiredError,
    StatusEvent,
    Watch,
    WatchClosed,
)
from upstream.closing import Publication, ShutdownReport
from upstream.config import ClientConfig, GroupConfig, SourceConfig
from upstream.events import EventId, SnapshotId, SourceChange
from upstream.source import SourceSetupError

__all__ = [
    "Client",
    "ClientConfig",
    "ClientSnapshot",
    "ClientState",
    "ClientStatus",
    "Event",
    "EventId",
    "GroupConfig",
    "PayloadKind",
    "Publication",
    "ResyncRequiredError",
    "ShutdownReport",
    "SnapshotEvent",
    "SnapshotExpiredError",
    "SnapshotId",
    "SourceChange",
    "SourceConfig",
    "SourceSetupError",
    "StatusEvent",
    "Watch",
    "WatchClosed",
]
