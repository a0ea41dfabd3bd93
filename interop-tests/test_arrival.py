"""Routers that arrive before the data: every Debian 12 daemon, started while rtr-serve loads the
real table, holds exactly the table soon after the first publish (issue 15, arrival).

Each daemon connects while rtr-serve has no data; its first query is held (`--arrival-hold`,
default 50 s) and answered from the shared encoding at the first publish, so no daemon ever sees
No Data Available or has to wait for its own retry timer.
"""

from __future__ import annotations

import multiprocessing
import re
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime

import pytest
from rtrclients import checks, procs, summary
from rtrclients.base import wait_holds
from rtrclients.edgeset import write_a, write_b
from rtrclients.lab import DAEMONS, Lab, daemons_running, replace_atomically, run_root, timelines
from rtrclients.serverlog import peer_log, peer_name, published_at
from rtrclients.vrps import Expected, expected_from_export
from rtrserve import (
    REAL_REFERENCE_TIME,
    REAL_TABLE,
    restart_in_place,
    start_rtr_serve,
    wait_until,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(600)]

HOLD_TIMEOUT = 300.0
REFERENCE = datetime.fromisoformat(REAL_REFERENCE_TIME.replace("Z", "+00:00")).timestamp()
#: Far below every daemon's default retry (600 s): holding the table within this of the first
#: publish proves that no daemon waited for its retry timer. The issue's goal is 5 s; the
#: measured times go to the summary table.
BOUND = 60.0
#: The issue's goal for a restart in place (``kill -USR2``), from the new image's first publish.
GOAL = 5.0
#: OpenBGPD waits a random 0-9 s before it acts on a Cache Reset and again on a Serial Notify
#: (``arc4random_uniform(10)`` in rtr_proto.c, any cache): after our unasked Cache Reset, its
#: Reset Query comes within 10 s, or, when its wait for our follow-up Notify (1 s later) ends
#: first, its Serial Query gets Cache Reset and it waits once more: 1 + 10 + 10 s at most.
GOALS = {"openbgpd": 21.0}


@dataclass
class Early:
    """Daemons started as soon as rtr-serve's port accepted; when it published serial 0."""

    lab: Lab
    expected_future: Future[Expected]
    published: float

    @property
    def expected(self) -> Expected:
        """What REAL_TABLE must give."""
        return self.expected_future.result(timeout=600)


@pytest.fixture(scope="module")
def early() -> Iterator[Early]:
    """rtr-serve loading a copy of REAL_TABLE; every daemon started once the port accepts."""
    run_dir = run_root() / "arrival-early"
    run_dir.mkdir()
    served = run_dir / "served.json.bz2"
    shutil.copyfile(REAL_TABLE, served)
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
        expected = pool.submit(expected_from_export, REAL_TABLE, not_expired_at=REFERENCE)
        with start_rtr_serve(served, run_dir, reference_time=REAL_REFERENCE_TIME) as server:
            # The port accepts (start_rtr_serve waited for "listening for routers"); no data yet.
            assert server.published_serial() is None, "published before the daemons came"
            with (
                daemons_running(run_dir, server.port, DAEMONS) as clients,
                timelines(clients) as polls,
            ):
                lab = Lab("arrival-early", server, clients, served, run_dir, timelines=polls)
                server.wait_log(r"published serial 0 ", HOLD_TIMEOUT)
                published = published_at(server, 0)
                assert published is not None
                yield Early(lab, expected, published)


@pytest.mark.parametrize("name", DAEMONS)
def test_daemon_started_before_the_data_holds_the_table(early: Early, name: str) -> None:
    """The daemon holds exactly the table soon after the first publish, on one connection that
    made one Reset Query at its version: no Cache Reset, no close, no wait for a retry timer.

    BIRD abandons a query unanswered for its ``retry`` (5 s in the lab's config, 600 s by
    default) and reconnects after another ``retry``; the others wait for the held answer.
    """
    lab = early.lab
    client = lab.clients[name]
    wait_holds(client, early.expected, HOLD_TIMEOUT, serial=0)
    story = lab.first_connection(name)
    assert story.connected == 1, story
    assert [r.version for r in story.resets] == [client.expected_version], story
    assert story.resets[0].size == checks.full_bytes(early.expected, client.expected_version)
    assert story.closed == [], story
    assert story.cache_resets == 0, story
    peer = re.escape(story.peer)
    held = lab.server.count(rf"router {peer}: (?:reset|serial) query v\d held until the first")
    assert held == 1 or (name == "bird" and story.resets[0].time > early.published), story
    took = lab.held_time(name, early.expected, early.published, serial=0)
    seconds = float(took.split()[0]) if took != "?" else story.resets[0].time - early.published
    assert seconds < BOUND, f"{name} held the table {took} s after the first publish"
    written = story.resets[0].time - early.published
    how = "held query" if held else "reconnected after its own timeout"
    summary.record(name, arrival=f"{how}; answer written +{written:.2f}, held +{took}")


