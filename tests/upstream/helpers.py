"""Shared helpers for the upstream tests: payloads, configs, export documents, writes, waits."""

from __future__ import annotations

import base64
import itertools
import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from snapshot.model import RouterKey, Vrp
from upstream.config import ClientConfig, SourceConfig
from upstream.events import SnapshotEvent, Watch

#: Where the shared real data sets live (../shared/data from the repository root).
DATA = Path(__file__).resolve().parents[3] / "shared" / "data"

#: A plausible DER SubjectPublicKeyInfo (content is irrelevant to the parser, only base64).
SPKI = bytes.fromhex("3059301306072a8648ce3d020106082a8648ce3d03010703420004") + bytes(range(65))
SPKI_B64 = base64.b64encode(SPKI).decode()
#: Bytes whose base64 uses the characters that differ in the URL-safe alphabet (+ and /).
URLSAFE_SPKI = b"\xfb\xff\xbf\x30\x59\x01\x02"
SKI_HEX = "510F485D29A29DB7B515F9C478F8ED3CB7AA7D23"
SKI = bytes.fromhex(SKI_HEX)

#: Two small disjoint VRP sets as ``(prefix, maxLength, asn)`` triples (see `export`).
A = [("192.0.2.0/24", 24, 64496)]
B = [("198.51.100.0/24", 24, 64497)]


def ts(iso: str) -> int:
    """Unix seconds of an ISO 8601 UTC time such as ``2026-01-02T00:00:00Z``."""
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp())


def dumps(doc: object) -> bytes:
    """Serialise a test document the way validators do (UTF-8 JSON)."""
    return json.dumps(doc).encode()


def roa(prefix: str, max_length: object, asn: object, **extra: Any) -> dict[str, Any]:
    """One ``roas`` entry; ``max_length=None`` leaves the key out (values are not checked)."""
    entry: dict[str, Any] = {"asn": asn, "prefix": prefix}
    if max_length is not None:
        entry["maxLength"] = max_length
    entry.update(extra)
    return entry


def vrp(prefix: str, max_length: int | None, asn: int) -> Vrp:
    """The model VRP for the same values."""
    return Vrp.parse(prefix, max_length, asn)


def export(vrps: Iterable[tuple[str, int, int]], *, expires: int | None = None) -> bytes:
    """A small rpki-client style export of ``(prefix, maxLength, asn)`` triples."""
    roas = []
    for prefix, max_length, asn in vrps:
        entry = roa(prefix, max_length, asn, ta="test")
        if expires is not None:
            entry["expires"] = expires
        roas.append(entry)
    return dumps({"metadata": {"buildmachine": "test"}, "roas": roas})


def router_key(asn: int = 64496) -> RouterKey:
    """The model router key matching `SKI_HEX` / `SPKI_B64`."""
    return RouterKey(SKI, asn, SPKI)


_mtimes = itertools.count(1)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` in one step (a poller never sees half a file), with a fresh mtime.

    The mtime is set explicitly and always increases, so two writes within one filesystem
    timestamp tick are still told apart.
    """
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    touch(path)


def touch(path: Path) -> None:
    """Give ``path`` a new, strictly later modification time without changing its content."""
    t = (1_700_000_000 + next(_mtimes)) * 1_000_000_000
    os.utime(path, ns=(t, t))


async def wait_for(condition: Callable[[], bool], limit: float = 5.0) -> None:
    """Poll ``condition`` until it holds; fail (TimeoutError) after ``limit`` seconds."""
    with anyio.fail_after(limit):
        while True:
            if condition():
                return
            await anyio.sleep(0.005)


@contextmanager
def slow_builds(
    monkeypatch: pytest.MonkeyPatch, hold: float = 10.0
) -> Iterator[tuple[threading.Event, threading.Event]]:
    """Make the aggregator's builds wait in their worker thread: yields (building, release).

    ``building`` is set once a build waits; it goes on when ``release`` is set, or after
    ``hold`` seconds.
    """
    from upstream import aggregate, merge

    original = merge.build_snapshot
    building, release = threading.Event(), threading.Event()

    def slow(*args: Any) -> Any:
        building.set()
        release.wait(hold)
        return original(*args)

    monkeypatch.setattr(aggregate, "build_snapshot", slow)
    try:
        yield building, release
    finally:
        release.set()


def config(*paths: Path, revision: int = 0, **kw: Any) -> ClientConfig:
    """A client configuration with one file source per path (named by the file), polled fast."""
    return ClientConfig(
        tuple(SourceConfig(p.name, str(p)) for p in paths),
        poll_interval=0.05,
        revision=revision,
        **kw,
    )


async def snapshot_event(events: Watch, limit: float = 5.0) -> SnapshotEvent:
    """The next snapshot event of ``events`` (status events are skipped); fail after ``limit``."""
    with anyio.fail_after(limit):
        while True:
            event = await events.receive()
            if isinstance(event, SnapshotEvent):
                return event
