"""RTR v2 / ASPA interop: BIRD 2.17.6 and OpenBGPD 8.8 (Debian 13 chroot) against rtr-serve."""

from __future__ import annotations

import re
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest
from v2lab import (
    CACHE,
    REAL_REFERENCE_TIME,
    REAL_TABLE,
    ROOT,
    Bird,
    LabDir,
    OpenBgpd,
    Payload,
    Probe,
    RtrServer,
    check_chroot,
    chroot_processes,
    expected_probe_states,
    free_port,
    kill_pid,
    load_export,
    make_probes,
    published_at,
    queries_by_port,
    sample_vrps,
    start_rtr_serve,
    start_time,
    tcp_local_ports,
    wait_for,
    wait_gone,
    write_export,
)

pytestmark = pytest.mark.interop

SUMMARY_PATH = CACHE / "summary-v2.txt"
SUMMARY: dict[str, list[str]] = {}

#: Counts of the real table (../shared/data/SOURCES.md) and what OpenBGPD's `show sets` counts.
REAL_V4, REAL_V6, REAL_ASPAS = 580_366, 143_155, 100
REAL_V4_PREFIXES, REAL_V6_PREFIXES = 512_044, 128_671

#: Generous bounds; each is far above what a run needs (see README.md for the measured times).
LOAD_TIMEOUT = 120.0
UPDATE_TIMEOUT = 60.0  # OpenBGPD waits a random 0-9 s after a Serial Notify


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def daemon_versions(request: pytest.FixtureRequest) -> Iterator[str]:
    """The chroot works; stale lab processes of an aborted run are stopped; none is left after.

    At the end the summary is shown on the terminal (also with output capture on).
    """
    try:
        versions = check_chroot()
    except (RuntimeError, OSError) as exc:
        pytest.fail(str(exc))
    stop_stale_processes()
    SUMMARY.clear()
    SUMMARY["daemons"] = [versions]
    yield versions
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None and SUMMARY_PATH.exists():
        with capture.global_and_fixture_disabled():
            reporter.write_line("")
            reporter.write_sep("-", "rtr-serve RTR v2 interop summary (Debian 13 chroot)")
            reporter.write(SUMMARY_PATH.read_text())
            reporter.write_line(f"(also in {SUMMARY_PATH})")
    left = chroot_processes()
    assert not left, f"processes left in the lab chroot: {left}"


def stop_stale_processes() -> None:
    """Stop, by PID, daemons that an earlier, killed run left in the lab chroot."""
    stale = chroot_processes()
    procs = {pid: start_time(pid) for pid in stale}
    for pid, started in procs.items():
        kill_pid(pid, signal.SIGTERM, started)
    for pid, started in wait_gone(procs, 10).items():
        kill_pid(pid, signal.SIGKILL, started)
    if stale:
        print(f"stopped stale lab processes: {stale}")


@pytest.fixture
def lab(daemon_versions: str, request: pytest.FixtureRequest) -> LabDir:
    """A fresh folder in the chroot for this test's configs, sockets and logs (kept afterwards)."""
    name = f"v2-{request.node.name}"
    shutil.rmtree(ROOT / "lab" / name, ignore_errors=True)
    return LabDir(name)


def note(section: str, line: str) -> None:
    """Add a summary line; rewrite the summary file (shown at the end of the module)."""
    SUMMARY.setdefault(section, []).append(line)
    CACHE.mkdir(parents=True, exist_ok=True)
    text = "".join(
        f"{name}:\n" + "".join(f"  {ln}\n" for ln in lines) for name, lines in SUMMARY.items()
    )
    SUMMARY_PATH.write_text(text)


# ----------------------------------------------------------------------------- checks


def start_peers(
    stack: ExitStack, lab: LabDir, server: RtrServer, probes: list[Probe]
) -> tuple[Bird, OpenBgpd]:
    """Start BIRD, then OpenBGPD (rtr-serve already runs); both are stopped when the stack ends."""
    bgp_port = free_port()
    bird = Bird(lab, server.port, probes, bgp_port)
    stack.callback(bird.stop)
    bird.start()
    openbgpd = OpenBgpd(lab, server.port, bgp_port)
    stack.callback(openbgpd.stop)
    openbgpd.start()
    return bird, openbgpd


