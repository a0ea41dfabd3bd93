"""The interface every long-running RTR client helper implements, and the wait for a set."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import ClassVar

from rtrclients import procs
from rtrclients.vrps import Expected, RouterKey, Vrp, diff

#: Longest UNIX socket path (sun_path is 108 octets including the NUL).
MAX_SOCKET_PATH = 100
#: Where the private socket directories are made: short and independent of the checkout.
SOCKET_PARENT = Path("/tmp")
#: Socket directories made and not yet removed (the session end removes any left over).
SOCKET_DIRS: set[Path] = set()


def private_socket_dir(name: str) -> Path:
    """A new empty directory /tmp/rtr-NAME-XXXXXXXX (mode 0700) for one daemon's sockets."""
    path = Path(tempfile.mkdtemp(prefix=f"rtr-{name}-", dir=SOCKET_PARENT))
    SOCKET_DIRS.add(path)
    return path


def remove_socket_dir(path: Path) -> None:
    """Remove a directory made by `private_socket_dir` (one already gone is fine)."""
    shutil.rmtree(path, ignore_errors=True)
    SOCKET_DIRS.discard(path)


class Client:
    """One RTR client instance talking to rtr-serve, in its own run directory.

    Configs, logs and PID files go to the run directory (below the checkout, kept for
    inspection); control sockets go to a private directory under /tmp made on first use and
    removed by `stop`, so no socket path depends on where the repository is checked out.
    """

    #: Short name used in test ids and the summary.
    name: ClassVar[str] = ""
    #: Package and version, for the summary.
    label: ClassVar[str] = ""
    #: The RTR version it must end up with against a v2-capable rtr-serve.
    expected_version: ClassVar[int] = 1
    #: "vrps": counts are (prefix, maxLength, ASN) triples; "prefixes": distinct prefixes.
    count_basis: ClassVar[str] = "vrps"
    #: Whether `vrps` can list the whole set.
    lists_vrps: ClassVar[bool] = True
    #: Whether `router_keys` can list the router keys it holds.
    lists_router_keys: ClassVar[bool] = False
    #: Whether the daemon's own log time-stamps each completed sync (else counts are polled).
    logs_syncs: ClassVar[bool] = False

    def __init__(self, run_dir: Path, host: str, port: int) -> None:
        """Prepare (nothing runs until `start`)."""
        self.run_dir = run_dir
        self.host = host
        self.port = port
        self.tracked: procs.Tracked | None = None
        self.started_at: float | None = None
        self.socket_dir: Path | None = None
        run_dir.mkdir(parents=True, exist_ok=True)

    def socket_path(self, name: str) -> Path:
        """A UNIX socket path for `start` (checked against the sun_path limit).

        The private socket dir is made here if there is none yet (or `stop` removed it).
        """
        if self.socket_dir is None or not self.socket_dir.is_dir():
            self.socket_dir = private_socket_dir(self.name)
        path = self.socket_dir / name
        assert len(str(path)) < MAX_SOCKET_PATH, f"socket path too long: {path}"
        return path

    def socket_file(self, name: str) -> Path:
        """The path of a socket `start` set up (makes nothing; RuntimeError before start)."""
        if self.socket_dir is None:
            raise RuntimeError(f"{self.name} has no control socket yet (not started)")
        return self.socket_dir / name

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Start the daemon; returns once its control interface answers."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop the daemon by its PID file (if it started), then remove its socket dir."""
        if self.tracked is not None:
            procs.stop(self.tracked)
        if self.socket_dir is not None:
            remove_socket_dir(self.socket_dir)

    def pids(self) -> list[int]:
        """The daemon's processes (any of them may own the RTR socket)."""
        pid = self.tracked.pid() if self.tracked is not None else None
        return procs.tree(pid) if pid is not None and procs.alive(pid) else []

    def running(self) -> bool:
        """True while the main process lives."""
        pid = self.tracked.pid() if self.tracked is not None else None
        return pid is not None and procs.alive(pid)

    def rtr_ports(self) -> set[int]:
        """Local ports of its current TCP connections to rtr-serve."""
        return procs.rtr_ports(self.pids(), self.port)

    def logs(self) -> list[Path]:
        """Files worth reading when something fails."""
        return sorted(p for p in self.run_dir.iterdir() if p.suffix in (".log", ".err", ".stderr"))

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of each log, for failure messages."""
        parts = []
        for path in self.logs():
            text = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path}\n" + "\n".join(text))
        return "\n".join(parts)

    # ---------------------------------------------------------------- what it holds
    def counts(self) -> tuple[int, int]:
        """(IPv4, IPv6) counts on `count_basis`."""
        raise NotImplementedError

    def vrps(self) -> set[Vrp]:
        """Every VRP it holds."""
        raise NotImplementedError

    def router_keys(self) -> set[RouterKey]:
        """Every router key it holds."""
        raise NotImplementedError

    def status(self) -> str:
        """A short readable view of its RTR session (for messages and the summary)."""
        return ""

    def serial(self) -> int | None:
        """The serial the daemon says it is at (None: it does not tell)."""
        return None

    def own_sync_time(self, since: float, serial: int) -> float | None:
        """When the daemon's own log says a sync to ``serial`` completed (None: not logged)."""
        return None

    def notifies_received(self) -> int | None:
        """Serial Notifies the daemon says it received (None: it does not tell)."""
        return None

    def target_counts(self, expected: Expected) -> tuple[int, int]:
        """The counts it shows when it holds ``expected``."""
        return expected.prefix_counts if self.count_basis == "prefixes" else expected.counts


def wait_holds(
    client: Client,
    expected: Expected,
    timeout: float,
    *,
    serial: int | None = None,
    interval: float = 0.5,
) -> float:
    """Wait until ``client`` holds exactly ``expected``; return the time it was first seen.

    The cheap counts are polled first; the full set (and router keys, where the client lists
    them) is compared once the counts match. With ``serial``, the daemon must also say it is
    at that serial where it tells (the only proof for OpenBGPD, which cannot list its set).
    """
    deadline = time.monotonic() + timeout
    target = client.target_counts(expected)
    last = "no answer yet"
    while True:
        now = time.time()
        try:
            got = client.counts()
            if got == target:
                problem = _compare(client, expected)
                at = client.serial() if serial is not None else None
                if problem is None and (serial is None or at is None or at == serial):
                    return now
                last = problem or f"counts and set match, serial {at} != {serial}"
            else:
                last = f"counts {got}, want {target}"
        except (RuntimeError, OSError, ValueError) as exc:  # CLI not ready, socket gone, ...
            last = f"{type(exc).__name__}: {exc}"
        if not client.running():
            raise AssertionError(f"{client.name} is no longer running\n{client.log_tail()}")
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{client.name} did not hold the expected set within {timeout:.0f} s: {last}\n"
                f"{client.status()}\n{client.log_tail()}"
            )
        time.sleep(interval)


def _compare(client: Client, expected: Expected) -> str | None:
    if client.lists_vrps:
        held = client.vrps()
        if held != expected.vrps:
            return diff(held, expected.vrps)
    if client.lists_router_keys:
        keys = client.router_keys()
        if keys != expected.router_keys:
            return f"router keys {sorted(keys)} != expected {sorted(expected.router_keys)}"
    return None
