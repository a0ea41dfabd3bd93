"""FRR 8.4 bgpd with the rpki module (frr-rpki-rtrlib, RTRlib 0.8), read with vtysh."""

from __future__ import annotations

import json
import re
import time

from rtrclients import procs, rtrlib
from rtrclients.base import Client
from rtrclients.vrps import RouterKey, Vrp, vrp

BGPD = "/usr/lib/frr/bgpd"

CONFIG = """\
frr defaults traditional
hostname interop-frr
log file {run}/bgpd.log informational
!
rpki
 rpki polling_period 30
 rpki retry_interval 5
 rpki cache {host} {port} preference 1
exit
!
router bgp 64511
 bgp router-id 192.0.2.253
 no bgp default ipv4-unicast
exit
!
"""

COUNT = re.compile(r"Number of IPv([46]) Prefixes:\s*(\d+)")


class Frr(Client):
    """FRR bgpd alone (no zebra, no BGP listener, no privilege drop) as an RTR client."""

    name = "frr"
    label = "FRR 8.4.4 bgpd + rpki (RTRlib 0.8)"
    expected_version = 1
    logs_syncs = True  # RTRlib's trace; `show rpki prefix-table` is too heavy to poll

    def config(self) -> str:
        """bgpd.conf (a subclass may change the cache line)."""
        return CONFIG.format(run=self.run_dir, host=self.host, port=self.port)

    def start(self) -> None:
        """Start bgpd in the foreground; RTRlib's trace goes to bgpd.stderr."""
        run = self.run_dir
        conf = run / "bgpd.conf"
        conf.write_text(self.config())
        vty = self.socket_path("bgpd.vty")
        # No `bgpd -C` dry run: with an rpki cache configured it opens a real RTR session (G5).
        args = [BGPD, "-f", str(conf), "-M", "rpki", "-Z", "-S", "-p", "0", "-P", "0", "-n"]
        args += ["-i", str(run / "bgpd.pid"), "--vty_socket", str(vty.parent)]
        self.started_at = time.time()
        self.tracked = procs.spawn(
            self.name,
            args,
            log=run / "bgpd.stdout.log",
            stderr=run / "bgpd.stderr",
            pidfile=run / "bgpd.pid",
            comm="bgpd",
            own_pidfile=False,
        )
        procs.wait_for(vty.exists, 20, "FRR bgpd vty socket")

    def vtysh(self, command: str, timeout: float = 60.0) -> str:
        """Run one vtysh command against this bgpd."""
        return procs.run(
            ["vtysh", "--vty_socket", str(self.socket_file("bgpd.vty").parent), "-c", command],
            timeout=timeout,
        )

    def counts(self) -> tuple[int, int]:
        """The IPv4/IPv6 counts printed under `show rpki prefix-table`."""
        found = dict(COUNT.findall(self.vtysh("show rpki prefix-table")))
        if set(found) != {"4", "6"}:
            raise RuntimeError("no prefix counts (no connection yet?)")
        return int(found["4"]), int(found["6"])

    def vrps(self) -> set[Vrp]:
        """Every entry of `show rpki prefix-table json`."""
        doc = json.loads(self.vtysh("show rpki prefix-table json", timeout=180))
        return {
            vrp(p["prefix"], p["prefixLenMin"], p["prefixLenMax"], p["asn"])
            for p in doc.get("prefixes", [])
        }

    def router_keys(self) -> set[RouterKey]:
        """FRR 8.4 has no CLI view of the router keys."""
        raise NotImplementedError

    def status(self) -> str:
        """`show rpki cache-connection` (FRR shows no version, session or serial)."""
        try:
            text = self.vtysh("show rpki cache-connection")
        except (RuntimeError, OSError) as exc:
            return f"vtysh failed: {exc}"
        return " ".join(text.split())

    def serial(self) -> int | None:
        """SN of RTRlib's last "Sync successful"."""
        found = rtrlib.syncs(self.run_dir / "bgpd.stderr")
        return found[-1].serial if found else None

    def own_sync_time(self, since: float, serial: int) -> float | None:
        """RTRlib's "Sync successful ... SN: serial" in bgpd's stderr."""
        return rtrlib.first_sync(self.run_dir / "bgpd.stderr", since, serial)

    def notifies_received(self) -> int:
        """RTRlib's "Serial Notify received" lines."""
        return rtrlib.notifies(self.run_dir / "bgpd.stderr")

    def rtrlib_view(self) -> str:
        """Session and serial of the last sync (FRR's CLI shows neither)."""
        return rtrlib.last_sync(self.run_dir / "bgpd.stderr")
