"""RTR v2 peers that arrive before the data (issue 15): BIRD 2.17.6 and OpenBGPD 8.8 started while
rtr-serve loads the real table, BIRD started before rtr-serve runs, and rtr-serve restarted under
both without and with --state, by stop and start and in place (``kill -USR2``, the peers keep
their connections, and their data when the content is the same). Each must hold exactly the new
data; the times go to the summary.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from test_v2_peers import (
    SUMMARY_PATH,
    bird_holds,
    describe_bird,
    describe_openbgpd,
    note,
    openbgpd_holds,
    router_ports,
    stop_stale_processes,
    wait_all,
)
from v2lab import (
    REAL_REFERENCE_TIME,
    REAL_TABLE,
    ROOT,
    Bird,
    LabDir,
    OpenBgpd,
    Payload,
    RtrServer,
    check_chroot,
    chroot_processes,
    free_port,
    load_export,
    log_time,
    published_at,
    restart_in_place,
    start_rtr_serve,
    write_export,
)

pytestmark = pytest.mark.interop

LOAD_TIMEOUT = 120.0
#: Far below the peers' default retry (600 s): holding the data within this proves that no peer
#: waited for a default retry timer. The issue's goal (5 s) is compared in the summary.
BOUND = 60.0
#: The issue's goal after a restart in place, from the new image's first publish; OpenBGPD waits
#: a random 0-9 s on a Cache Reset and again on a Serial Notify (test_arrival.GOALS).
GOALS = {"BIRD": 5.0, "OpenBGPD": 21.0}

EXPORT_A = [
    ("192.0.2.0/24", 24, 64496),
    ("2001:db8::/32", 48, 64497),
    ("198.51.100.0/24", 24, 64498),
]
EXPORT_B = [("192.0.2.0/24", 24, 64496), ("203.0.113.0/24", 24, 64499)]
ASPAS_A = [(64496, [64497, 64498])]
ASPAS_B = [(64496, [64497])]


@pytest.fixture(scope="module")
def chroot_ready(request: pytest.FixtureRequest) -> Iterator[str]:
    """As test_v2_peers' ``daemon_versions``, but adding to its summary instead of clearing it."""
    try:
        versions = check_chroot()
    except (RuntimeError, OSError) as exc:
        pytest.fail(str(exc))
    stop_stale_processes()
    yield versions
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None and SUMMARY_PATH.exists():
        with capture.global_and_fixture_disabled():
            reporter.write_line("")
            reporter.write_sep("-", "rtr-serve RTR v2 interop summary (Debian 13 chroot)")
            reporter.write(SUMMARY_PATH.read_text())
    left = chroot_processes()
    assert not left, f"processes left in the lab chroot: {left}"


@pytest.fixture
def lab(chroot_ready: str, request: pytest.FixtureRequest) -> LabDir:
    """A fresh folder in the chroot for this test (kept afterwards)."""
    name = f"v2-{request.node.name}"
    shutil.rmtree(ROOT / "lab" / name, ignore_errors=True)
    return LabDir(name)


def _peers(stack: ExitStack, where: LabDir, port: int) -> tuple[Bird, OpenBgpd]:
    bgp_port = free_port()
    bird = Bird(where, port, [], bgp_port)
    stack.callback(bird.stop)
    openbgpd = OpenBgpd(where, port, bgp_port)
    stack.callback(openbgpd.stop)
    return bird, openbgpd


def _hold(bird: Bird, openbgpd: OpenBgpd, payload: Payload, what: str) -> dict[str, float]:
    return wait_all(
        {
            "BIRD": lambda: bird_holds(bird, payload, 0),
            "OpenBGPD": lambda: openbgpd_holds(openbgpd, payload, 0, None),
        },
        what,
        lambda: f"{describe_bird(bird, payload)}\n{describe_openbgpd(openbgpd, None)}",
        LOAD_TIMEOUT,
        0.2,
    )


