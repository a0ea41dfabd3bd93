"""One rtr-serve plus every daemon connected to it: run dirs, start/stop, per-daemon checks."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from rtrserve import REPO, RtrServe

from rtrclients import procs
from rtrclients.base import Client
from rtrclients.bird import Bird
from rtrclients.frr import Frr
from rtrclients.gobgp import GoBgp
from rtrclients.openbgpd import OpenBgpd
from rtrclients.rtrclient import RtrClientLive
from rtrclients.serverlog import PeerLog, connected_peers, peer_log, peer_name
from rtrclients.vrps import Expected

HOST = "127.0.0.1"
CACHE = REPO / "interop-tests" / ".cache"
CLIENT_TYPES: dict[str, type[Client]] = {
    cls.name: cls for cls in (Bird, Frr, GoBgp, OpenBgpd, RtrClientLive)
}
DAEMONS = list(CLIENT_TYPES)
_RUN_ROOT: list[Path] = []


def run_root() -> Path:
    """This session's run directory: interop-tests/.cache/deb12/<time>-<pid> (old ones pruned)."""
    if not _RUN_ROOT:
        base = CACHE / "deb12"
        base.mkdir(parents=True, exist_ok=True)
        for old in sorted(base.glob("run-*"))[:-2]:  # keep the last runs for post-mortems
            pid = old.name.rsplit("-", 1)[-1]
            if not (pid.isdigit() and procs.alive(int(pid))):
                shutil.rmtree(old, ignore_errors=True)
        root = base / f"run-{datetime.now():%Y%m%dT%H%M%S}-{os.getpid()}"
        root.mkdir()
        latest = base / "latest"
        latest.unlink(missing_ok=True)
        latest.symlink_to(root.name)
        _RUN_ROOT.append(root)
    return _RUN_ROOT[0]


def replace_atomically(source: Path, served: Path) -> None:
    """Copy ``source`` over ``served`` so that rtr-serve never sees a partial file."""
    tmp = served.with_name(f".{served.name}.tmp")
    shutil.copyfile(source, tmp)
    tmp.replace(served)


@contextmanager
def daemons_running(run_dir: Path, port: int, names: list[str]) -> Iterator[dict[str, Client]]:
    """Start the named daemons against rtr-serve on ``port``; stop every one on exit."""
    with ExitStack() as stack:
        clients: dict[str, Client] = {}
        for name in names:
            client = CLIENT_TYPES[name](run_dir / name, HOST, port)
            stack.callback(client.stop)
            clients[name] = client
            client.start()
        yield clients
    left = [f"{name}" for name, client in clients.items() if client.running()]
    assert not left, f"still running after stop: {left}"


@dataclass
class Lab:
    """rtr-serve serving ``served`` with daemons connected; remembers each daemon's connection."""

    name: str
    server: RtrServe
    clients: dict[str, Client]
    served: Path
    run_dir: Path
    #: the local port of each daemon's RTR connection when it first held the full set
    ports: dict[str, int] = field(default_factory=dict)
    #: peers of one-shot rtrdump runs (so every connection in the log is accounted for)
    one_shots: list[str] = field(default_factory=list)
    #: count pollers of the daemons whose counts are cheap to read
    timelines: dict[str, Timeline] = field(default_factory=dict)

    def held_time(self, name: str, expected: Expected, since: float, serial: int) -> str:
        """Seconds from ``since`` until the daemon held ``expected``, and how that is known.

        The daemon's own log is used where it time-stamps a completed sync (BIRD, RTRlib),
        else the count poller (GoBGP, OpenBGPD; an upper bound by up to one poll).
        """
        client = self.clients[name]
        own = client.own_sync_time(since, serial)
        if own is not None:
            return f"{own - since:.2f} (log)"
        timeline = self.timelines.get(name)
        if timeline is None:
            return "?"
        target = client.target_counts(expected)
        deadline = time.monotonic() + 5  # the caller may have seen it before the poller did
        while (seen := timeline.first(target, since)) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        return f"{seen - since:.2f} (poll)" if seen is not None else "?"

    def connection_port(self, name: str) -> int:
        """The local port of the daemon's one current connection to rtr-serve."""
        client = self.clients[name]
        ports: set[int] = set()
        for _ in range(50):  # OpenBGPD hands its socket from parent to RTR child: retry briefly
            ports = client.rtr_ports()
            if len(ports) == 1:
                return ports.pop()
            time.sleep(0.1)
        raise AssertionError(f"{name}: expected one RTR connection, found ports {sorted(ports)}")

    def first_connection(self, name: str) -> PeerLog:
        """Remember the daemon's connection (first call) and return its log story."""
        if name not in self.ports:
            self.ports[name] = self.connection_port(name)
        return peer_log(self.server, peer_name(self.ports[name]))

    def stray_connections(self) -> list[str]:
        """Connections in the log that are neither a daemon's remembered one nor a one-shot."""
        known = {peer_name(p) for p in self.ports.values()} | set(self.one_shots)
        return [p for p in connected_peers(self.server) if p not in known]


class Timeline(threading.Thread):
    """Polls a client's counts every 0.25 s and keeps each change with its time.

    The time of a change is taken when the poll's answer is in, so it is an upper bound.
    """

    def __init__(self, client: Client, interval: float = 0.25) -> None:
        """Watch ``client`` until `stopping` is set."""
        super().__init__(name=f"timeline-{client.name}", daemon=True)
        self.client = client
        self.interval = interval
        self.changes: list[tuple[float, tuple[int, int]]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        """Poll until stopped; a failing poll (daemon busy or gone) is just skipped."""
        last: tuple[int, int] | None = None
        while not self.stopping.is_set():
            try:
                got = self.client.counts()
            except Exception:  # noqa: BLE001 - a thread must not die with an exception
                got = None
            if got is not None and got != last:
                self.changes.append((time.time(), got))
                last = got
            self.stopping.wait(self.interval)

    def first(self, target: tuple[int, int], since: float) -> float | None:
        """When the counts were first seen equal to ``target`` at or after ``since``."""
        return next((t for t, c in list(self.changes) if t >= since and c == target), None)


@contextmanager
def timelines(clients: dict[str, Client]) -> Iterator[dict[str, Timeline]]:
    """One `Timeline` per client that does not time-stamp its syncs, for the block's duration."""
    running = {name: Timeline(c) for name, c in clients.items() if not c.logs_syncs}
    for timeline in running.values():
        timeline.start()
    try:
        yield running
    finally:
        for timeline in running.values():
            timeline.stopping.set()
        for timeline in running.values():
            timeline.join(30)