def bird_holds(bird: Bird, payload: Payload, serial: int, *, exact: bool = True) -> bool:
    """BIRD is established at ``serial`` with exactly ``payload`` (or its counts if not exact)."""
    status = bird.rtr_status()
    if status.get("Status") != "Established" or status.get("Serial number") != str(serial):
        return False
    counts = (bird.route_count("r4"), bird.route_count("r6"), bird.route_count("at"))
    if counts != (payload.count(4), payload.count(6), len(payload.aspas)):
        return False
    return not exact or (bird.aspas() == payload.aspas and bird.vrps() == payload.vrps)


def openbgpd_holds(
    openbgpd: OpenBgpd, payload: Payload, serial: int, probes: dict[str, tuple[str, str]] | None
) -> bool:
    """OpenBGPD is established at ``serial``, with ``payload``'s counts and probe states."""
    rtr = openbgpd.rtr()
    if rtr.get("state") != "established" or rtr.get("serial") != serial:
        return False
    sets = openbgpd.sets()
    roa, aspa = sets.get("ROA", {}), sets.get("ASPA", {})
    counts = (roa.get("num_IPv4"), roa.get("num_IPv6"), aspa.get("num_ASnum", 0))
    want = (payload.distinct_prefixes(4), payload.distinct_prefixes(6), len(payload.aspas))
    if counts != want:
        return False
    return probes is None or openbgpd.probe_states() == probes


def describe_bird(bird: Bird, payload: Payload) -> str:
    """What BIRD holds against what it should (for timeout messages)."""
    try:
        status = bird.rtr_status()
        have_aspas = bird.aspas()
        have_vrps = bird.vrps()
    except (RuntimeError, OSError) as exc:
        return f"BIRD: {exc}\n{bird.output_tail()}"
    wrong_aspas = {
        c: (have_aspas.get(c), payload.aspas.get(c))
        for c in set(have_aspas) | set(payload.aspas)
        if have_aspas.get(c) != payload.aspas.get(c)
    }
    return (
        f"BIRD status {status.get('Status')} v{status.get('Protocol version')} serial "
        f"{status.get('Serial number')}; VRPs missing {len(payload.vrps - have_vrps)}, extra "
        f"{len(have_vrps - payload.vrps)}; ASPA (have, want) {dict(list(wrong_aspas.items())[:10])}"
    )


def describe_openbgpd(openbgpd: OpenBgpd, want: dict[str, tuple[str, str]] | None) -> str:
    """What OpenBGPD holds (for timeout messages)."""
    try:
        text = openbgpd.ctl_text("show", "rtr") + openbgpd.ctl_text("show", "sets")
        have = openbgpd.probe_states()
    except (RuntimeError, OSError) as exc:
        return f"OpenBGPD: {exc}\n{openbgpd.output_tail()}"
    wrong = (
        {} if want is None else {p: (have.get(p), w) for p, w in want.items() if have.get(p) != w}
    )
    return (
        f"{text}\nprobe routes received {len(have)}, wrong (have, want): "
        f"{dict(list(wrong.items())[:10])}\n{openbgpd.output_tail(15)}"
    )


def router_ports(bird: Bird, openbgpd: OpenBgpd, server: RtrServer) -> dict[str, int]:
    """Local TCP port of each daemon's RTR connection (to find its lines in rtr-serve's log)."""
    openbgpd.track_children()
    ports = {}
    for name, daemon in (("BIRD", bird), ("OpenBGPD", openbgpd)):
        found = tcp_local_ports(daemon.pids, server.port)
        assert len(found) == 1, f"{name}: RTR connections {found}"
        ports[name] = found.pop()
    return ports


def bird_timers(status: dict[str, str]) -> tuple[str, str]:
    """Refresh and expire interval of BIRD's RTR session ("24.2/30" → "30")."""
    return (
        status.get("Refresh timer", "").rpartition("/")[2],
        status.get("Expire timer", "").rpartition("/")[2],
    )


