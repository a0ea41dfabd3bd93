"""rtr-serve restarts (new session id, new data): every client reloads, none loops (lab §9.1)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import pytest
from rtrclients import checks, procs, summary
from rtrclients.base import wait_holds
from rtrclients.edgeset import write_a, write_b
from rtrclients.lab import DAEMONS, Lab, daemons_running, replace_atomically, run_root, timelines
from rtrclients.serverlog import peer_log, peer_name, published_at
from rtrclients.vrps import Expected, expected_from_export
from rtrserve import RtrServe, start_rtr_serve

pytestmark = [pytest.mark.interop, pytest.mark.timeout(600)]

HOLD_TIMEOUT = 120.0
#: After the restart: BIRD and RTRlib retry after 10 s (the Retry Interval), BIRD waits another
#: retry after a Cache Reset, OpenBGPD adds 0-9 s, GoBGP redials a refused connection after 30 s.
RELOAD_TIMEOUT = 180.0


@dataclass
class Restart:
    """The lab after the restart: ``lab.server`` is the second rtr-serve on the same port."""

    lab: Lab
    first: RtrServe
    a: Expected
    b: Expected
    published: float


def session_ids(server: RtrServe) -> str:
    """The "v0/v1/v2" session ids a server published serial 0 with."""
    m = re.search(r"session ids v0/v1/v2 (\S+)\)", server.log)
    assert m is not None, server.log
    return m[1]


@pytest.fixture(scope="module")
def restart() -> Iterator[Restart]:
    """Daemons synced to export A; rtr-serve stopped, export B in place, rtr-serve started again."""
    run_dir = run_root() / "restart"
    run_dir.mkdir()
    served = run_dir / "served.json"
    write_a(served)
    write_b(run_dir / "export-b.json")
    a, b = expected_from_export(served), expected_from_export(run_dir / "export-b.json")
    port = procs.free_port()
    with ExitStack() as stack:
        first = stack.enter_context(start_rtr_serve(served, run_dir / "first", port=port))
        first.wait_log(r"published serial 0 ", 60)
        clients = stack.enter_context(daemons_running(run_dir, port, DAEMONS))
        polls = stack.enter_context(timelines(clients))
        lab = Lab("restart", first, clients, served, run_dir, timelines=polls)
        for name in DAEMONS:
            checks.full_load(lab, name, a, HOLD_TIMEOUT)
        first.stop()
        replace_atomically(run_dir / "export-b.json", served)
        for attempt in range(3):  # a new session id is what this test is about
            second = stack.enter_context(
                start_rtr_serve(served, run_dir / f"second-{attempt}", port=port)
            )
            second.wait_log(r"published serial 0 ", 60)
            if session_ids(second) != session_ids(first):
                break
            second.stop()
        lab.server = second
        published = published_at(second, 0)
        assert published is not None
        try:
            yield Restart(lab, first, a, b, published)
        finally:  # the daemons leave before the second rtr-serve stops (clean close lines)
            for client in clients.values():
                client.stop()


@pytest.mark.parametrize("name", DAEMONS)
def test_reload_after_restart(restart: Restart, name: str) -> None:
    """The daemon holds export B from the new rtr-serve over one new connection.

    A daemon that resumes with a Serial Query for the old session gets Cache Reset (never an
    Error Report, which makes RTRlib and OpenBGPD 7.7 livelock) and then sends a Reset Query.
    """
    lab = restart.lab
    client = lab.clients[name]
    wait_holds(client, restart.b, RELOAD_TIMEOUT, serial=0)
    story = peer_log(lab.server, peer_name(lab.connection_port(name)))
    assert story.connected == 1, story
    assert story.resets, story
    assert {r.version for r in story.resets} == {client.expected_version}, story
    assert story.closed == [], story
    # OpenBGPD may send two Serial Queries back to back on a new connection (lab §6): each gets
    # a Cache Reset, so their number is recorded, not asserted.
    held = lab.held_time(name, restart.b, restart.published, serial=0)
    how = f"Serial Query -> Cache Reset (x{story.cache_resets}) -> " if story.cache_resets else ""
    summary.record(name, restart=f"{how}Reset Query v{story.resets[0].version}; B held {held}")


def test_no_reconnect_loop_after_restart(restart: Restart) -> None:
    """Each daemon made exactly one connection to the new rtr-serve, and it is still open."""
    lab = restart.lab
    ports = {name: lab.connection_port(name) for name in DAEMONS}
    for name in DAEMONS:
        wait_holds(lab.clients[name], restart.b, RELOAD_TIMEOUT, serial=0)
    peers = {peer_name(p) for p in ports.values()}
    connected = re.findall(r"router (\S+) connected \(", lab.server.log)
    assert sorted(connected) == sorted(peers), connected
    assert lab.server.count(r" closed: ") == 0
    assert lab.server.count(r"refused router") == 0
