"""rtrclient (rtr-tools, RTRlib 0.8) running for good, printing every +/- update it applies."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

from rtrclients import procs, rtrlib
from rtrclients.base import Client
from rtrclients.vrps import RouterKey, Vrp, router_key, vrp

PREFIX = re.compile(r"^([+-]) (\S+)\s+(\d+) -\s+(\d+)\s+(\d+)$")


class RtrClientLive(Client):
    """`rtrclient -kps tcp HOST PORT` under `stdbuf -oL`; the held set is replayed from stdout."""

    name = "rtrclient"
    label = "rtrclient (rtr-tools 0.8.0, RTRlib 0.8)"
    expected_version = 1
    logs_syncs = True
    lists_router_keys = True

    def __init__(self, run_dir: Path, host: str, port: int) -> None:
        """Like `Client`, plus the replay state of the output file."""
        super().__init__(run_dir, host, port)
        self._lock = threading.Lock()
        self._offset = 0
        self._vrps: set[Vrp] = set()
        self._keys: set[RouterKey] = set()
        self._key: dict[str, str] | None = None
        self.status_lines: list[str] = []

    def transport(self) -> list[str]:
        """rtrclient's transport arguments (a subclass may use ssh)."""
        return ["tcp", self.host, str(self.port)]

    def start(self) -> None:
        """Start rtrclient; stdout is line-buffered so the file follows it closely."""
        run = self.run_dir
        self.started_at = time.time()
        self.tracked = procs.spawn(
            self.name,
            ["stdbuf", "-oL", "-eL", "rtrclient", "-kps", *self.transport()],
            log=run / "rtrclient.out",
            stderr=run / "rtrclient.err",
            pidfile=run / "rtrclient.pid",
            comm="rtrclient",
        )
        procs.wait_for(lambda: procs.comm_of(self._pid()) == "rtrclient", 10, "rtrclient exec")

    def _pid(self) -> int:
        assert self.tracked is not None
        return self.tracked.pid() or 0

    def logs(self) -> list[Path]:
        """Its stderr (RTRlib trace); stdout is the (large) update stream."""
        return [self.run_dir / "rtrclient.err"]

    def _replay(self) -> None:
        """Apply the complete lines written since the last call."""
        with (self.run_dir / "rtrclient.out").open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        for line in data[:end].decode(errors="replace").splitlines():
            self._line(line)

    def _line(self, line: str) -> None:
        key = self._key
        if line.startswith(("+ HOST:", "- HOST:")):
            self._key = {"sign": line[0], "spki": ""}
        elif key is not None and line.startswith("ASN:"):
            key["asn"] = line.split(":", 1)[1].strip()
        elif key is not None and line.strip().startswith("SKI:"):
            key["ski"] = line.split(":", 1)[1].strip()
        elif key is not None and (line.strip().startswith("SPKI:") or line.startswith("\t")):
            part = line.split(":", 1)[1] if line.strip().startswith("SPKI:") else line
            key["spki"] += part.strip()
            if not line.rstrip().endswith(":"):  # the last SPKI octet has no trailing colon
                spki = bytes.fromhex(key["spki"].replace(":", ""))
                rk = router_key(key["asn"], key["ski"], spki)
                if key["sign"] == "+":
                    self._keys.add(rk)
                else:
                    self._keys.discard(rk)
                self._key = None
        elif (m := PREFIX.match(line)) is not None:
            self._key = None
            item = vrp(m.group(2), m.group(3), m.group(4), m.group(5))
            if m.group(1) == "+":
                self._vrps.add(item)
            else:
                self._vrps.discard(item)
        elif line.startswith("RTR-Socket"):
            self.status_lines.append(line)

    def counts(self) -> tuple[int, int]:
        """(IPv4, IPv6) VRPs after replaying its output."""
        with self._lock:
            self._replay()
            v6 = sum(1 for item in self._vrps if len(item[0]) == 16)
            return len(self._vrps) - v6, v6

    def vrps(self) -> set[Vrp]:
        """The VRPs it holds (replayed from its +/- lines)."""
        with self._lock:
            self._replay()
            return set(self._vrps)

    def router_keys(self) -> set[RouterKey]:
        """The router keys it holds (replayed from its +/- HOST blocks)."""
        with self._lock:
            self._replay()
            return set(self._keys)

    def status(self) -> str:
        """The last connection status line it printed."""
        with self._lock:
            self._replay()
            return self.status_lines[-1] if self.status_lines else "no status line yet"

    def serial(self) -> int | None:
        """SN of RTRlib's last "Sync successful"."""
        found = rtrlib.syncs(self.run_dir / "rtrclient.err")
        return found[-1].serial if found else None

    def own_sync_time(self, since: float, serial: int) -> float | None:
        """RTRlib's "Sync successful ... SN: serial" in rtrclient.err."""
        return rtrlib.first_sync(self.run_dir / "rtrclient.err", since, serial)

    def notifies_received(self) -> int:
        """RTRlib's "Serial Notify received" lines."""
        return rtrlib.notifies(self.run_dir / "rtrclient.err")

    def rtrlib_view(self) -> str:
        """Session and serial of the last sync."""
        return rtrlib.last_sync(self.run_dir / "rtrclient.err")
