"""GoBGP 3.10 (gobgpd): RTR v0 only, read with `gobgp rpki` over a private UNIX socket."""

from __future__ import annotations

import re
import time

from rtrclients import procs
from rtrclients.base import Client
from rtrclients.vrps import RouterKey, Vrp, vrp_from_prefix

CONFIG = """\
[global.config]
  as = 64512
  router-id = "192.0.2.252"
  port = -1    # no BGP listener

[[rpki-servers]]
  [rpki-servers.config]
    address = "{host}"
    port = {port}
"""

ROW = re.compile(r"^(\S+/\d+)\s+(\d+)\s+(\d+)\s+\S+$", re.MULTILINE)
RECORDS = re.compile(r"Record:\s*(\d+)/(\d+)")
NOTIFIES = re.compile(r"SerialNotify:\s*(\d+)")
SERIAL = re.compile(r"^\s*Serial:\s*(\d+)", re.MULTILINE)


class GoBgp(Client):
    """gobgpd with its gRPC API on a UNIX socket and pprof off (no TCP listener at all)."""

    name = "gobgp"
    label = "GoBGP 3.10.0 (gobgpd)"
    expected_version = 0

    def start(self) -> None:
        """Check the config, start gobgpd in the foreground, wait for its API socket."""
        run = self.run_dir
        conf = run / "gobgpd.toml"
        conf.write_text(CONFIG.format(host=self.host, port=self.port))
        sock = self.socket_path("gobgpd.sock")
        procs.run(["gobgpd", "-d", "-f", str(conf), "-t", "toml"])
        self.started_at = time.time()
        args = ["gobgpd", "-f", str(conf), "-t", "toml", "-l", "debug", "-p"]
        args += [f"--api-hosts=unix://{sock}", "--pprof-disable"]
        self.tracked = procs.spawn(
            self.name,
            args,
            log=run / "gobgpd.log",
            pidfile=run / "gobgpd.pid",
            comm="gobgpd",
        )
        procs.wait_for(sock.exists, 20, "gobgpd API socket")

    def gobgp(self, *args: str, timeout: float = 60.0) -> str:
        """Run one gobgp CLI command against this gobgpd."""
        target = f"unix://{self.socket_file('gobgpd.sock')}"
        return procs.run(["gobgp", "--target", target, *args], timeout=timeout)

    def server(self) -> str:
        """`gobgp rpki server ADDR`: state, serial, prefix and record counts, PDU statistics."""
        return self.gobgp("rpki", "server", self.host)

    def counts(self) -> tuple[int, int]:
        """The IPv4/IPv6 record counts of the RTR session."""
        match = RECORDS.search(self.server())
        if match is None:
            raise RuntimeError("no record counts yet")
        return int(match.group(1)), int(match.group(2))

    def vrps(self) -> set[Vrp]:
        """Every row of `gobgp rpki table` for both families."""
        held: set[Vrp] = set()
        for family in ("ipv4", "ipv6"):
            text = self.gobgp("rpki", "table", "-a", family, timeout=180)
            held.update(vrp_from_prefix(*m) for m in ROW.findall(text))
        return held

    def router_keys(self) -> set[RouterKey]:
        """GoBGP has no router keys (and at v0 must not be sent any)."""
        raise NotImplementedError

    def status(self) -> str:
        """The first lines of `gobgp rpki server ADDR`."""
        try:
            return " ".join(self.server().split()[:12])
        except (RuntimeError, OSError) as exc:
            return f"gobgp failed: {exc}"

    def serial(self) -> int | None:
        """ "Serial:" of `gobgp rpki server ADDR`."""
        match = SERIAL.search(self.server())
        return int(match.group(1)) if match else None

    def notifies_received(self) -> int:
        """The SerialNotify counter of `gobgp rpki server ADDR`."""
        match = NOTIFIES.search(self.server())
        if match is None:
            raise RuntimeError("no SerialNotify counter")
        return int(match.group(1))
