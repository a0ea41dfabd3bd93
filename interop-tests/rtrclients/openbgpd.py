"""OpenBGPD 7.7 (openbgpd): RTR v1 only, read with `bgpctl -j show sets|rtr`."""

from __future__ import annotations

import json
import time
from typing import Any

from rtrclients import procs
from rtrclients.base import Client
from rtrclients.vrps import RouterKey, Vrp

CONFIG = """\
AS 64513
router-id 192.0.2.251
listen on 127.0.0.1 port {bgp_port}
fib-update no
socket "{sock}"

rtr {host} {{
    descr "rtr-serve"
    port {port}
}}
"""


class OpenBgpd(Client):
    """OpenBGPD in the foreground (-d -v): privsep parent plus RDE, SE and RTR children.

    Needs root, the user _openbgpd and /run/openbgpd (.ci/interop-setup.sh). Its BGP
    listener cannot be turned off, so it listens on a free loopback port.
    """

    name = "openbgpd"
    label = "OpenBGPD 7.7 (openbgpd)"
    expected_version = 1
    count_basis = "prefixes"
    lists_vrps = False

    def start(self) -> None:
        """Check the config (bgpd -n), start bgpd -d, wait for its control socket."""
        run = self.run_dir
        conf = run / "bgpd.conf"
        bgp_port = procs.free_port()
        sock = self.socket_path("bgpd.sock")
        conf.write_text(CONFIG.format(sock=sock, host=self.host, port=self.port, bgp_port=bgp_port))
        conf.chmod(0o600)
        procs.run(["bgpd", "-n", "-f", str(conf)])
        self.started_at = time.time()
        self.tracked = procs.spawn(
            self.name,
            ["bgpd", "-d", "-v", "-f", str(conf)],
            log=run / "bgpd.log",
            pidfile=run / "bgpd.pid",
            comm="bgpd",
        )
        procs.wait_for(sock.exists, 20, "OpenBGPD control socket")

    def bgpctl(self, *args: str) -> Any:
        """One `bgpctl -j` command, parsed."""
        out = procs.run(["bgpctl", "-s", str(self.socket_file("bgpd.sock")), "-j", *args])
        return json.loads(out)

    def rtr(self) -> dict[str, Any]:
        """The RTR session from `show rtr` (session_id, serial, timers, errors)."""
        rtrs = self.bgpctl("show", "rtr").get("rtrs") or [{}]
        return dict(rtrs[0])

    def counts(self) -> tuple[int, int]:
        """Distinct IPv4/IPv6 prefixes of the "RPKI ROA" set."""
        for entry in self.bgpctl("show", "sets").get("sets", []):
            if entry.get("type") == "ROA":
                return int(entry["num_IPv4"]), int(entry["num_IPv6"])
        raise RuntimeError("no ROA set yet")

    def vrps(self) -> set[Vrp]:
        """OpenBGPD 7.7 cannot list its ROA set."""
        raise NotImplementedError

    def router_keys(self) -> set[RouterKey]:
        """OpenBGPD 7.7 keeps no router keys."""
        raise NotImplementedError

    def status(self) -> str:
        """Session, serial, timers and last errors from `show rtr`."""
        try:
            r = self.rtr()
        except (RuntimeError, OSError, ValueError) as exc:
            return f"bgpctl failed: {exc}"
        timers = ",".join(t.get("name", "?") for t in r.get("timers", []))
        errors = {k: v for k, v in r.items() if "error" in k}
        return f"session={r.get('session_id')} serial={r.get('serial')} timers={timers} {errors}"

    def serial(self) -> int | None:
        """The serial of `show rtr` (may lag the `show sets` counts by a moment, G4)."""
        value = self.rtr().get("serial")
        return int(value) if isinstance(value, int) else None

    def notifies_received(self) -> int:
        """bgpd -v logs "serial notify received" (its Serial Query follows 0-9 s later)."""
        text = (self.run_dir / "bgpd.log").read_text(errors="replace")
        return text.count("reason: serial notify received")
