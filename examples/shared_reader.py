"""Example: read an rtr-serve owner's SQLite state from another process (`persistence.shared`).

Runs on its own and ends by itself (about ten seconds)::

    python examples/shared_reader.py

It copies the bundled example export into a temporary directory, starts ``rtr-serve`` on it
with ``--state sqlite:PATH`` (the owner, a separate process), and then, in this process, opens a
`SharedSnapshotClient` on that file read-only: it waits until the VRPs are ready, validates a
route, watches for the next change (the example withdraws one ROA from the export, the owner
publishes and persists it, the reader sees it) and validates again. Everything is stopped on the
way out; the owner's exit status is checked.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path

import anyio

from persistence.shared import SharedReaderConfig, SharedSnapshotClient
from snapshot.kinds import PayloadKind

EXAMPLE = Path(__file__).resolve().parent / "rpki-client-example.json"
#: Every wait of the example is bounded by this (seconds).
DEADLINE = 60.0
ROUTE = ("192.0.2.0/24", 64496)


def start_owner(export: Path, state: Path) -> subprocess.Popen[bytes]:
    """``rtr-serve`` on ``export`` with its state in ``state`` (routers on a free loopback port)."""
    command = [
        sys.executable,
        "-m",
        "rtr_server.cli",
        "--source",
        str(export),
        "--poll-interval",
        "0.5",
        "--state",
        f"sqlite:{state}",
        "--listen",
        "127.0.0.1:0",
    ]
    # A fixed argument list (this interpreter, our module), no shell.
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: S603


def withdraw_first_roa(export: Path) -> None:
    """Rewrite ``export`` without the ROA of `ROUTE` (atomically, as a validator would)."""
    doc = json.loads(export.read_text())
    prefix, asn = ROUTE
    doc["roas"] = [r for r in doc["roas"] if (r["prefix"], r["asn"]) != (prefix, asn)]
    tmp = export.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(export)


async def read(state: Path, export: Path) -> None:
    """Open a reader on the owner's ``state`` and follow it through one change of ``export``."""
    # A reader never creates the file: entering waits until the owner has written it.
    config = SharedReaderConfig(state, poll_interval=0.2, wait_for_file=True)
    async with AsyncExitStack() as stack:
        with anyio.fail_after(DEADLINE):
            reader = await stack.enter_async_context(SharedSnapshotClient(config))
        await follow(reader, export)


async def follow(reader: SharedSnapshotClient, export: Path) -> None:
    """Wait ready, validate, watch one change, validate again (the reader is open)."""
    async with anyio.create_task_group() as tg:
        await tg.start(reader.run)
        with anyio.fail_after(DEADLINE):
            ready = await reader.wait_ready({PayloadKind.VRP})
        print(
            f"reader: state {ready.store_id} generation {ready.generation}: "
            f"{ready.snapshot.vrp_count} VRPs"
        )
        prefix, asn = ROUTE
        verdict = ready.view().validate_origin(prefix, asn, now=reader.now())
        print(f"reader: {prefix} from AS{asn} is {verdict.state.value}")
        async with reader.watch() as events:
            withdraw_first_roa(export)
            with anyio.fail_after(DEADLINE):
                async for event in events:
                    if event.kind == "initial":
                        continue
                    print(
                        f"reader: {event.kind} {event.start} -> {event.end}: "
                        f"+{event.added} -{event.removed}"
                    )
                    break
        current = reader.get_snapshot()
        assert current is not None
        verdict = current.view().validate_origin(prefix, asn, now=reader.now())
        print(f"reader: {prefix} from AS{asn} is now {verdict.state.value}")
        tg.cancel_scope.cancel()


def main() -> int:
    directory = Path(tempfile.mkdtemp(prefix="rtr-shared-"))
    export, state = directory / "export.json", directory / "state.db"
    shutil.copy(EXAMPLE, export)
    owner = start_owner(export, state)
    try:
        anyio.run(read, state, export)
    finally:
        owner.send_signal(signal.SIGTERM)
        status = owner.wait(timeout=DEADLINE)
        shutil.rmtree(directory, ignore_errors=True)
    print(f"owner: exit status {status}")
    return status


if __name__ == "__main__":
    sys.exit(main())
