"""Example: embed the upstream `Client` with its own SQLite state file (no daemon, no router).

Runs on its own and ends by itself (a few seconds)::

    python examples/embed_client.py

It copies the bundled example export into a temporary directory and runs a `Client` on it with
``ClientConfig(state=...)``: entering the client opens the state file (owner lock, schema) and
recovers what it holds; the example waits until the VRPs are ready, validates a route, waits for
the state to be committed (`Client.flush`), watches the next change (it withdraws one ROA from
the export), validates again and closes (`Client.close_report` says what was persisted). Then
it removes the export and enters a second client on the same state file: the recovered data is
served at once, without any source having delivered.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import anyio

from persistence.location import StateLocation
from snapshot.kinds import PayloadKind
from snapshot.queries import validate_origin
from upstream import Client, ClientConfig, ClientSnapshot, SnapshotEvent, SourceConfig

EXAMPLE = Path(__file__).resolve().parent / "rpki-client-example.json"
#: Every wait of the example is bounded by this (seconds).
DEADLINE = 60.0
ROUTE = ("192.0.2.0/24", 64496)


def withdraw_route(export: Path) -> None:
    """Rewrite ``export`` without the ROA of `ROUTE` (atomically, as a validator would)."""
    doc = json.loads(export.read_text())
    prefix, asn = ROUTE
    doc["roas"] = [r for r in doc["roas"] if (r["prefix"], r["asn"]) != (prefix, asn)]
    tmp = export.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(export)


def verdict(current: ClientSnapshot) -> str:
    """`ROUTE`'s origin validation on ``current``, judged at the client's own time."""
    prefix, asn = ROUTE
    # check() refuses data past its usable-until time (SnapshotExpiredError).
    return validate_origin(current.check(PayloadKind.VRP), prefix, asn).state.value


async def first_run(config: ClientConfig, export: Path) -> None:
    """Wait ready, validate, commit, watch one change, validate again, close."""
    async with Client(config) as client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.fail_after(DEADLINE):
            ready = await client.wait_ready()
            receipt = await client.flush()
        print(f"client: {ready.snapshot.vrp_count} VRPs; {ROUTE[0]} AS{ROUTE[1]} {verdict(ready)}")
        print(f"client: state {receipt.snapshot_id} committed")
        with client.watch() as events:
            withdraw_route(export)
            with anyio.fail_after(DEADLINE):
                async for event in events:
                    if isinstance(event, SnapshotEvent):
                        print(
                            f"client: {event.reason} change: +{len(event.vrps_added)} "
                            f"-{len(event.vrps_removed)} VRPs; {ROUTE[0]} AS{ROUTE[1]} is now "
                            f"{verdict(event.snapshot)}"
                        )
                        break
        report = await client.close_report()
        print(f"client: {report.message}")
        tg.cancel_scope.cancel()


async def second_run(config: ClientConfig) -> None:
    """With the export gone, serve what the state file holds."""
    async with Client(config) as client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.fail_after(DEADLINE):
            ready = await client.wait_ready()
        print(
            f"recovered: {ready.snapshot.vrp_count} VRPs without the export; "
            f"{ROUTE[0]} AS{ROUTE[1]} {verdict(ready)}"
        )
        await client.aclose()
        tg.cancel_scope.cancel()


def main() -> int:
    directory = Path(tempfile.mkdtemp(prefix="rtr-embed-"))
    export = directory / "export.json"
    shutil.copy(EXAMPLE, export)
    config = ClientConfig(
        sources=(SourceConfig("example", str(export)),),
        poll_interval=0.2,
        state=StateLocation("sqlite", directory / "state.db"),
        flush_timeout=10.0,
    )
    try:
        anyio.run(first_run, config, export)
        export.unlink()
        anyio.run(second_run, config)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
