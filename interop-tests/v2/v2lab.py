"""RTR v2 / ASPA interop lab: BIRD 2.17 and OpenBGPD 8.8 from a Debian 13 chroot, expected sets."""

from __future__ import annotations

import bz2
import ctypes
import gzip
import importlib
import ipaddress
import itertools
import json
import lzma
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple, Protocol

HERE = Path(__file__).resolve().parent
INTEROP = HERE.parent
# interop-tests is not a package: make its launcher module importable from this folder.
if str(INTEROP) not in sys.path:
    sys.path.insert(0, str(INTEROP))
_rtrserve = importlib.import_module("rtrserve")


class RtrServer(Protocol):
    """What the tests use of rtrserve.RtrServe (imported dynamically, so typed here)."""

    port: int
    log_path: Path
    proc: subprocess.Popen[bytes]

    @property
    def log(self) -> str:
        """Everything logged so far."""

    def wait_log(self, pattern: str, timeout: float, *, count: int = 1) -> None:
        """Wait until ``pattern`` occurs ``count`` times in the log."""


start_rtr_serve: Callable[..., AbstractContextManager[RtrServer]] = _rtrserve.start_rtr_serve
write_export: Callable[..., None] = _rtrserve.write_export
free_port: Callable[[], int] = _rtrserve.free_port
restart_in_place: Callable[[RtrServer], tuple[float, int]] = _rtrserve.restart_in_place
REAL_TABLE: Path = _rtrserve.REAL_TABLE
REAL_REFERENCE_TIME: str = _rtrserve.REAL_REFERENCE_TIME

CACHE = INTEROP / ".cache"
ROOT = Path(os.environ.get("INTEROP_V2_ROOT", CACHE / "trixie-root")).resolve()
SETUP_HINT = "run `bash .ci/interop-v2-setup.sh` (as root) first"
#: Longest UNIX socket path (sun_path is 108 octets including the NUL).
MAX_SOCKET_PATH = 100
#: The chroot's /tmp: each daemon's control socket lives in a private directory made there.
SOCKET_PARENT_INSIDE = "/tmp"

#: AS numbers of the lab routers; chosen outside every ASPA and VRP set the tests use.
OPENBGPD_AS = 64500
FEED_AS = 65001
#: OpenBGPD's BGP neighbor (BIRD feeding probe routes) binds this loopback address.
FEED_ADDR = "127.0.0.2"
#: Probe routes for ASPA checks come from this range (never used as traffic).
PROBE_NET = ipaddress.IPv4Network("198.18.0.0/15")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Vrp(NamedTuple):
    """One Validated ROA Payload as RTR carries it (the address as an integer: fast to compare)."""

    version: int
    addr: int
    length: int
    max_length: int
    asn: int

    @classmethod
    def parse(cls, prefix: str, max_length: int, asn: int) -> Vrp:
        """From ``ADDR/LEN`` text; ValueError for a malformed prefix or one with host bits."""
        addr, _, length = prefix.partition("/")
        version = 6 if ":" in addr else 4
        bits = 128 if version == 6 else 32
        family = socket.AF_INET6 if version == 6 else socket.AF_INET
        value = int.from_bytes(socket.inet_pton(family, addr), "big")
        plen = int(length)
        if not 0 <= plen <= bits or value & ((1 << (bits - plen)) - 1):
            raise ValueError(f"bad prefix {prefix!r}")
        return cls(version, value, plen, max_length, asn)

    @property
    def network(self) -> Network:
        """The prefix as an ipaddress network."""
        if self.version == 4:
            return ipaddress.IPv4Network((self.addr, self.length))
        return ipaddress.IPv6Network((self.addr, self.length))

    @property
    def text(self) -> str:
        """``PREFIX-MAXLEN ASn``, as BIRD shows it."""
        return f"{self.network}-{self.max_length} AS{self.asn}"


Aspas = Mapping[int, tuple[int, ...]]


@dataclass(frozen=True)
class Payload:
    """What a router should hold after a full sync: VRPs and merged ASPAs."""

    vrps: frozenset[Vrp]
    aspas: Aspas

    def count(self, version: int) -> int:
        """Number of VRPs of one IP version."""
        return sum(1 for v in self.vrps if v.version == version)

    def distinct_prefixes(self, version: int) -> int:
        """Distinct prefixes of one IP version (what OpenBGPD's `show sets` counts)."""
        return len({(v.addr, v.length) for v in self.vrps if v.version == version})


