"""Edge cases (AS0, 32-bit ASNs, /0, host routes, max lengths, duplicates, router keys)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from rtrclients import checks, summary
from rtrclients.base import wait_holds
from rtrclients.edgeset import ROAS_A, write_a, write_b
from rtrclients.gobgp import GoBgp
from rtrclients.lab import DAEMONS, Lab, daemons_running, replace_atomically, run_root, timelines
from rtrclients.serverlog import peer_log, peer_name, published_at
from rtrclients.vrps import Expected, delta_bytes, expected_from_export
from rtrserve import start_rtr_serve

pytestmark = [pytest.mark.interop, pytest.mark.timeout(600)]

HOLD_TIMEOUT = 120.0
UPDATE_TIMEOUT = 120.0  # OpenBGPD waits 0-9 s after a Serial Notify


@dataclass
class EdgeLab:
    """The lab and both expected sets."""

    lab: Lab
    a: Expected
    b: Expected
    published_b: float | None = None


@pytest.fixture(scope="module")
def edge() -> Iterator[EdgeLab]:
    """rtr-serve on export A (started first), then all five daemons."""
    run_dir = run_root() / "edge"
    run_dir.mkdir()
    served = run_dir / "served.json"
    write_a(served)
    export_b = run_dir / "export-b.json"
    write_b(export_b)
    a, b = expected_from_export(served), expected_from_export(export_b)
    with start_rtr_serve(served, run_dir) as server:
        server.wait_log(r"published serial 0 ", 60)
        with (
            daemons_running(run_dir, server.port, DAEMONS) as clients,
            timelines(clients) as polls,
        ):
            lab = Lab("edge", server, clients, served, run_dir, timelines=polls)
            yield EdgeLab(lab, a, b)


@pytest.fixture(scope="module")
def edge_update(edge: EdgeLab) -> EdgeLab:
    """Replace export A by export B once every daemon holds A (so each delta starts at 0)."""
    deadline = time.monotonic() + HOLD_TIMEOUT
    for client in edge.lab.clients.values():
        checks.wait_counts(client, edge.a, max(1.0, deadline - time.monotonic()))
    served = edge.lab.served
    replace_atomically(served.with_name("export-b.json"), served)
    edge.lab.server.wait_log(r"published serial 1[ :]", 60)
    edge.published_b = published_at(edge.lab.server, 1)
    return edge


def test_edge_expected_sets(edge: EdgeLab) -> None:
    """The independent computation de-duplicates across trust anchors."""
    assert len(ROAS_A) == 19
    assert edge.a.counts == (10, 7)
    assert edge.a.prefix_counts == (6, 6)
    assert len(edge.a.router_keys) == 2
    assert edge.b.counts == (11, 7)
    assert edge.b.prefix_counts == (7, 7)
    assert len(edge.b.vrps - edge.a.vrps) == 4
    assert len(edge.a.vrps - edge.b.vrps) == 3
    assert len(edge.a.router_keys ^ edge.b.router_keys) == 2


@pytest.mark.parametrize("name", DAEMONS)
def test_edge_set(edge: EdgeLab, name: str) -> None:
    """(c) The daemon holds exactly the edge set (rtrclient: router keys too)."""
    checks.full_load(edge.lab, name, edge.a, HOLD_TIMEOUT)
    summary.record(name, edge=f"A {checks.shown(edge.lab, name, edge.a)}")


@pytest.mark.parametrize("version", [0, 1])
def test_rtrdump_edge_set(edge: EdgeLab, version: int) -> None:
    """(c) rtrdump gets the edge set; the two router keys at v1 only."""
    result = checks.rtrdump_full(edge.lab, version, edge.a)
    keys = len(result.router_keys)
    summary.record(f"rtrdump-v{version}", edge=f"A {len(result.vrps)} +{keys} keys")


@pytest.mark.parametrize("name", DAEMONS)
def test_edge_update(edge_update: EdgeLab, name: str) -> None:
    """(c) The delta A -> B (/0 and AS0 withdrawn, router key swapped) is applied exactly."""
    assert edge_update.published_b is not None
    result = checks.update(
        edge_update.lab,
        name,
        edge_update.b,
        edge_update.published_b,
        from_serial=0,
        to_serial=1,
        vrp_changes=(4, 3),
        timeout=UPDATE_TIMEOUT,
        before=edge_update.a,
    )
    # The log counts only what the version carries: the key swap at v1, nothing at v0.
    keys = (1, 1) if result.delta.version >= 1 else (0, 0)
    assert result.delta.router_keys == keys
    cell = f"A ok; B {checks.shown(edge_update.lab, name, edge_update.b)} held {result.held}"
    summary.record(name, edge=cell)


@pytest.mark.parametrize("version", [0, 1])
def test_rtrdump_edge_serial_query(edge_update: EdgeLab, version: int) -> None:
    """(c) rtrdump's Serial Query 0 -> 1 gets +4/-3 VRPs (and the key swap at v1 only)."""
    delta = checks.rtrdump_serial(
        edge_update.lab, version, edge_update.a, edge_update.b, from_serial=0, to_serial=1
    )
    assert delta.vrps == (4, 3)


def test_gobgp_v0_without_router_keys(edge_update: EdgeLab) -> None:
    """Item 3: GoBGP's session is v0, gets no Router Key PDU, and stays up across the update.

    The byte counts show what was sent: exactly the prefix PDUs of a v0 answer, although the
    delta withdraws one router key and announces another.
    """
    lab = edge_update.lab
    client = lab.clients["gobgp"]
    assert isinstance(client, GoBgp)
    wait_holds(client, edge_update.b, UPDATE_TIMEOUT, serial=1)
    story = peer_log(lab.server, peer_name(lab.connection_port("gobgp")))
    assert story.versions == {0}
    assert story.connected == 1
    assert story.closed == []
    assert story.resets[0].size == checks.full_bytes(edge_update.a, 0)
    assert all(d.size == delta_bytes(edge_update.a, edge_update.b, 0) for d in story.deltas)
    assert all(d.router_keys == (0, 0) for d in story.deltas), story.deltas
    server = client.server()
    assert re.search(r"State:\s*Up", server), server
    assert re.search(r"Error:\s*0\b", server), server


def test_version_and_one_session_per_daemon(edge_update: EdgeLab) -> None:
    """Item 3: one connection per daemon at its version for the whole module, then close."""
    lab = edge_update.lab
    for name in DAEMONS:
        result = checks.close_and_check(lab, name, final_serial=1)
        summary.record(name, edge_sessions=result["cell"])
    assert lab.stray_connections() == []
    assert lab.server.count(r"refused router") == 0