def check_versions(bird: Bird, openbgpd: OpenBgpd, server: RtrServer, section: str) -> None:
    """Both negotiated v2 and took the cache's End of Data timers; one v2 reset each."""
    # A timer shows "---" for the moment it is being restarted: poll, do not sample once.
    wait_for(
        lambda: bird_timers(bird.rtr_status()) == ("30", "600"),
        15,
        "BIRD's timers from End of Data (refresh 30, expire 600)",
        detail=lambda: str(bird.rtr_status()),
    )
    status = bird.rtr_status()
    assert status["Protocol version"] == "2", status
    rtr = openbgpd.rtr()
    assert rtr["version"] == 2, rtr
    assert (rtr["refresh"], rtr["retry"], rtr["expire"]) == (30, 10, 600), rtr
    assert int(status["Session ID"]) == rtr["session_id"], (status, rtr)
    assert "Version: 2" in openbgpd.ctl_text("show", "rtr")
    queries = queries_by_port(server.log)
    for name, port in router_ports(bird, openbgpd, server).items():
        resets = [q for q in queries[port] if q.startswith("reset query")]
        assert len(resets) == 1, (name, queries[port])
        assert resets[0].startswith("reset query v2 -> full table"), (name, resets)
    assert not re.search(r"(reset|serial) query v[01]", server.log), "a router fell back below v2"
    note(
        section,
        f"negotiated: BIRD 'Protocol version: {status['Protocol version']}', OpenBGPD "
        f"'Version: {rtr['version']} min {rtr['minimal_version']}', session {rtr['session_id']}; "
        f"rtr-serve: one 'reset query v2' per router",
    )


def check_no_rtr_errors(bird: Bird, openbgpd: OpenBgpd) -> None:
    """Neither daemon logged an RTR error (a PDU it rejected, an Error Report…)."""
    assert not bird.rtr_errors(), bird.rtr_errors()
    assert not openbgpd.rtr_errors(), openbgpd.rtr_errors()


def wait_held(
    what: str,
    holds: Callable[[], bool],
    detail: Callable[[], str],
    timeout: float,
    interval: float = 0.2,
) -> float:
    """Unix time at which ``holds()`` was first seen true."""
    return wait_for(holds, timeout, what, interval, detail)


def wait_all(
    checks: dict[str, Callable[[], bool]],
    what: str,
    detail: Callable[[], str],
    timeout: float,
    interval: float,
) -> dict[str, float]:
    """Poll every check until each has held once; name → Unix time it was first seen true."""
    held: dict[str, float] = {}

    def all_held() -> bool:
        for name, check in checks.items():
            if name not in held and check():
                held[name] = time.time()
        return len(held) == len(checks)

    wait_for(all_held, timeout, what, interval, lambda: f"held so far: {sorted(held)}\n{detail()}")
    return held


# ----------------------------------------------------------------------------- (a) real table


