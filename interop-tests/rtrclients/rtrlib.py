"""RTRlib 0.8's debug trace (stderr of rtrclient and FRR's bgpd): syncs and Serial Notifies."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

LINE = re.compile(r"^\((\d{4}/\d\d/\d\d \d\d:\d\d:\d\d:\d{6})\): (.*)$")
SYNC = re.compile(
    r"Sync successful, received (\d+) Prefix PDUs, (\d+) Router Key PDUs, "
    r"session_id: (\d+), SN: (\d+)"
)


@dataclass(frozen=True)
class Sync:
    """One completed synchronisation (the received data is applied by then)."""

    time: float
    prefix_pdus: int
    router_key_pdus: int
    session_id: int
    serial: int


def _lines(path: Path) -> list[tuple[float, str]]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        if m := LINE.match(line):
            when = datetime.strptime(m[1], "%Y/%m/%d %H:%M:%S:%f").timestamp()
            found.append((when, m[2]))
    return found


def syncs(path: Path) -> list[Sync]:
    """Every "Sync successful" of the trace."""
    found = []
    for when, text in _lines(path):
        if m := SYNC.search(text):
            found.append(Sync(when, int(m[1]), int(m[2]), int(m[3]), int(m[4])))
    return found


def first_sync(path: Path, since: float, serial: int) -> float | None:
    """When the first sync to ``serial`` at or after ``since`` completed."""
    return next((s.time for s in syncs(path) if s.serial == serial and s.time >= since), None)


def notifies(path: Path) -> int:
    """How many Serial Notify PDUs the trace says were received."""
    return sum(
        1 for _, text in _lines(path) if text.startswith("RTR Socket: Serial Notify received")
    )


def last_sync(path: Path) -> str:
    """The last sync as a short text (session and serial are not shown anywhere else)."""
    found = syncs(path)
    if not found:
        return "no sync yet"
    s = found[-1]
    return f"RTRlib: session {s.session_id}, SN {s.serial}"
