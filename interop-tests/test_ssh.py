"""RTR over SSH into the Debian 12 routers that speak it: rtrclient (RTRlib 0.8), BIRD 2.0.12 and
FRR 8.4.4 each hold exactly the real table (REAL_TABLE at REAL_REFERENCE_TIME) from one
``--listen-ssh`` listener, over one connection with one Reset Query at v1; a router whose key is
not in the authorized keys is refused, logged with its key's fingerprint and counted
(``rtr_rejected_connections_total{reason="ssh_auth_failed"}``).

rtr-serve runs once for the module with ``--ssh-kex-algorithms ecdh-sha2-nistp384``: FRR 8.4's
bgpd computes every SHA-256 wrongly (libfrr's own SHA256_* symbols take the place of OpenSSL's),
so the default curve25519-sha256 exchange fails for it (README "RTR over SSH"). Keys are made
with ssh-keygen in the run directory.
"""

from __future__ import annotations

import multiprocessing
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
from rtrclients import checks, summary
from rtrclients.base import Client
from rtrclients.bird import Bird
from rtrclients.frr import Frr
from rtrclients.lab import HOST, Lab, run_root, timelines
from rtrclients.rtrclient import RtrClientLive
from rtrclients.vrps import Expected, expected_from_export
from rtrserve import REAL_REFERENCE_TIME, REAL_TABLE, free_port, start_rtr_serve

pytestmark = [pytest.mark.interop, pytest.mark.timeout(600)]

USER = "rtr"
KEX = "ecdh-sha2-nistp384"
#: Measured: a few seconds per daemon; bounded far above that.
HOLD_TIMEOUT = 300.0
REFERENCE = datetime.fromisoformat(REAL_REFERENCE_TIME.replace("Z", "+00:00")).timestamp()

#: BIRD 2.0.12's SSH transport (README "Transports"); retry well above a full sync's time.
BIRD_TRANSPORT = (
    'transport ssh {{ bird private key "{key}"; remote public key "{known_hosts}"; '
    'user "{user}"; }};'
)
BIRD_RETRY = "retry 60;"
#: FRR 8.4's cache line (RTRlib with libssh).
FRR_CACHE = "rpki cache {host} {port} {user} {key} {known_hosts} preference 1"


@dataclass(frozen=True)
class Keys:
    """Key files of the module's run (made with ssh-keygen, never committed)."""

    host_key: Path
    router_key: Path
    other_key: Path
    authorized_keys: Path
    known_hosts: Path


def keygen(path: Path) -> Path:
    """An unencrypted ed25519 key pair at ``path`` (and ``path``.pub)."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)],
        check=True,
        timeout=30,
    )
    return path


def make_keys(directory: Path, port: int) -> Keys:
    """Host key, the routers' key (authorized) and a key that is not authorized."""
    directory.mkdir(parents=True, exist_ok=True)
    host, router, other = (keygen(directory / n) for n in ("host_key", "router_key", "other_key"))
    authorized = directory / "authorized_keys"
    authorized.write_text(router.with_suffix(".pub").read_text())
    public = " ".join(host.with_suffix(".pub").read_text().split()[:2])
    known = directory / "known_hosts"
    known.write_text(f"[{HOST}]:{port} {public}\n")
    return Keys(host, router, other, authorized, known)


class SshRtrClient(RtrClientLive):
    """rtrclient ssh HOST PORT USER KEY KNOWN_HOSTS."""

    name = "rtrclient-ssh"
    label = "rtrclient (rtr-tools 0.8.0, RTRlib 0.8) over SSH"
    keys: Keys

    def transport(self) -> list[str]:
        """The ssh transport arguments."""
        k = self.keys
        return ["ssh", self.host, str(self.port), USER, str(k.router_key), str(k.known_hosts)]


class SshBird(Bird):
    """BIRD 2.0.12 with ``transport ssh``."""

    name = "bird-ssh"
    label = "BIRD 2.0.12 (bird2) over SSH"
    keys: Keys

    def config(self) -> str:
        """bird.conf with the SSH transport."""
        transport = BIRD_TRANSPORT.format(
            key=self.keys.router_key, known_hosts=self.keys.known_hosts, user=USER
        )
        text = super().config().replace("transport tcp;", transport)
        return re.sub(r"retry 5;.*", BIRD_RETRY, text)


class SshFrr(Frr):
    """FRR 8.4.4 bgpd with an SSH ``rpki cache``."""

    name = "frr-ssh"
    label = "FRR 8.4.4 bgpd + rpki (RTRlib 0.8) over SSH"
    keys: Keys

    def config(self) -> str:
        """bgpd.conf with the SSH cache line."""
        line = FRR_CACHE.format(
            host=self.host,
            port=self.port,
            user=USER,
            key=self.keys.router_key,
            known_hosts=self.keys.known_hosts,
        )
        return re.sub(r"rpki cache \S+ \d+ preference 1", line, super().config())