@pytest.mark.timeout(420)
def test_full_real_table(lab: LabDir) -> None:
    """Both peers hold the real table: 723,521 VRPs and exactly its 100 merged ASPAs."""
    section = "a. full load of the real table"
    with ExitStack() as stack:
        server = stack.enter_context(
            start_rtr_serve(REAL_TABLE, lab.host, reference_time=REAL_REFERENCE_TIME)
        )
        # Independent expectation while rtr-serve loads (standard library only).
        expected = load_export(REAL_TABLE, REAL_REFERENCE_TIME)
        assert (expected.count(4), expected.count(6), len(expected.aspas)) == (
            REAL_V4,
            REAL_V6,
            REAL_ASPAS,
        )
        assert (expected.distinct_prefixes(4), expected.distinct_prefixes(6)) == (
            REAL_V4_PREFIXES,
            REAL_V6_PREFIXES,
        )
        probes = make_probes([expected.aspas], sample_vrps(expected.vrps, 150))
        want = expected_probe_states(probes, expected)
        server.wait_log(r"published serial 0\b", LOAD_TIMEOUT)

        bird, openbgpd = start_peers(stack, lab, server, probes)
        held = wait_all(
            {
                "BIRD": lambda: bird_holds(bird, expected, 0, exact=False),
                "OpenBGPD": lambda: openbgpd_holds(openbgpd, expected, 0, None),
                "OpenBGPD probes": lambda: openbgpd.probe_states() == want,
            },
            "both peers to hold the real table",
            lambda: f"{describe_bird(bird, expected)}\n{describe_openbgpd(openbgpd, want)}",
            LOAD_TIMEOUT,
            0.5,
        )
        check_versions(bird, openbgpd, server, section)

        # BIRD: every VRP and every ASPA, compared one by one.
        have_vrps, have_aspas = bird.vrps(), bird.aspas()
        assert not expected.vrps - have_vrps, [
            v.text for v in sorted(expected.vrps - have_vrps)[:10]
        ]
        assert not have_vrps - expected.vrps, [
            v.text for v in sorted(have_vrps - expected.vrps)[:10]
        ]
        assert have_aspas == expected.aspas
        # OpenBGPD: counts (show sets counts distinct prefixes) and the probe routes' states.
        sets = openbgpd.sets()
        assert openbgpd.probe_states() == want
        check_no_rtr_errors(bird, openbgpd)

        n_aspa = sum(p.kind.startswith("aspa") for p in probes)
        note(
            section,
            f"BIRD: r4 {bird.route_count('r4'):,} + r6 {bird.route_count('r6'):,} VRPs, "
            f"at {bird.route_count('at')} ASPAs; VRP set and ASPA set identical to the JSON",
        )
        note(
            section,
            f"OpenBGPD show sets: ROA {sets['ROA']['num_IPv4']:,} + {sets['ROA']['num_IPv6']:,} "
            f"distinct prefixes, ASPA {sets['ASPA']['num_ASnum']}; {len(probes)} probe routes "
            f"({n_aspa} ASPA customer/provider paths, {len(probes) - n_aspa} ROA) validated as "
            "the JSON predicts",
        )
        note(
            section,
            f"start->held: BIRD {held['BIRD'] - bird.started_at:.1f} s, OpenBGPD "
            f"{held['OpenBGPD'] - openbgpd.started_at:.1f} s (probe route states: "
            f"{held['OpenBGPD probes'] - openbgpd.started_at:.1f} s)",
        )
    assert server.proc.poll() is not None


# ----------------------------------------------------------------------------- (b) update

BEFORE_VRPS = [
    ("192.0.2.0/24", 24, 64496),
    ("198.51.100.0/24", 24, 64497),
    ("203.0.113.0/24", 26, 64498),
    ("2001:db8::/32", 48, 64496),
    ("2001:db8:1::/48", 48, 64497),
]
AFTER_VRPS = [
    ("192.0.2.0/24", 24, 64496),
    ("198.51.100.0/25", 25, 64499),  # 198.51.100.0/24 AS64497 withdrawn, two /25 announced
    ("198.51.100.128/25", 25, 64499),
    ("203.0.113.0/24", 26, 64498),
    ("2001:db8::/32", 48, 64496),
    ("2001:db8:2::/48", 48, 64497),  # replaces 2001:db8:1::/48
]
BEFORE_ASPAS = [
    (65010, [65020, 65021]),
    (65011, [0]),  # AS0 only: no provider at all
    (65012, [0, 65022]),  # AS0 dropped next to a real provider
    (65013, [65023]),  # two objects of one customer: merged
    (65013, [65024]),
    (65014, [65025]),
]
AFTER_ASPAS = [
    (65010, [65020, 65026]),  # provider set changed: 65021 out, 65026 in
    (65011, [0]),
    (65012, [0, 65022]),
    (65013, [65023]),
    (65013, [65024]),
    # 65014 withdrawn
]


