"""RTR over SSH at v2: BIRD 2.17.6 (Debian 13 chroot) with ``transport ssh { … }`` holds exactly the
real table with ASPA from a ``listen_ssh`` listener (config file; ``ssh_kex_algorithms`` as the
Debian 12 test uses it); the same BIRD with a key outside the authorized keys is refused,
logged with its key's fingerprint and counted
(``rtr_rejected_connections_total{reason="ssh_auth_failed"}``). Keys are made with ssh-keygen
in the lab folder (never committed)."""

from __future__ import annotations

import importlib
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from v2lab import (
    REAL_REFERENCE_TIME,
    REAL_TABLE,
    Bird,
    LabDir,
    Payload,
    RtrServer,
    check_chroot,
    chroot_processes,
    free_port,
    kill_pid,
    load_export,
    run_in_chroot,
    start_time,
    wait_for,
    wait_gone,
)

#: interop-tests/rtrserve.py (v2lab put its folder on sys.path): the launcher's RtrServe class.
_rtrserve = importlib.import_module("rtrserve")

pytestmark = pytest.mark.interop

USER = "rtr"
KEX = "ecdh-sha2-nistp384"
LOAD_TIMEOUT = 120.0
#: BIRD 2.17.6's SSH transport (README "Transports"); paths as the chroot sees them.
BIRD_TRANSPORT = (
    'transport ssh {{ bird private key "{key}"; remote public key "{known_hosts}"; '
    'user "{user}"; }};'
)


def keygen(lab: LabDir, name: str) -> tuple[str, Path]:
    """An unencrypted ed25519 key pair in the lab folder: (path inside the chroot, host path)."""
    inside, host = lab.path(name)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(host)],
        check=True,
        timeout=30,
    )
    return inside, host


class SshBird(Bird):
    """BIRD whose RPKI protocol logs in over SSH with ``key``."""

    def __init__(self, lab: LabDir, rtr_port: int, key: str, known_hosts: str) -> None:
        """Configure against 127.0.0.1:rtr_port; no BGP feed."""
        super().__init__(lab, rtr_port)
        self.key, self.known_hosts = key, known_hosts

    def write_config(self) -> None:
        """bird.conf with the SSH transport; checked with `bird -p`."""
        super().write_config()
        transport = BIRD_TRANSPORT.format(key=self.key, known_hosts=self.known_hosts, user=USER)
        text = self.conf_host.read_text().replace("  transport tcp;", f"  {transport}")
        self.conf_host.write_text(text)
        run_in_chroot(["bird", "-p", "-c", self.conf])


@pytest.fixture
def lab(request: pytest.FixtureRequest) -> Iterator[LabDir]:
    """A lab folder; the chroot works; no daemon of ours is left afterwards."""
    try:
        check_chroot()
    except (RuntimeError, OSError) as exc:
        pytest.fail(str(exc))
    stale = {pid: start_time(pid) for pid in chroot_processes()}
    for pid, started in stale.items():
        kill_pid(pid, signal.SIGTERM, started)
    wait_gone(stale, 10)
    yield LabDir(f"v2-{request.node.name}")
    left = chroot_processes()
    assert not left, f"processes left in the lab chroot: {left}"


@contextmanager
def ssh_rtr_serve(
    run_dir: Path, port: int, http: int, host_key: Path, authorized: Path
) -> Iterator[RtrServer]:
    """rtr-serve on the real table with one SSH listener (config file only)."""
    config = run_dir / "rtr-serve-ssh.toml"
    config.write_text(
        "[server]\nnotify_interval = 0\nrefresh = 30\nretry = 10\nexpire = 600\n"
        f'reference_time = "{REAL_REFERENCE_TIME}"\n'
        f'listen_ssh = ["127.0.0.1:{port}"]\n'
        f'ssh_host_key = "{host_key}"\nssh_authorized_keys = "{authorized}"\n'
        f'ssh_kex_algorithms = "{KEX}"\nhttp = "127.0.0.1:{http}"\n'
        f'[[sources]]\nurl = "{REAL_TABLE}"\n'
    )
    log_path = run_dir / f"rtr-serve-{port}.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            [str(_rtrserve.RTR_SERVE), "--config", str(config)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    server: RtrServer = _rtrserve.RtrServe(proc, port, log_path)
    try:
        server.wait_log(r"published serial 0\b", LOAD_TIMEOUT)
        yield server
    finally:
        _rtrserve.RtrServe.stop(server)


def refused_count(http: int) -> float:
    """rtr_rejected_connections_total{reason="ssh_auth_failed"} from /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=30) as response:
        text = response.read().decode()
    found = re.search(
        r'^rtr_rejected_connections_total\{[^}]*reason="ssh_auth_failed"[^}]*\} (\S+)$',
        text,
        re.MULTILINE,
    )
    return float(found.group(1)) if found else 0.0


@pytest.mark.timeout(300)
def test_bird_over_ssh_holds_the_real_table_at_v2_and_an_unknown_key_is_refused(
    lab: LabDir,
) -> None:
    port, http = free_port(), free_port()
    _, host_key = keygen(lab, "host_key")
    router_key, router_host = keygen(lab, "router_key")
    other_key, other_host = keygen(lab, "other_key")
    authorized = lab.host / "authorized_keys"
    authorized.write_text(router_host.with_suffix(".pub").read_text())
    known_inside, known_host = lab.path("known_hosts")
    public = " ".join(host_key.with_suffix(".pub").read_text().split()[:2])
    known_host.write_text(f"[127.0.0.1]:{port} {public}\n")
    fingerprint = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(other_host.with_suffix(".pub"))],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.split()[1]
    with ExitStack() as stack:
        server = stack.enter_context(ssh_rtr_serve(lab.host, port, http, host_key, authorized))
        expected: Payload = load_export(REAL_TABLE, REAL_REFERENCE_TIME)

        stranger = SshBird(lab, port, other_key, known_inside)
        stack.callback(stranger.stop)
        stranger.start()
        server.wait_log(rf"SSH login failed \(publickey ssh-ed25519 {re.escape(fingerprint)}", 30)
        assert refused_count(http) >= 1
        assert stranger.rtr_status().get("Status") != "Established"
        stranger.stop()

        bird = SshBird(lab, port, router_key, known_inside)
        stack.callback(bird.stop)
        started = time.time()
        bird.start()

        def holds() -> bool:
            status = bird.rtr_status()
            counts = (bird.route_count("r4"), bird.route_count("r6"), bird.route_count("at"))
            return status.get("Status") == "Established" and counts == (
                expected.count(4),
                expected.count(6),
                len(expected.aspas),
            )

        held = wait_for(holds, LOAD_TIMEOUT, "BIRD over SSH to hold the real table", 0.2)
        status = bird.rtr_status()
        assert status.get("Protocol version") == "2", status
        assert bird.vrps() == expected.vrps
        assert bird.aspas() == expected.aspas
        assert not bird.rtr_errors(), bird.rtr_errors()
        assert len(re.findall(r"connected over SSH as 'rtr'", server.log)) == 1, server.log
        print(
            f"BIRD 2.17.6 over SSH at v2: {expected.count(4):,} + {expected.count(6):,} VRPs, "
            f"{len(expected.aspas)} ASPAs held exactly, {held - started:.1f} s after BIRD start"
        )