def _time(line: str) -> float:
    return log_time(line)


def _kept(server: RtrServer, ports: dict[str, int], since: float) -> dict[str, float]:
    """After ``kill -USR2`` with the same content: each peer's connection is confirmed in the
    continued session after ``since`` and sent no table again (0 s: it kept its data)."""
    deadline = time.monotonic() + LOAD_TIMEOUT

    def lines(port: int, text: str) -> list[str]:
        return [
            line
            for line in server.log.splitlines()
            if f"router 127.0.0.1:{port}: {text}" in line and _time(line) >= since
        ]

    kept = "kept through the handover, holding session"
    while not all(lines(port, kept) for port in ports.values()):
        assert time.monotonic() < deadline, server.log[-3000:]
        time.sleep(0.2)
    for name, port in ports.items():
        assert not lines(port, "reset query v2 -> full table"), (name, server.log[-3000:])
    return dict.fromkeys(ports, 0.0)


def _ports(bird: Bird, openbgpd: OpenBgpd, server: RtrServer) -> dict[str, int]:
    """`router_ports` once both peers have one connection again (OpenBGPD may redial once
    after the reset path of a restart in place with other content)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return router_ports(bird, openbgpd, server)
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _listening(server: RtrServer) -> float:
    """When rtr-serve said it listens (its port accepts from then on)."""
    return _time(next(ln for ln in server.log.splitlines() if "listening for routers" in ln))


@pytest.mark.timeout(420)
def test_peers_started_while_rtr_serve_loads_the_real_table(lab: LabDir) -> None:
    """Both peers connect before the first publish; their v2 queries are held and answered with
    the real table (BIRD's VRPs and ASPAs compared one by one; OpenBGPD's counts)."""
    section = "arrival (a): started while rtr-serve loads the real table"
    with ExitStack() as stack:
        server = stack.enter_context(
            start_rtr_serve(REAL_TABLE, lab.host, reference_time=REAL_REFERENCE_TIME)
        )
        assert "published serial" not in server.log
        bird, openbgpd = _peers(stack, lab, server.port)
        bird.start()
        openbgpd.start()
        expected = load_export(REAL_TABLE, REAL_REFERENCE_TIME)
        server.wait_log(r"published serial 0\b", LOAD_TIMEOUT)
        published = published_at(server.log, 0)
        held = wait_all(
            {
                "BIRD": lambda: bird_holds(bird, expected, 0, exact=False),
                "OpenBGPD": lambda: openbgpd_holds(openbgpd, expected, 0, None),
            },
            "both peers to hold the real table",
            lambda: f"{describe_bird(bird, expected)}\n{describe_openbgpd(openbgpd, None)}",
            LOAD_TIMEOUT,
            0.2,
        )
        assert bird.vrps() == expected.vrps
        assert bird.aspas() == expected.aspas
        log = server.log
        assert re.search(r"reset query v2 held until the first data", log), log[-3000:]
        assert "no data within the arrival hold" not in log
        assert not re.search(r"(reset|serial) query v[01]", log), "a peer fell back below v2"
        for name, at in held.items():
            assert at - published < BOUND, (name, at - published)
        note(
            section,
            f"publish->held: BIRD {held['BIRD'] - published:.1f} s, OpenBGPD "
            f"{held['OpenBGPD'] - published:.1f} s (poll 0.2 s); "
            f"{len(re.findall('held until the first data', log))} queries held",
        )


def _write(
    path: Path, vrps: list[tuple[str, int, int]], aspas: list[tuple[int, list[int]]]
) -> None:
    write_export(path, vrps, aspas=aspas)


@pytest.mark.timeout(300)
def test_bird_before_rtr_serve_then_restarts(lab: LabDir, tmp_path: Path) -> None:
    """(b) BIRD started before rtr-serve runs (its ``retry 5`` redials); (c) rtr-serve stopped
    and started on the same port without --state (export B), restarted in place (A), stopped
    and started with --state (A, recovered) and restarted in place with it: both peers hold
    exactly the new data each time, within 5 s of the first publish after ``kill -USR2``
    (OpenBGPD: its random waits, `GOALS`)."""
    section = "arrival (b), (c): BIRD before rtr-serve; restarts"
    served, a_path, b_path = tmp_path / "served.json", tmp_path / "a.json", tmp_path / "b.json"
    _write(a_path, EXPORT_A, ASPAS_A)
    _write(b_path, EXPORT_B, ASPAS_B)
    a, b = load_export(a_path), load_export(b_path)
    state = ["--state", f"sqlite:{tmp_path / 'state.db'}"]
    port = free_port()
    with ExitStack() as stack:
        bird, openbgpd = _peers(stack, lab, port)
        bird.start()
        time.sleep(1.0)  # its first connect is refused
        served.write_bytes(a_path.read_bytes())
        first = stack.enter_context(
            start_rtr_serve(served, lab.host / "first", port=port, extra=state)
        )
        first.wait_log(r"published serial 0\b", 60)
        published = published_at(first.log, 0)
        openbgpd.start()
        held = _hold(bird, openbgpd, a, "both peers to hold A")
        before = held["BIRD"] - published
        assert before < BOUND, before

        first.proc.terminate()
        first.proc.wait(15)
        served.write_bytes(b_path.read_bytes())
        second = stack.enter_context(start_rtr_serve(served, lab.host / "second", port=port))
        since = _listening(second)
        restart = {k: v - since for k, v in _hold(bird, openbgpd, b, "both to hold B").items()}

        served.write_bytes(a_path.read_bytes())  # read by the new image
        since, _ = restart_in_place(second)
        usr2 = {k: v - since for k, v in _hold(bird, openbgpd, a, "both to hold A").items()}
        # Again, A unchanged: the new image continues the session, the peers keep their data.
        ports = _ports(bird, openbgpd, second)
        _hold(bird, openbgpd, a, "both to hold A")
        since, _ = restart_in_place(second)
        usr2_same = _kept(second, ports, since)
        _hold(bird, openbgpd, a, "both to hold A")
        second.proc.terminate()
        second.proc.wait(15)

        served.write_bytes(a_path.read_bytes())
        third = stack.enter_context(
            start_rtr_serve(served, lab.host / "third", port=port, extra=state)
        )
        since = _listening(third)
        with_state = {k: v - since for k, v in _hold(bird, openbgpd, a, "both to hold A").items()}

        # In place with --state, the export unchanged: the recovered A is what the old image
        # served, so the session is continued and the peers keep their data.
        ports = _ports(bird, openbgpd, third)
        since, _ = restart_in_place(third)
        usr2_state = _kept(third, ports, since)
        _hold(bird, openbgpd, a, "both to hold A")
        for took in (restart, with_state):
            for name, seconds in took.items():
                assert seconds < BOUND, (name, took)
        for took in (usr2, usr2_same, usr2_state):
            for name, seconds in took.items():
                assert seconds < GOALS[name], (name, took)
        kept = third.log.count("connected (kept through the restart")
        assert kept == 2, third.log[-3000:]
        note(section, f"(b) BIRD started before rtr-serve: publish->held {before:.1f} s")
        for label, took in (("without --state", restart), ("with --state", with_state)):
            note(
                section,
                f"(c) restart {label}: listening->held BIRD {took['BIRD']:.1f} s, "
                f"OpenBGPD {took['OpenBGPD']:.1f} s",
            )
        for label, took, how in (
            ("without --state, other content", usr2, "held A"),
            ("without --state, same content", usr2_same, "kept A, nothing resent"),
            ("with --state, same content", usr2_state, "kept A, nothing resent"),
        ):
            note(
                section,
                f"(c) kill -USR2 {label}: first publish->{how} BIRD {took['BIRD']:.2f} s, "
                f"OpenBGPD {took['OpenBGPD']:.2f} s",
            )