@pytest.mark.timeout(300)
def test_update_by_serial_query(lab: LabDir) -> None:
    """A provider-set change, a customer withdrawal and VRP changes reach both via Serial Query."""
    section = "b. update through Serial Notify -> Serial Query"
    served = lab.host / "export.json"
    write_export(lab.host / "before.json", BEFORE_VRPS, aspas=BEFORE_ASPAS)
    write_export(lab.host / "after.json", AFTER_VRPS, aspas=AFTER_ASPAS)
    before = load_export(lab.host / "before.json")
    after = load_export(lab.host / "after.json")
    assert before.aspas[65013] == (65023, 65024)
    assert before.aspas[65012] == (65022,)
    assert before.aspas[65011] == (0,)
    probes = make_probes([before.aspas, after.aspas], sample_vrps(before.vrps | after.vrps, 100))
    want_before = expected_probe_states(probes, before)
    want_after = expected_probe_states(probes, after)
    changed = sorted(p for p in want_after if want_after[p] != want_before[p])
    assert len(changed) >= 5, changed  # the update is visible through the probe routes

    write_export(served, BEFORE_VRPS, aspas=BEFORE_ASPAS)
    with ExitStack() as stack:
        server = stack.enter_context(start_rtr_serve(served, lab.host))
        server.wait_log(r"published serial 0\b", LOAD_TIMEOUT)
        bird, openbgpd = start_peers(stack, lab, server, probes)
        wait_held(
            "BIRD to hold the first export",
            lambda: bird_holds(bird, before, 0),
            lambda: describe_bird(bird, before),
            LOAD_TIMEOUT,
        )
        wait_held(
            "OpenBGPD to hold the first export",
            lambda: openbgpd_holds(openbgpd, before, 0, want_before),
            lambda: describe_openbgpd(openbgpd, want_before),
            LOAD_TIMEOUT,
        )
        check_versions(bird, openbgpd, server, section)
        ports = router_ports(bird, openbgpd, server)

        written = time.time()
        write_export(served, AFTER_VRPS, aspas=AFTER_ASPAS)
        server.wait_log(r"published serial 1\b", 30)
        published = published_at(server.log, 1)

        held = wait_all(
            {
                "BIRD": lambda: bird_holds(bird, after, 1),
                "OpenBGPD": lambda: openbgpd_holds(openbgpd, after, 1, want_after),
            },
            "both peers to hold the update",
            lambda: f"{describe_bird(bird, after)}\n{describe_openbgpd(openbgpd, want_after)}",
            UPDATE_TIMEOUT,
            0.1,
        )

        # Proof from rtr-serve's log: each router got the update as a delta to its Serial Query
        # on the connection it opened with its only Reset Query.
        queries = queries_by_port(server.log)
        for name, port in ports.items():
            lines = queries[port]
            assert sum(q.startswith("reset query") for q in lines) == 1, (name, lines)
            deltas = [
                q
                for q in lines
                if re.match(r"serial query v2 from serial 0 -> delta to serial 1\b", q)
            ]
            assert deltas, (name, lines)
            note(section, f"{name} (port {port}): {deltas[0]}")
        assert router_ports(bird, openbgpd, server) == ports, "a router reconnected"
        assert "cache reset" not in server.log.lower()
        check_no_rtr_errors(bird, openbgpd)
        assert bird.aspas() == after.aspas
        assert bird.vrps() == after.vrps
        assert openbgpd.probe_states() == want_after

        note(
            section,
            f"after: BIRD r4 {after.count(4)} + r6 {after.count(6)} VRPs and ASPAs "
            f"{dict(after.aspas)} (exact); OpenBGPD {after.distinct_prefixes(4)} + "
            f"{after.distinct_prefixes(6)} prefixes, {len(after.aspas)} ASPAs, "
            f"{len(changed)} of {len(probes)} probe states changed as predicted",
        )
        note(
            section,
            f"export written -> published serial 1: {published - written:.2f} s; publish -> held: "
            + ", ".join(f"{name} {at - published:.2f} s" for name, at in sorted(held.items())),
        )
    assert server.proc.poll() is not None
    assert bird.all_gone()
    assert openbgpd.all_gone()