CLIENTS: dict[str, type[SshRtrClient | SshBird | SshFrr]] = {
    cls.name: cls for cls in (SshRtrClient, SshBird, SshFrr)
}


@dataclass
class SshLab:
    """The lab, the keys, the HTTP port and the expected set."""

    lab: Lab
    keys: Keys
    http: int
    expected_future: Future[Expected]

    @property
    def expected(self) -> Expected:
        """What REAL_TABLE must give."""
        return self.expected_future.result(timeout=600)

    def metrics(self) -> str:
        """GET /metrics."""
        url = f"http://{HOST}:{self.http}/metrics"
        with urllib.request.urlopen(url, timeout=30) as response:
            return str(response.read().decode())


@pytest.fixture(scope="module")
def ssh_lab() -> Iterator[SshLab]:
    """rtr-serve on REAL_TABLE with one SSH listener (started once), then the three routers."""
    run_dir = run_root() / "ssh"
    run_dir.mkdir()
    served = run_dir / "served.json.bz2"
    shutil.copyfile(REAL_TABLE, served)
    port, http = free_port(), free_port()
    keys = make_keys(run_dir / "keys", port)
    extra = [
        "--listen-ssh",
        f"{HOST}:{port}",
        "--ssh-host-key",
        str(keys.host_key),
        "--ssh-authorized-keys",
        str(keys.authorized_keys),
        "--ssh-kex-algorithms",
        KEX,
        "--http",
        f"{HOST}:{http}",
    ]
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
        expected = pool.submit(expected_from_export, REAL_TABLE, not_expired_at=REFERENCE)
        with (
            start_rtr_serve(
                served, run_dir, reference_time=REAL_REFERENCE_TIME, extra=extra
            ) as server,
            ExitStack() as stack,
        ):
            server.wait_log(r"published serial 0 ", 300)
            clients: dict[str, Client] = {}
            for name, cls in CLIENTS.items():
                client = cls(run_dir / name, HOST, port)
                client.keys = keys
                stack.callback(client.stop)
                clients[name] = client
                client.start()
            with timelines(clients) as polls:
                lab = Lab("ssh", server, clients, served, run_dir, timelines=polls)
                yield SshLab(lab, keys, http, expected)
        left = [name for name, client in clients.items() if client.running()]
        assert not left, f"still running after stop: {left}"


@pytest.mark.parametrize("name", list(CLIENTS))
def test_full_table_over_ssh(ssh_lab: SshLab, name: str) -> None:
    """The router holds exactly the real table over SSH, one connection, one Reset Query."""
    lab = ssh_lab.lab
    load = checks.full_load(lab, name, ssh_lab.expected, HOLD_TIMEOUT)
    checks.record_full(lab, name, ssh_lab.expected, load)
    story = lab.first_connection(name)
    assert lab.server.count(rf"router {re.escape(story.peer)} connected over SSH as 'rtr'") == 1
    print(f"{name}: held the real table over SSH {load} s after its start")


def test_unknown_key_is_refused_and_counted(ssh_lab: SshLab) -> None:
    """rtrclient with a key outside the authorized keys: refused, logged, counted."""
    lab, keys = ssh_lab.lab, ssh_lab.keys
    fingerprint = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(keys.other_key.with_suffix(".pub"))],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.split()[1]
    before = lab.server.count(r"refused router .*SSH login failed")
    port = next(iter(lab.clients.values())).port
    args = ["rtrclient", "-e", "-t", "csv", "ssh", HOST, str(port), USER]
    args += [str(keys.other_key), str(keys.known_hosts)]
    log = lab.run_dir / "unknown-key.err"
    with log.open("wb") as err:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err)
    try:
        lab.server.wait_log(r"refused router .*SSH login failed", 30, count=before + 1)
    finally:
        proc.kill()
        proc.wait(10)
    line = lab.server.lines(r"refused router .*SSH login failed")[-1]
    assert f"publickey ssh-ed25519 {fingerprint} as 'rtr'" in line, line
    text = ssh_lab.metrics()
    found = re.search(
        r'^rtr_rejected_connections_total\{[^}]*reason="ssh_auth_failed"[^}]*\} (\S+)$',
        text,
        re.MULTILINE,
    )
    assert found is not None, text
    assert float(found.group(1)) >= 1, text
    summary.record("rtrclient-ssh", sessions="unknown key refused: ssh_auth_failed counted")


def test_routers_kept_one_connection(ssh_lab: SshLab) -> None:
    """No router reconnected (one connection each, still open)."""
    lab = ssh_lab.lab
    for name in CLIENTS:
        story = lab.first_connection(name)
        assert story.connected == 1, story
        assert story.closed == [], story
