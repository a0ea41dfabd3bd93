"""TCP-MD5 (RFC 2385) at RTR v2: BIRD 2.17.6 (Debian 13 chroot) with ``transport tcp {
authentication md5; password …; }`` holds exactly the real table from a listener with
``tcp_md5`` for 127.0.0.1; the same BIRD without the password is refused (the kernel drops its
unsigned SYNs: rtr-serve never sees a connection)."""

from __future__ import annotations

import importlib
import re
import signal
import subprocess
import time
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

PASSWORD = "rtr-md5-lab-secret"
LOAD_TIMEOUT = 120.0


class Md5Bird(Bird):
    """BIRD whose RPKI protocol signs its TCP segments with ``password`` (None: unsigned)."""

    def __init__(self, lab: LabDir, rtr_port: int, password: str | None) -> None:
        """Configure against 127.0.0.1:rtr_port; no BGP feed."""
        super().__init__(lab, rtr_port)
        self.password = password

    def write_config(self) -> None:
        """bird.conf with the MD5 transport; checked with `bird -p`."""
        super().write_config()
        if self.password is not None:
            text = self.conf_host.read_text().replace(
                "  transport tcp;",
                f'  transport tcp {{ authentication md5; password "{self.password}"; }};',
            )
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
def md5_rtr_serve(run_dir: Path, port: int) -> Iterator[RtrServer]:
    """rtr-serve on the real table with one listener keyed for 127.0.0.1 (config file only)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    config = run_dir / "rtr-serve-md5.toml"
    config.write_text(
        "[server]\nnotify_interval = 0\nrefresh = 30\nretry = 10\nexpire = 600\n"
        f'reference_time = "{REAL_REFERENCE_TIME}"\n'
        f'[[sources]]\nurl = "{REAL_TABLE}"\n'
        f'[[listeners]]\naddress = "127.0.0.1:{port}"\n'
        f'tcp_md5 = [{{ peer = "127.0.0.1", key = "{PASSWORD}" }}]\n'
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


def established(bird: Bird) -> bool:
    return bird.rtr_status().get("Status") == "Established"


@pytest.mark.timeout(300)
def test_bird_md5_holds_the_real_table_and_unsigned_bird_is_refused(lab: LabDir) -> None:
    port = free_port()
    with ExitStack() as stack:
        server = stack.enter_context(md5_rtr_serve(lab.host, port))
        expected: Payload = load_export(REAL_TABLE, REAL_REFERENCE_TIME)
        assert "TCP-MD5 for 127.0.0.1/32" in server.log
        assert PASSWORD not in server.log

        unsigned = Md5Bird(lab, port, None)
        stack.callback(unsigned.stop)
        unsigned.start()
        time.sleep(12)  # BIRD retries every 5 s until the first End of Data: 2-3 attempts
        assert not established(unsigned), unsigned.rtr_status()
        assert not re.search(r"router 127\.0\.0\.1:\d+ connected", server.log), server.log
        unsigned.stop()

        bird = Md5Bird(lab, port, PASSWORD)
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

        held = wait_for(holds, LOAD_TIMEOUT, "MD5-signed BIRD to hold the real table", 0.2)
        status = bird.rtr_status()
        assert status.get("Protocol version") == "2", status
        assert bird.vrps() == expected.vrps
        assert bird.aspas() == expected.aspas
        assert not bird.rtr_errors(), bird.rtr_errors()
        assert re.search(r"router 127\.0\.0\.1:\d+ connected", server.log)
        print(
            f"BIRD 2.17.6 over TCP-MD5 at v2: {expected.count(4):,} + {expected.count(6):,} VRPs, "
            f"{len(expected.aspas)} ASPAs held exactly, {held - started:.1f} s after BIRD start"
        )