def test_no_router_got_no_data(early: Early) -> None:
    """Every query made before the first publish was held and none ran out of hold time."""
    server = early.lab.server  # every daemon connected and asked long before the publish
    assert server.count(r"held until the first data") >= len(DAEMONS)
    assert server.count(r"no data within the arrival hold") == 0
    assert server.count(r"first data: answering \d+ held queries") == 1


# ------------------------------------------------------------------- (b) before, (c) restarts

#: The daemons whose connect retry is short enough for CI: BIRD and FRR retry a refused connect
#: after their configured ``retry``/``retry_interval`` (5 s in the lab configs, 600 s by
#: default), GoBGP after 30 s (fixed). OpenBGPD 7.7 and rtrclient 0.8 retry a refused first
#: connect only after 600 s, and neither has a knob for it (OpenBGPD's ``rtr`` block knows
#: ``descr``, ``local-address`` and ``port``; rtrclient has no timer option): with them, start
#: rtr-serve first, or let systemd hold its port (socket activation) so their first query is
#: held instead of refused.
BEFORE = ["bird", "frr", "gobgp"]
LATER = [name for name in DAEMONS if name not in BEFORE]


@dataclass
class Restarts:
    """One small-export lab through (b) and both (c) restarts; times per daemon and phase."""

    lab: Lab
    a: Expected
    b: Expected
    took: dict[str, dict[str, float]]


def _timed(
    lab: Lab,
    names: list[str],
    expected: Expected,
    since: float,
    phase: str,
    serial: int = 0,
) -> dict[str, float]:
    """Wait until each daemon holds ``expected`` at ``serial``; seconds from ``since``."""
    out: dict[str, float] = {}
    for name in names:
        seen = wait_holds(lab.clients[name], expected, HOLD_TIMEOUT, serial=serial)
        took = lab.held_time(name, expected, since, serial=serial)
        out[name] = float(took.split()[0]) if took != "?" else seen - since
        summary.record(name, **{phase: took})
    return out


KEPT = "kept through the handover, holding session"


def _settled(lab: Lab, names: list[str], expected: Expected, serial: int) -> None:
    """Each daemon has one connection again and holds ``expected`` on it: after the reset path
    OpenBGPD may redial once (its stray Serial Query, see `test_daemon_converges_after_restarts`),
    and a restart in place keeps only the connections it finds."""
    for name in names:
        client = lab.clients[name]
        wait_until(lambda c=client: len(c.rtr_ports()) == 1, 60, f"{name}: one connection")
        wait_holds(client, expected, HOLD_TIMEOUT, serial=serial)


def _kept_counts(lab: Lab, names: list[str]) -> dict[str, int]:
    """How often rtr-serve logged each daemon's connection as kept in its session."""
    return {
        name: lab.server.count(rf"router {re.escape(peer_name(lab.connection_port(name)))}: {KEPT}")
        for name in names
    }


def _kept(
    lab: Lab,
    names: list[str],
    expected: Expected,
    since: float,
    phase: str,
    before: dict[str, int],
    serial: int,
) -> dict[str, float]:
    """After ``kill -USR2`` with the same content: each daemon's connection is confirmed in
    the continued session (one log line more than ``before``), it is sent no table, and it
    holds ``expected`` at ``serial`` throughout: 0 s."""
    out: dict[str, float] = {}
    for name in names:
        client = lab.clients[name]
        wait_until(
            lambda name=name: _kept_counts(lab, [name])[name] > before[name],
            60,
            f"{name}: kept in the continued session",
        )
        peer = peer_name(lab.connection_port(name))
        again = [r.time for r in peer_log(lab.server, peer).resets if r.time >= since]
        assert again == [], f"{name} was sent the table again: {again}"
        wait_holds(client, expected, HOLD_TIMEOUT, serial=serial)
        out[name] = 0.0
        summary.record(name, **{phase: "0 (kept its data, nothing resent)"})
    return out