# ----------------------------------------------------------------------------- expected data


def parse_time(value: str) -> float:
    """ISO 8601 UTC (``2025-07-20T09:31:33Z``) to a Unix time."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC).timestamp()


def _open_json(path: Path) -> Any:
    data = path.read_bytes()
    if path.suffix == ".bz2":
        data = bz2.decompress(data)
    elif path.suffix == ".gz":
        data = gzip.decompress(data)
    elif path.suffix == ".xz":
        data = lzma.decompress(data)
    return json.loads(data)


def merge_aspas(entries: Iterable[tuple[int, Iterable[int]]]) -> dict[int, tuple[int, ...]]:
    """Union of providers per customer, sorted; AS0 dropped when the customer has others."""
    union: dict[int, set[int]] = defaultdict(set)
    for customer, providers in entries:
        union[customer].update(providers)
    merged = {}
    for customer, providers in union.items():
        if len(providers) > 1:
            providers.discard(0)
        merged[customer] = tuple(sorted(providers))
    return merged


def load_export(path: Path, reference_time: str | None = None) -> Payload:
    """Expected payload of an rpki-client JSON export, computed with the standard library only.

    Entries whose ``expires`` lies at or before the reference time (default: now) are left out.
    """
    doc = _open_json(path)
    now = parse_time(reference_time) if reference_time else time.time()

    def live(entry: Mapping[str, Any]) -> bool:
        expires = entry.get("expires")
        return expires is None or int(expires) > now

    vrps = frozenset(
        Vrp.parse(r["prefix"], int(r["maxLength"]), _asn(r["asn"]))
        for r in doc.get("roas", [])
        if live(r)
    )
    aspas = merge_aspas(
        (_asn(a["customer_asid"]), [_asn(p) for p in a["providers"]])
        for a in doc.get("aspas", [])
        if live(a)
    )
    return Payload(vrps, aspas)


def _asn(value: object) -> int:
    text = str(value)
    return int(text[2:] if text.upper().startswith("AS") else text)


# ----------------------------------------------------------------------------- probe routes


@dataclass(frozen=True)
class Probe:
    """A BGP route BIRD sends to OpenBGPD so that OpenBGPD's ASPA/ROA state becomes visible.

    ``path`` is the AS path BIRD puts on the route; BIRD prepends FEED_AS when it sends it.
    """

    prefix: ipaddress.IPv4Network
    path: tuple[int, ...]
    kind: str

    @property
    def seen_path(self) -> tuple[int, ...]:
        """The AS path as OpenBGPD receives it (neighbor first, origin last)."""
        return (FEED_AS, *self.path)


def upstream_state(aspas: Aspas, seen_path: Sequence[int]) -> str:
    """ASPA upstream verification (8210bis/aspa-verification) of a path from a customer."""
    hops = list(reversed(seen_path))  # origin first
    results = []
    for customer, provider in itertools.pairwise(hops):
        if customer == provider:
            continue  # prepending
        providers = aspas.get(customer)
        if providers is None:
            results.append("no-attestation")
        elif provider in providers:
            results.append("provider")
        else:
            results.append("not-provider")
    if "not-provider" in results:
        return "invalid"
    if "no-attestation" in results:
        return "unknown"
    return "valid"


class RoaIndex:
    """VRPs by prefix, for route origin validation of probe routes (RFC 6811)."""

    def __init__(self, vrps: Iterable[Vrp]) -> None:
        """Index the VRPs."""
        self.by_prefix: dict[tuple[int, int, int], list[tuple[int, int]]] = defaultdict(list)
        for v in vrps:
            self.by_prefix[v.version, v.addr, v.length].append((v.max_length, v.asn))

    def state(self, prefix: Network, origin: int) -> str:
        """``valid``, ``invalid`` or ``not-found`` (OpenBGPD's spelling)."""
        bits = prefix.max_prefixlen
        addr = int(prefix.network_address)
        covered = False
        for length in range(prefix.prefixlen, -1, -1):
            key = (prefix.version, addr >> (bits - length) << (bits - length), length)
            for max_length, asn in self.by_prefix.get(key, ()):
                covered = True
                if prefix.prefixlen <= max_length and asn == origin and asn != 0:
                    return "valid"
        return "invalid" if covered else "not-found"


def make_probes(
    aspa_sets: Sequence[Aspas], vrp_samples: Iterable[Vrp], *, outsider: int = 64999
) -> list[Probe]:
    """Probe routes covering every customer/provider pair of the ASPA sets and the sampled VRPs.

    For each customer C of any set: path (p, C) for every provider p (≠ 0) of C in any set, and
    (outsider, C). For each sampled IPv4 VRP (P, m, a): P from a; a more specific than m from a;
    and, inside P where there is room, a route from ``outsider``. Prefixes are unique.
    """
    probes: list[Probe] = []
    used: set[Network] = set()
    slots = PROBE_NET.subnets(new_prefix=26)
    customers = sorted({c for aspas in aspa_sets for c in aspas})
    for customer in customers:
        providers = sorted({p for aspas in aspa_sets for p in aspas.get(customer, ()) if p})
        for provider in [*providers, outsider]:
            prefix = next(slots)
            used.add(prefix)
            kind = "aspa-outsider" if provider == outsider else "aspa-provider"
            probes.append(Probe(prefix, (provider, customer), kind))

    def add(prefix: Network, origin: int, kind: str) -> None:
        if isinstance(prefix, ipaddress.IPv4Network) and prefix not in used:
            used.add(prefix)
            probes.append(Probe(prefix, (origin,), kind))

    for v in vrp_samples:
        net = v.network
        # AS0 cannot be an origin in BGP (RFC 7607: OpenBGPD withdraws such a path).
        if net.version != 4 or net.subnet_of(PROBE_NET) or v.asn == 0:
            continue
        add(net, v.asn, "roa-exact")
        if v.max_length < 32:
            add(next(net.subnets(new_prefix=v.max_length + 1)), v.asn, "roa-too-specific")
        if v.max_length > net.prefixlen:
            last = list(net.subnets(new_prefix=net.prefixlen + 1))[-1]
            add(last, outsider, "roa-other-origin")
    return probes


def expected_probe_states(
    probes: Iterable[Probe], payload: Payload, index: RoaIndex | None = None
) -> dict[str, tuple[str, str]]:
    """Prefix → (ovs, avs) that OpenBGPD must show when it holds ``payload``."""
    index = index or RoaIndex(payload.vrps)
    return {
        str(p.prefix): (
            index.state(p.prefix, p.path[-1]),
            upstream_state(payload.aspas, p.seen_path),
        )
        for p in probes
    }


def sample_vrps(vrps: Iterable[Vrp], count: int) -> list[Vrp]:
    """A deterministic spread of ``count`` IPv4 VRPs."""
    v4 = sorted(v for v in vrps if v.version == 4)
    step = max(1, len(v4) // count)
    return v4[::step][:count]


# ----------------------------------------------------------------------------- processes


def check_chroot() -> str:
    """Versions of BIRD and OpenBGPD in the chroot; RuntimeError with a hint when unusable."""
    if not (ROOT / "usr/sbin/bird").exists() or not (ROOT / "usr/sbin/bgpd").exists():
        raise RuntimeError(f"no Debian 13 chroot with BIRD and OpenBGPD at {ROOT}: {SETUP_HINT}")
    bird = run_in_chroot(["bird", "--version"]).strip()
    bgpd = run_in_chroot(["bgpd", "-V"]).strip()
    if not re.match(r"BIRD version 2\.17\.", bird) or not bgpd.startswith("OpenBGPD 8.8"):
        raise RuntimeError(f"unexpected daemon versions in {ROOT}: {bird!r}, {bgpd!r}")
    return f"{bird}; {bgpd}"


class CommandFailedError(RuntimeError):
    """A command in the chroot failed (e.g. a control socket not there yet): worth a retry."""


class DaemonDiedError(RuntimeError):
    """A daemon of the lab exited: no retry helps."""


def run_in_chroot(args: Sequence[str], timeout: float = 60.0) -> str:
    """Run a command inside the chroot; its stdout+stderr (CommandFailedError on failure)."""
    try:
        done = subprocess.run(
            ["chroot", str(ROOT), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise CommandFailedError(f"{' '.join(args)} took more than {timeout:.0f} s") from exc
    if done.returncode != 0:
        raise CommandFailedError(
            f"{' '.join(args)} exited {done.returncode}: {done.stdout}{done.stderr}"
        )
    return done.stdout + done.stderr


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process dies (PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def descendants(pid: int) -> set[int]:
    """All living descendants of a process."""
    parents: dict[int, list[int]] = defaultdict(list)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (ppid := _ppid(int(entry.name))) is not None:
            parents[ppid].append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def chroot_processes() -> dict[int, str]:
    """PID → command line of every process whose root directory is the lab chroot."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            root = str((entry / "root").readlink())
            # OpenBGPD's children chroot further, into /run/openbgpd of the lab chroot.
            if root != str(ROOT) and not root.startswith(f"{ROOT}/"):
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        found[int(entry.name)] = cmdline
    return found


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat from the state on (field 3 first); None if there is no such PID."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks: with the PID, it names one process for good."""
    fields = _stat(pid)
    return fields[19] if fields else None


def alive(pid: int, started: str | None = None) -> bool:
    """The process exists, is not a zombie and (if given) started at ``started``.

    The start time guards against PID reuse: a signal never goes to a stranger.
    """
    fields = _stat(pid)
    if not fields or fields[0] == "Z":
        return False
    return started is None or fields[19] == started


def kill_pid(pid: int, sig: int, started: str | None = None) -> None:
    """Send a signal to one PID if it is (still) that process; one gone already is fine."""
    if alive(pid, started):
        with suppress(ProcessLookupError):
            os.kill(pid, sig)


def wait_gone(procs: Mapping[int, str | None], timeout: float) -> dict[int, str | None]:
    """Wait until none of ``procs`` (PID → start time) is alive; those still alive after it."""
    pending = dict(procs)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        pending = {p: t for p, t in pending.items() if alive(p, t)}
        if pending:
            time.sleep(0.1)
    return {p: t for p, t in pending.items() if alive(p, t)}


def tcp_local_ports(pids: Iterable[int], remote_port: int) -> set[int]:
    """Local ports of the established TCP connections to ``remote_port`` owned by ``pids``."""
    inodes: set[str] = set()
    for pid in pids:
        with suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with suppress(OSError):
                    target = str(fd.readlink())
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
                established = state == "01"
                if (
                    established
                    and inode in inodes
                    and int(remote.rsplit(":", 1)[1], 16) == remote_port
                ):
                    ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


def wait_for(
    predicate: Callable[[], bool],
    timeout: float,
    what: str,
    interval: float = 0.2,
    detail: Callable[[], str] | None = None,
) -> float:
    """Poll until ``predicate()``; the Unix time it first held. TimeoutError names ``what``.

    A CommandFailedError inside the predicate counts as "not yet" (a daemon still starting up).
    """
    deadline = time.monotonic() + timeout
    last_error = ""
    while True:
        try:
            if predicate():
                return time.time()
        except CommandFailedError as exc:
            last_error = f"\nlast command error: {exc}"
        if time.monotonic() > deadline:
            extra = f"\n{detail()}" if detail else ""
            raise TimeoutError(
                f"timed out after {timeout:.0f} s waiting for {what}{last_error}{extra}"
            )
        time.sleep(interval)


class LabDir:
    """A per-run folder inside the chroot (/lab/NAME there, ROOT/lab/NAME here)."""

    def __init__(self, name: str) -> None:
        """Create it empty."""
        self.inside = f"/lab/{name}"
        self.host = ROOT / "lab" / name
        self.host.mkdir(parents=True, exist_ok=True)

    def path(self, name: str) -> tuple[str, Path]:
        """A file of the folder, as the chroot and as the host see it."""
        return f"{self.inside}/{name}", self.host / name


class Daemon:
    """A daemon run in the foreground under chroot, stopped by its PID (never by name).

    Config and logs go to the lab folder (kept); the control socket goes to a private directory
    /tmp/rtr-NAME-XXXXXXXX of the chroot, made by `start` and removed by `stop`, so its path
    (as the daemon sees it, inside the chroot) depends neither on the checkout nor on the test.
    """

    name = "daemon"

    def __init__(self, lab: LabDir) -> None:
        """Prepare (nothing runs yet)."""
        self.lab = lab
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        #: PID → start time of the daemon and every child seen (see `alive`).
        self.procs: dict[int, str | None] = {}
        #: The private socket directory as the host sees it (None until `start`).
        self.socket_dir: Path | None = None

    def socket_path(self, name: str) -> str:
        """A socket of the private socket dir, as the chroot sees it (RuntimeError before start)."""
        if self.socket_dir is None:
            raise RuntimeError(f"{self.name} has no socket directory yet (not started)")
        path = f"{SOCKET_PARENT_INSIDE}/{self.socket_dir.name}/{name}"
        assert len(path) < MAX_SOCKET_PATH, f"socket path too long: {path}"
        return path

    def make_socket_dir(self) -> None:
        """A new private socket dir in the chroot's /tmp (mode 0700: the daemons run as root)."""
        parent = ROOT / SOCKET_PARENT_INSIDE.lstrip("/")
        self.socket_dir = Path(tempfile.mkdtemp(prefix=f"rtr-{self.name}-", dir=parent))

    def remove_socket_dir(self) -> None:
        """Remove the private socket dir (none made, or gone already, is fine)."""
        if self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)

    @property
    def pids(self) -> set[int]:
        """PIDs of the daemon and of the children seen so far."""
        return set(self.procs)

    def command(self) -> list[str]:
        """The argv inside the chroot."""
        raise NotImplementedError

    def write_config(self) -> None:
        """Write the config file(s) into the lab folder."""
        raise NotImplementedError

    @property
    def output_path(self) -> Path:
        """Where the daemon's stdout/stderr go."""
        return self.lab.host / f"{self.name}.out"

    def start(self) -> None:
        """Make the socket dir, write the config and start the daemon."""
        self.make_socket_dir()
        self.write_config()
        with self.output_path.open("wb") as out:
            self.proc = subprocess.Popen(
                ["chroot", str(ROOT), *self.command()],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - single-threaded test process
            )
        self.started_at = time.time()
        self.procs = {self.proc.pid: start_time(self.proc.pid)}

    def check_running(self) -> None:
        """Raise with the daemon's output if it has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise DaemonDiedError(
                f"{self.name} exited with {self.proc.returncode}:\n{self.output_tail()}"
            )

    def output_tail(self, lines: int = 40) -> str:
        """Last lines of what the daemon printed."""
        try:
            text = self.output_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def track_children(self) -> None:
        """Remember the daemon's child processes (to check they are gone after stop)."""
        if self.proc is not None and self.proc.poll() is None:
            for pid in descendants(self.proc.pid) - set(self.procs):
                self.procs[pid] = start_time(pid)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM by PID, wait; SIGKILL what is left of its process tree; remove its sockets."""
        try:
            self.stop_processes(timeout)
        finally:
            self.remove_socket_dir()

    def stop_processes(self, timeout: float) -> None:
        """SIGTERM by PID, wait; SIGKILL whatever of its process tree is left."""
        if self.proc is None:
            return
        self.track_children()
        if self.proc.poll() is None:
            kill_pid(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                kill_pid(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        left = wait_gone(self.procs, 5.0)
        for pid, started in left.items():
            kill_pid(pid, signal.SIGKILL, started)
        wait_gone(left, 5.0)

    def all_gone(self) -> bool:
        """Neither the daemon nor any child seen is still running."""
        return not any(alive(pid, started) for pid, started in self.procs.items())


class Bird(Daemon):
    """BIRD 2.17 with roa4/roa6/aspa tables fed over RTR, and a BGP feed of probe routes."""

    name = "bird"

    def __init__(
        self,
        lab: LabDir,
        rtr_port: int,
        probes: Sequence[Probe] = (),
        openbgpd_port: int | None = None,
    ) -> None:
        """Configure against rtr-serve on 127.0.0.1:rtr_port."""
        super().__init__(lab)
        self.rtr_port = rtr_port
        self.probes = probes
        self.openbgpd_port = openbgpd_port
        self.conf, self.conf_host = lab.path("bird.conf")
        self.pidfile, self.pidfile_host = lab.path("bird.pid")
        self.logfile, self.log_host = lab.path("bird.log")

    @property
    def ctl(self) -> str:
        """The control socket, as the chroot sees it."""
        return self.socket_path("bird.ctl")

    def write_config(self) -> None:
        """bird.conf: the RPKI protocol, and static probes exported over BGP to OpenBGPD."""
        lines = [
            f'log "{self.logfile}" all;',
            "router id 192.0.2.2;",
            "roa4 table r4;",
            "roa6 table r6;",
            "aspa table at;",
            "protocol device {}",
            "protocol rpki rtr1 {",
            "  roa4 { table r4; };",
            "  roa6 { table r6; };",
            "  aspa { table at; };",
            f"  remote 127.0.0.1 port {self.rtr_port};",
            "  transport tcp;",
            # Initial values until the first End of Data; then the cache's timers apply.
            "  retry 5;",
            "}",
        ]
        if self.probes and self.openbgpd_port:
            lines += ["protocol static probes {", "  ipv4 { table master4; };"]
            for probe in self.probes:
                prepend = " ".join(f"bgp_path.prepend({asn});" for asn in reversed(probe.path))
                lines.append(f"  route {probe.prefix} blackhole {{ {prepend} }};")
            lines += [
                "}",
                "protocol bgp feed {",
                f"  local {FEED_ADDR} port {free_port()} as {FEED_AS};",
                f"  neighbor 127.0.0.1 port {self.openbgpd_port} as {OPENBGPD_AS};",
                "  local role customer;",
                "  multihop;",
                "  connect delay time 1;",
                "  connect retry time 2;",
                "  error wait time 1, 4;",
                '  ipv4 { import none; next hop self; export where proto = "probes"; };',
                "}",
            ]
        self.conf_host.write_text("\n".join(lines) + "\n")
        run_in_chroot(["bird", "-p", "-c", self.conf])

    def command(self) -> list[str]:
        """Foreground, private control socket and PID file."""
        return ["bird", "-f", "-c", self.conf, "-s", self.ctl, "-P", self.pidfile]

    def start(self) -> None:
        """Start and check the PID file names the process we started."""
        super().start()
        assert self.proc is not None
        wait_for(
            lambda: self.pidfile_host.exists() or self.proc is None or self.proc.poll() is not None,
            20,
            "bird.pid",
            0.05,
        )
        self.check_running()
        wait_for(lambda: self.pidfile_host.read_text().strip() != "", 5, "bird.pid content", 0.05)
        pid = int(self.pidfile_host.read_text().strip())
        if pid != self.proc.pid:
            raise RuntimeError(f"bird.pid says {pid}, started {self.proc.pid}")
        wait_for(lambda: bool(self.cli("show", "status")), 20, "birdc to answer", 0.1)

    def cli(self, *args: str, timeout: float = 60.0) -> str:
        """Run one birdc command."""
        self.check_running()
        return run_in_chroot(["birdc", "-s", self.ctl, *args], timeout=timeout)

    def rtr_status(self) -> dict[str, str]:
        """`show protocols all rtr1` as key → value (Status, Protocol version, Serial number…)."""
        out = self.cli("show", "protocols", "all", "rtr1")
        status: dict[str, str] = {}
        for line in out.splitlines():
            key, sep, value = line.strip().partition(":")
            if sep and key and not key[0].isdigit():
                status.setdefault(key.strip(), value.strip())
        return status

    def route_count(self, table: str) -> int:
        """Routes in one table (`show route table T count`)."""
        out = self.cli("show", "route", "table", table, "count")
        match = re.search(r"(\d+) of \d+ routes", out)
        return int(match.group(1)) if match else 0

    def vrps(self) -> set[Vrp]:
        """Every VRP of r4 and r6."""
        found = set()
        pattern = re.compile(r"^(\S+)-(\d+) AS(\d+)\s", re.MULTILINE)
        for table in ("r4", "r6"):
            for prefix, max_length, asn in pattern.findall(
                self.cli("show", "route", "table", table)
            ):
                found.add(Vrp.parse(prefix, int(max_length), int(asn)))
        return found

    def aspas(self) -> dict[int, tuple[int, ...]]:
        """The ASPA table: customer → providers (as BIRD lists them; -1 where BIRD truncated)."""
        out = self.cli("show", "route", "table", "at", "all")
        found: dict[int, tuple[int, ...]] = {}
        customer = None
        for line in out.splitlines():
            if match := re.match(r"^(\d+)\s+\[", line):
                customer = int(match.group(1))
                found[customer] = ()
            elif customer is not None and (match := re.match(r"^\s+aspa_providers:(.*)$", line)):
                # BIRD cuts a long list short with "..." (then it cannot be compared: -1 marks it).
                found[customer] = tuple(
                    int(a) if a.isdigit() else -1 for a in match.group(1).split()
                )
        return found

    def rtr_errors(self) -> list[str]:
        """Error lines of the RTR protocol in BIRD's log."""
        try:
            text = self.log_host.read_text(errors="replace")
        except OSError:
            return []
        return [ln for ln in text.splitlines() if "rtr1" in ln and ("<ERR>" in ln or "rror" in ln)]


class OpenBgpd(Daemon):
    """OpenBGPD 8.8 with one RTR session (min-version 2) and a passive BGP neighbor (BIRD)."""

    name = "openbgpd"

    def __init__(self, lab: LabDir, rtr_port: int, bgp_port: int) -> None:
        """Configure against rtr-serve on 127.0.0.1:rtr_port; BGP listener on bgp_port."""
        super().__init__(lab)
        self.rtr_port = rtr_port
        self.bgp_port = bgp_port
        self.conf, self.conf_host = lab.path("bgpd.conf")

    @property
    def sock(self) -> str:
        """The control socket, as the chroot sees it."""
        return self.socket_path("bgpd.sock")

    def write_config(self) -> None:
        """bgpd.conf; checked with `bgpd -n`."""
        self.conf_host.write_text(
            f"AS {OPENBGPD_AS}\n"
            "router-id 192.0.2.1\n"
            f"listen on 127.0.0.1 port {self.bgp_port}\n"
            "fib-update no\n"
            f'socket "{self.sock}"\n'
            "rtr 127.0.0.1 {\n"
            '\tdescr "rtr-serve"\n'
            f"\tport {self.rtr_port}\n"
            "\tmin-version 2\n"
            "}\n"
            f"neighbor {FEED_ADDR} {{\n"
            f"\tremote-as {FEED_AS}\n"
            '\tdescr "feed"\n'
            "\tpassive\n"
            "\trole provider\n"
            "}\n"
            "allow from any\n"
        )
        run_in_chroot(["bgpd", "-n", "-f", self.conf])

    def command(self) -> list[str]:
        """Foreground (-d), verbose, logging to stderr."""
        return ["bgpd", "-d", "-v", "-f", self.conf]

    def start(self) -> None:
        """Start; wait until bgpctl answers on the control socket."""
        super().start()
        wait_for(lambda: self.ctl("show", "rtr") is not None, 20, "bgpctl to answer", 0.1)
        self.track_children()

    @property
    def log(self) -> str:
        """What bgpd logged so far."""
        return self.output_path.read_text(errors="replace")

    def ctl(self, *args: str, timeout: float = 60.0) -> Any:
        """One `bgpctl -j` command, parsed."""
        self.check_running()
        out = run_in_chroot(["bgpctl", "-j", "-s", self.sock, *args], timeout=timeout)
        return json.loads(out) if out.strip() else {}

    def ctl_text(self, *args: str) -> str:
        """One `bgpctl` command, as text."""
        self.check_running()
        return run_in_chroot(["bgpctl", "-s", self.sock, *args])

    def rtr(self) -> dict[str, Any]:
        """The one RTR session of `show rtr`."""
        sessions = self.ctl("show", "rtr").get("rtrs", [])
        return dict(sessions[0]) if sessions else {}

    def sets(self) -> dict[str, dict[str, Any]]:
        """`show sets` by type (ROA, ASPA)."""
        return {s["type"]: s for s in self.ctl("show", "sets").get("sets", [])}

    def probe_states(self) -> dict[str, tuple[str, str]]:
        """Prefix → (ovs, avs) of the routes received from the BGP feed."""
        rib = self.ctl("show", "rib", "in", "neighbor", FEED_ADDR).get("rib", [])
        return {r["prefix"]: (r["ovs"], r["avs"]) for r in rib}

    def rtr_errors(self) -> list[str]:
        """RTR error lines in bgpd's log."""
        return [
            ln
            for ln in self.log.splitlines()
            if ln.startswith("rtr ") and re.search(r"error|unexpected|bad|too big", ln, re.I)
        ]


# ----------------------------------------------------------------------------- rtr-serve log


LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z ")


def log_time(line: str) -> float:
    """Unix time of a log line (RFC 3339 UTC, as rtr-serve's text format writes it)."""
    match = LOG_TIME.match(line)
    if not match:
        raise ValueError(f"no timestamp: {line!r}")
    return datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC).timestamp()


def published_at(log: str, serial: int) -> float:
    """When rtr-serve logged ``published serial N``."""
    for line in log.splitlines():
        if re.search(rf"published serial {serial}\b", line):
            return log_time(line)
    raise LookupError(f"serial {serial} not published")


def queries_by_port(log: str) -> dict[int, list[str]]:
    """The reset/serial query lines of rtr-serve's log, by router port."""
    found: dict[int, list[str]] = defaultdict(list)
    for match in re.finditer(r"router 127\.0\.0\.1:(\d+): ((?:reset|serial) query .*)$", log, re.M):
        found[int(match.group(1))].append(match.group(2))
    return found
