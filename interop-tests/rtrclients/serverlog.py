"""Read one router connection's story out of rtr-serve's log (connected, queries, close)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rtrserve import RtrServe, log_line_time

CONNECTED = re.compile(r"router (\S+) connected(?: over \S+(?: as '[^']*')?)? \(\d+ connections\)$")
#: An answer to a query held for the first data ends with ", held S s" (--arrival-hold).
HELD = r"(?:, held [\d.]+ s, then encoded [\d.]+ s and written [\d.]+ s)?"


@dataclass(frozen=True)
class Reset:
    """A Reset Query answered with the full table."""

    version: int
    serial: int
    size: int
    time: float


@dataclass(frozen=True)
class DeltaAnswer:
    """A Serial Query answered with a delta."""

    version: int
    from_serial: int
    to_serial: int
    vrps: tuple[int, int]
    router_keys: tuple[int, int]
    size: int
    time: float


@dataclass
class PeerLog:
    """Everything rtr-serve logged about one router connection (peer = "ip:port")."""

    peer: str
    connected: int = 0
    resets: list[Reset] = field(default_factory=list)
    deltas: list[DeltaAnswer] = field(default_factory=list)
    cache_resets: int = 0
    closed: list[str] = field(default_factory=list)

    @property
    def versions(self) -> set[int]:
        """Every version its queries were answered in."""
        return {r.version for r in self.resets} | {d.version for d in self.deltas}


def peer_name(port: int, host: str = "127.0.0.1") -> str:
    """How rtr-serve names a router connection."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def peer_log(server: RtrServe, peer: str) -> PeerLog:
    """Parse the log lines of ``peer``."""
    p = re.escape(peer)
    reset = re.compile(
        rf"router {p}: reset query v(\d) -> full table, serial (\d+) \((\d+) bytes{HELD}\)"
    )
    delta = re.compile(
        rf"router {p}: serial query v(\d) from serial (\d+) -> delta to serial (\d+) "
        r"\(\+(\d+)/-(\d+) VRPs, \+(\d+)/-(\d+) router keys, .*; (\d+) bytes" + HELD + r"\)"
    )
    closed = re.compile(rf"router {p} closed: (.*)$")
    story = PeerLog(peer)
    for line in server.log.splitlines():
        if f"router {peer}" not in line:
            continue
        if (m := CONNECTED.search(line)) and m[1] == peer:
            story.connected += 1
        elif m := reset.search(line):
            story.resets.append(Reset(int(m[1]), int(m[2]), int(m[3]), log_line_time(line)))
        elif m := delta.search(line):
            story.deltas.append(
                DeltaAnswer(
                    int(m[1]),
                    int(m[2]),
                    int(m[3]),
                    (int(m[4]), int(m[5])),
                    (int(m[6]), int(m[7])),
                    int(m[8]),
                    log_line_time(line),
                )
            )
        elif line.endswith(f"router {peer}: serial query answered with Cache Reset"):
            story.cache_resets += 1
        elif m := closed.search(line):
            story.closed.append(m[1])
    return story


def connected_peers(server: RtrServe) -> list[str]:
    """Every peer that connected, in order."""
    return [m[1] for line in server.log.splitlines() if (m := CONNECTED.search(line))]


def published_at(server: RtrServe, serial: int) -> float | None:
    """When the log says ``serial`` was published."""
    return server.first_time(rf"published serial {serial}[ :]")