@pytest.fixture(scope="module")
def restarts() -> Iterator[Restarts]:
    """(b) BIRD, FRR and GoBGP started before rtr-serve; then OpenBGPD and rtrclient; (c) rtr-serve
    stopped and started on the same port without --state (new export B), restarted in place
    with ``kill -USR2`` (export A, the routers keep their connections) and again with A
    unchanged (the session is continued), stopped and started with --state (export B: A
    recovered from the first run's state first, then B as serial 1), and restarted in place
    with --state (export B unchanged: served as recovered, the session continued)."""
    run_dir = run_root() / "arrival-restarts"
    run_dir.mkdir()
    served = run_dir / "served.json"
    write_a(run_dir / "export-a.json")
    write_b(run_dir / "export-b.json")
    a = expected_from_export(run_dir / "export-a.json")
    b = expected_from_export(run_dir / "export-b.json")
    state = ["--state", f"sqlite:{run_dir / 'state.db'}"]
    port = procs.free_port()
    took: dict[str, dict[str, float]] = {}
    with ExitStack() as stack:
        early = stack.enter_context(daemons_running(run_dir, port, BEFORE))
        time.sleep(1.0)  # their first connects are refused
        replace_atomically(run_dir / "export-a.json", served)
        first = stack.enter_context(
            start_rtr_serve(served, run_dir / "first", port=port, extra=state)
        )
        first.wait_log(r"published serial 0 ", 60)
        clients = dict(early)
        polls = stack.enter_context(timelines(clients))
        lab = Lab("arrival-restarts", first, clients, served, run_dir, timelines=polls)
        published = published_at(first, 0)
        assert published is not None
        took["before"] = _timed(lab, BEFORE, a, published, "arrival_before")
        later = stack.enter_context(daemons_running(run_dir, port, LATER))
        clients.update(later)
        lab.timelines.update(stack.enter_context(timelines(later)))
        for name in LATER:
            wait_holds(clients[name], a, HOLD_TIMEOUT, serial=0)

        first.stop()  # (c) without --state: new session ids, export B
        replace_atomically(run_dir / "export-b.json", served)
        second = stack.enter_context(start_rtr_serve(served, run_dir / "second", port=port))
        lab.server = second
        since = second.first_time(r"listening for routers")
        assert since is not None
        took["restart"] = _timed(lab, DAEMONS, b, since, "arrival_restart")

        replace_atomically(run_dir / "export-a.json", served)  # read by the new image
        since, serial = restart_in_place(second)
        took["usr2"] = _timed(lab, DAEMONS, a, since, "arrival_usr2", serial=serial)

        # In place again, export A unchanged: the new image continues the session.
        _settled(lab, DAEMONS, a, serial)
        before = _kept_counts(lab, DAEMONS)
        since, serial = restart_in_place(second)
        took["usr2_same"] = _kept(lab, DAEMONS, a, since, "arrival_usr2_same", before, serial)

        second.stop()  # (c) with --state: export A recovered at start, then export B
        replace_atomically(run_dir / "export-b.json", served)
        third = stack.enter_context(
            start_rtr_serve(served, run_dir / "third", port=port, extra=state)
        )
        lab.server = third
        since = third.first_time(r"listening for routers")
        assert since is not None
        took["state"] = _timed(lab, DAEMONS, b, since, "arrival_state", serial=1)

        # In place with --state, the export unchanged: the new image serves the recovered B,
        # the content the old image served, so it continues its session ids and serial.
        _settled(lab, DAEMONS, b, 1)
        before = _kept_counts(lab, DAEMONS)
        since, serial = restart_in_place(third)
        took["usr2_state"] = _kept(lab, DAEMONS, b, since, "arrival_usr2_state", before, serial)
        try:
            yield Restarts(lab, a, b, took)
        finally:
            for client in clients.values():
                client.stop()


