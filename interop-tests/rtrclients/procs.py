"""Start daemons in private run dirs, stop them by PID file only, find their RTR sockets."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Every process the suite started, so the end of the session can prove none is left.
STARTED: list[Tracked] = []
#: util-linux setpriv: a daemon gets SIGTERM if the test process dies without cleaning up.
SETPRIV = shutil.which("setpriv")


def die_with_us(args: Sequence[str]) -> list[str]:
    """``args`` run so that the process gets SIGTERM when the test process dies (even -9)."""
    return [SETPRIV, "--pdeathsig", "TERM", "--", *args] if SETPRIV else list(args)


@dataclass
class Tracked:
    """One started process: its PID file, its expected /proc comm, its Popen (if ours)."""

    name: str
    pidfile: Path
    comm: str
    popen: subprocess.Popen[bytes] | None = None

    def pid(self) -> int | None:
        """The PID from the PID file (the Popen's PID until the daemon wrote its own)."""
        try:
            return int(self.pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return self.popen.pid if self.popen is not None else None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
    """Poll ``predicate()`` every 0.1 s until true; TimeoutError naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def run(args: Sequence[str], *, timeout: float = 30.0, check: bool = True) -> str:
    """Run a short command, return its stdout (text); raise with its output on failure."""
    done = subprocess.run(
        list(args),
        capture_output=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    out = done.stdout.decode(errors="replace")
    if check and done.returncode != 0:
        err = done.stderr.decode(errors="replace")
        raise RuntimeError(
            f"{' '.join(args)} exited {done.returncode}:\n{out[-2000:]}{err[-2000:]}"
        )
    return out


def spawn(
    name: str,
    args: Sequence[str],
    *,
    log: Path,
    pidfile: Path,
    comm: str,
    own_pidfile: bool = True,
    stderr: Path | None = None,
) -> Tracked:
    """Start a foreground daemon in its own session with output to ``log``.

    ``own_pidfile``: write the PID file ourselves (False when the daemon writes it itself).
    ``stderr``: a separate file for standard error (default: ``log`` too).
    """
    with log.open("ab") as out, (stderr or log).open("ab") as err:
        popen = subprocess.Popen(
            die_with_us(args),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            cwd=log.parent,
        )
    if own_pidfile:
        pidfile.write_text(f"{popen.pid}\n")
    tracked = Tracked(name, pidfile, comm, popen)
    STARTED.append(tracked)
    return tracked


def track(name: str, pidfile: Path, comm: str) -> Tracked:
    """Register a daemon that forked itself and wrote ``pidfile``."""
    tracked = Tracked(name, pidfile, comm)
    STARTED.append(tracked)
    return tracked


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a process, None if it does not exist."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def comm_of(pid: int) -> str | None:
    """The process name of ``pid`` (None if gone)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def descendants(pid: int) -> list[int]:
    """Every living descendant of ``pid``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                children.setdefault(stat[1], []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return [p for p in found if alive(p)]


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    return [pid, *descendants(pid)]


def stop(tracked: Tracked, timeout: float = 15.0) -> None:
    """SIGTERM the PID in the PID file (if it is still that daemon), wait, then SIGKILL.

    Descendants (OpenBGPD's privsep children) are waited for too. Never matches by name.
    """
    pid = tracked.pid()
    popen = tracked.popen
    if pid is None:
        return
    # Our own unreaped child cannot have had its PID reused; any other PID must still be the
    # daemon we started (same process name).
    ours = popen is not None and pid == popen.pid and popen.poll() is None
    if not ours and (comm_of(pid) != tracked.comm or not alive(pid)):
        _reap(popen)
        return
    family = tree(pid)
    _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in family):
        _reap(popen)
        time.sleep(0.1)
    for p in family:
        if alive(p):
            _signal(p, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(p) for p in family):
        _reap(popen)
        time.sleep(0.05)
    _reap(popen, wait=5.0)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _reap(popen: subprocess.Popen[bytes] | None, wait: float = 0.0) -> None:
    if popen is None:
        return
    try:
        popen.wait(wait) if wait else popen.poll()
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait(5)


def leftovers() -> list[str]:
    """Started processes (and their children) that are still running."""
    left = []
    for tracked in STARTED:
        pid = tracked.pid()
        if pid is not None and alive(pid) and comm_of(pid) == tracked.comm:
            left.append(f"{tracked.name} pid {pid}")
    return left


def _tcp_sockets(remote_port: int) -> dict[int, int]:
    """inode -> local port of ESTABLISHED TCP sockets whose remote port is ``remote_port``."""
    found: dict[int, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            local, remote, state, inode = cols[1], cols[2], cols[3], int(cols[9])
            if state == "01" and int(remote.rsplit(":", 1)[1], 16) == remote_port:
                found[inode] = int(local.rsplit(":", 1)[1], 16)
    return found


def rtr_ports(pids: Iterable[int], server_port: int) -> set[int]:
    """Local ports of the established connections from these processes to ``server_port``."""
    sockets = _tcp_sockets(server_port)
    ports: set[int] = set()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = str(fd.readlink())
            except OSError:
                continue
            if target.startswith("socket:["):
                inode = int(target[8:-1])
                if inode in sockets:
                    ports.add(sockets[inode])
    return ports
