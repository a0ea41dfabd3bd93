"""BIRD 2.0.12 (bird2): protocol rpki into roa4/roa6 tables, read with birdc."""

from __future__ import annotations

import re
import time
from datetime import datetime

from rtrclients import procs
from rtrclients.base import Client
from rtrclients.vrps import RouterKey, Vrp, vrp

CONFIG = """\
log "{run}/bird.log" all;
router id 192.0.2.254;
debug protocols {{ states, events }};

roa4 table r4;
roa6 table r6;

protocol rpki rtr1 {{
    roa4 {{ table r4; }};
    roa6 {{ table r6; }};
    remote "{host}" port {port};
    transport tcp;
    retry 5;    # before the first End of Data (default 600 s); the cache's timers win after
}}
"""

ROUTE = re.compile(r"^(\S+)/(\d+)-(\d+) AS(\d+)\s", re.MULTILINE)
COUNT = re.compile(r"^(\d+) of \d+ routes for \d+ networks in table", re.MULTILINE)
SYNCED = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) <TRACE> rtr1: Changing from Sync-Running to "
    r"Established state$",
    re.MULTILINE,
)


class Bird(Client):
    """BIRD in the foreground (-f) as an RTR v1 client."""

    name = "bird"
    label = "BIRD 2.0.12 (bird2)"
    expected_version = 1
    logs_syncs = True

    def config(self) -> str:
        """bird.conf (a subclass may change the transport)."""
        return CONFIG.format(run=self.run_dir, host=self.host, port=self.port)

    def start(self) -> None:
        """Write the config, check it (bird -p), start BIRD and wait for its socket."""
        run = self.run_dir
        conf = run / "bird.conf"
        conf.write_text(self.config())
        ctl = self.socket_path("bird.ctl")
        procs.run(["bird", "-p", "-c", str(conf)])
        self.started_at = time.time()
        self.tracked = procs.spawn(
            self.name,
            ["bird", "-f", "-c", str(conf), "-s", str(ctl), "-P", str(run / "bird.pid")],
            log=run / "bird.stderr",
            pidfile=run / "bird.pid",
            comm="bird",
            own_pidfile=False,
        )
        procs.wait_for(ctl.exists, 15, "bird control socket")

    def birdc(self, *command: str, timeout: float = 60.0) -> str:
        """Run one birdc command."""
        return procs.run(
            ["birdc", "-s", str(self.socket_file("bird.ctl")), *command], timeout=timeout
        )

    def counts(self) -> tuple[int, int]:
        """Routes in r4 and r6."""
        found = []
        for table in ("r4", "r6"):
            match = COUNT.search(self.birdc("show", "route", "table", table, "count"))
            if match is None:
                raise RuntimeError(f"no count for {table}")
            found.append(int(match.group(1)))
        return found[0], found[1]

    def vrps(self) -> set[Vrp]:
        """Every ROA route in r4 and r6."""
        held: set[Vrp] = set()
        for table in ("r4", "r6"):
            text = self.birdc("show", "route", "table", table, timeout=120)
            held.update(vrp(*m) for m in ROUTE.findall(text))
        return held

    def router_keys(self) -> set[RouterKey]:
        """BIRD 2.0 keeps no router keys."""
        raise NotImplementedError

    def protocol(self) -> dict[str, str]:
        """Fields of `show protocols all rtr1` (Status, Protocol version, Serial number...)."""
        fields: dict[str, str] = {}
        for line in self.birdc("show", "protocols", "all", "rtr1").splitlines():
            key, sep, value = line.strip().partition(":")
            if sep and key and not key.startswith("Channel"):
                fields.setdefault(key.strip(), value.strip())
        return fields

    def status(self) -> str:
        """Status, version, session and serial as BIRD reports them."""
        try:
            p = self.protocol()
        except (RuntimeError, OSError) as exc:
            return f"birdc failed: {exc}"
        return (
            f"status={p.get('Status')} version={p.get('Protocol version')} "
            f"session={p.get('Session ID')} serial={p.get('Serial number')}"
        )

    def serial(self) -> int | None:
        """ "Serial number" of `show protocols all rtr1`."""
        value = self.protocol().get("Serial number", "")
        return int(value) if value.isdigit() else None

    def own_sync_time(self, since: float, serial: int) -> float | None:
        """The first "Sync-Running -> Established" in bird.log at or after ``since``.

        BIRD logs no serial there; the caller picks ``since`` (start, or the publish time).
        """
        text = (self.run_dir / "bird.log").read_text(errors="replace")
        for stamp in SYNCED.findall(text):
            when = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f").timestamp()
            if when >= since:
                return when
        return None