@pytest.mark.parametrize("name", DAEMONS)
def test_daemon_converges_within_5_s_after_kill_usr2(restarts: Restarts, name: str) -> None:
    """(c) ``kill -USR2`` without and with --state: the daemon keeps its connection and holds
    exactly the new table within 5 s of the new image's first publish (the issue's goal); with
    the same content it keeps its data and is sent nothing (0 s), with other content it gets
    the reset path (OpenBGPD: its random waits, `GOALS`)."""
    goal = GOALS.get(name, GOAL)
    assert restarts.took["usr2"][name] < goal, restarts.took
    assert restarts.took["usr2_same"][name] == 0.0, restarts.took
    assert restarts.took["usr2_state"][name] == 0.0, restarts.took


@pytest.mark.parametrize("name", BEFORE)
def test_daemon_started_before_rtr_serve_holds_the_table(restarts: Restarts, name: str) -> None:
    """(b) The daemon's own connect retry brings it to rtr-serve, and it holds export A."""
    assert restarts.took["before"][name] < BOUND, restarts.took


@pytest.mark.parametrize("name", DAEMONS)
def test_daemon_converges_after_restarts(restarts: Restarts, name: str) -> None:
    """(c) After a restart without --state (export B) and with --state (A, recovered), the
    daemon holds exactly the new table (checked in the fixture) well within its retry."""
    assert restarts.took["restart"][name] < BOUND, restarts.took
    assert restarts.took["state"][name] < BOUND, restarts.took
    peer = peer_name(restarts.lab.connection_port(name))
    story = peer_log(restarts.lab.server, peer)
    # One connection, kept through the in-place restart (the new image logs it as kept).
    kept = restarts.lab.server.count(rf"router {re.escape(peer)} connected \(kept through")
    if name == "openbgpd" and not kept:
        # OpenBGPD's own race (rtr_proto.c): after the unasked Cache Reset and the Notify its
        # retry and refresh timers can end in the same second, and it sends a Reset Query and
        # a Serial Query with session 65535. When both arrive in one read, the second gets the
        # empty delta (rtr_protocol.session_pipelined); when the Serial Query is read after our
        # answer began, it is Corrupt Data by RFC 8210 §5.1 and OpenBGPD redials (once).
        raced = restarts.lab.server.count(r"closed: session id 65535 differs from the \d+ we gave")
        summary.note(f"OpenBGPD redialled after its stray Serial Query (65535): {raced}")
        kept = raced
    assert (story.connected, kept) == (1, 1), story
    # The last connection's answer came from the restarted server: the full table after its
    # Cache Reset, or, for a daemon that redialled once more after that (OpenBGPD 7.7 did in
    # CI: two Serial Queries at once, two Cache Resets, it dropped the connection during the
    # second full table and came back), a Serial Query with the new session answered by the
    # empty delta. The exact table is checked in the fixture either way.
    assert story.resets or story.deltas, story


def test_gobgp_that_got_no_data_is_redialled_at_the_first_publish() -> None:
    """GoBGP 3.10 (v0) ignores a Serial Notify for serial 0 while its own serial is 0: after No
    Data Available (here the hold is cut to 0.5 s) it would wait minutes. rtr-serve closes its
    session at the first publish, and the redial gets the table."""
    run_dir = run_root() / "arrival-redial"
    run_dir.mkdir()
    served = run_dir / "served.json"  # does not exist yet: no data
    write_a(run_dir / "export-a.json")
    a = expected_from_export(run_dir / "export-a.json")
    with (
        start_rtr_serve(served, run_dir, extra=["--arrival-hold", "0.5"]) as server,
        daemons_running(run_dir, server.port, ["gobgp"]) as clients,
        timelines(clients) as polls,
    ):
        lab = Lab("arrival-redial", server, clients, served, run_dir, timelines=polls)
        server.wait_log(r"no data within the arrival hold", 60)
        replace_atomically(run_dir / "export-a.json", served)
        server.wait_log(r"published serial 0 ", 60)
        published = published_at(server, 0)
        assert published is not None
        wait_holds(clients["gobgp"], a, HOLD_TIMEOUT, serial=0)
        took = lab.held_time("gobgp", a, published, serial=0)
        assert server.count(r"closed: closed at the first data so the router redials") == 1
        story = lab.first_connection("gobgp")
        assert story.connected == 1, story
        assert [r.version for r in story.resets] == [0], story
        seconds = float(took.split()[0]) if took != "?" else HOLD_TIMEOUT
        assert seconds < BOUND, took
        summary.note(f"GoBGP after No Data: closed at the first publish, held the table +{took}")
        clients["gobgp"].stop()
