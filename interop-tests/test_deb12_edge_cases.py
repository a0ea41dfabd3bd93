"""Edge cases (AS0, 32-bit ASNs, /0, host routes, max lengths, duplicates, router keys)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from rtrclients import checks, summary
from rtrclients.base import wait_holds
from rtrclients.gobgp import GoBgp
from rtrclients.lab import DAEMONS, Lab, daemons_running, replace_atomically, run_root, timelines
from rtrclients.serverlog import peer_log, peer_name, published_at
from rtrclients.vrps import Expected, delta_bytes, expected_from_export
from rtrserve import REPO, start_rtr_serve

pytestmark = [pytest.mark.interop, pytest.mark.timeout(600)]

HOLD_TIMEOUT = 120.0
UPDATE_TIMEOUT = 120.0  # OpenBGPD waits 0-9 s after a Serial Notify
EXPIRES = 4_070_908_800  # 2099-01-01

#: The two P-256 lab keys of examples/make_example.py, as (SKI, base64 SPKI).
KEYS = [
    (k["ski"], k["pubkey"])
    for k in json.loads((REPO / "examples" / "rpki-client-example.json").read_text())[
        "bgpsec_keys"
    ][:2]
]

Roa = tuple[str, int, int, str]  # prefix, maxLength, asn, trust anchor

ROAS_A: list[Roa] = [
    ("0.0.0.0/0", 0, 0, "ta-a"),  # AS0 over all of IPv4
    ("0.0.0.0/0", 32, 64496, "ta-a"),  # /0 with max length 32
    ("::/0", 0, 0, "ta-a"),
    ("::/0", 128, 64497, "ta-a"),  # /0 with max length 128
    ("192.0.2.1/32", 32, 64496, "ta-a"),  # host routes
    ("2001:db8::1/128", 128, 64496, "ta-a"),
    ("192.0.2.0/24", 24, 0, "ta-a"),  # AS0
    ("2001:db8::/32", 48, 0, "ta-a"),
    ("198.51.100.0/24", 24, 4_200_000_000, "ta-a"),  # 32-bit (private use) ASN
    ("198.51.100.0/24", 32, 4_294_967_295, "ta-a"),  # the largest ASN
    ("2001:db8:1000::/36", 128, 4_200_000_000, "ta-a"),
    ("203.0.113.0/24", 24, 64496, "ta-a"),
    ("203.0.113.0/24", 24, 64496, "ta-b"),  # the same VRP from another TA: served once
    ("203.0.113.0/24", 24, 64497, "ta-b"),  # same prefix, another origin
    ("203.0.113.0/24", 26, 64496, "ta-b"),  # same prefix and origin, another max length
    ("2001:db8:2000::/48", 64, 65551, "ta-a"),
    ("2001:db8:2000::/48", 64, 65551, "ta-c"),  # duplicate across TAs (IPv6)
    ("10.0.0.0/8", 32, 64501, "ta-c"),  # max length 32 on a short prefix
    ("2001:db8:3000::/36", 128, 64501, "ta-c"),  # max length 128
]
REMOVED_IN_B = {
    ("0.0.0.0/0", 0, 0, "ta-a"),
    ("::/0", 128, 64497, "ta-a"),
    ("192.0.2.0/24", 24, 0, "ta-a"),
    ("203.0.113.0/24", 24, 64496, "ta-b"),  # its ta-a twin stays: nothing to withdraw
}
ADDED_IN_B: list[Roa] = [  # new prefixes, so OpenBGPD's prefix counts change as well
    ("192.0.2.0/25", 32, 4_200_000_001, "ta-a"),
    ("192.0.2.128/25", 25, 64496, "ta-b"),
    ("198.51.100.0/24", 24, 4_200_000_001, "ta-c"),  # one more origin: VRP counts change too
    ("2001:db8:ffff::/48", 48, 65535, "ta-c"),
]
ROAS_B = [r for r in ROAS_A if r not in REMOVED_IN_B] + ADDED_IN_B
KEYS_A = [(64496, *KEYS[0]), (4_200_000_000, *KEYS[1])]
KEYS_B = [(64496, *KEYS[0]), (65000, *KEYS[0])]  # one withdrawn; one key under a 2nd ASN
ASPAS_A = [(64496, [64497, 64498])]  # v2 only: none of these clients may get it
ASPAS_B = [(64496, [64497])]


def write_export(
    path: Path,
    roas: Sequence[Roa],
    keys: Sequence[tuple[int, str, str]],
    aspas: Sequence[tuple[int, list[int]]],
) -> None:
    """An rpki-client style export with a trust anchor per ROA, written atomically."""
    doc = {
        "metadata": {"buildmachine": "interop-tests", "buildtime": "2026-01-01T00:00:00Z"},
        "roas": [
            {"prefix": p, "maxLength": m, "asn": a, "ta": ta, "expires": EXPIRES}
            for p, m, a, ta in roas
        ],
        "bgpsec_keys": [
            {"asn": a, "ski": ski, "pubkey": spki, "ta": "ta-a", "expires": EXPIRES}
            for a, ski, spki in keys
        ],
        "aspas": [{"customer_asid": c, "providers": ps, "expires": EXPIRES} for c, ps in aspas],
    }
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(path)


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
    write_export(served, ROAS_A, KEYS_A, ASPAS_A)
    export_b = run_dir / "export-b.json"
    write_export(export_b, ROAS_B, KEYS_B, ASPAS_B)
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
    for client in edge.lab.clients.values():
        checks.wait_counts(client, edge.a, HOLD_TIMEOUT)
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
    assert result.delta.router_keys == (1, 1)  # counted in the log even where not sent (v0)
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

    rtr-serve counts router keys in the delta log line whatever the version; the byte counts
    show what was sent: exactly the prefix PDUs of a v0 answer.
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
    server = client.server()
    assert re.search(r"State:\s*Up", server), server
    assert re.search(r"Error:\s*0\b", server), server


def test_version_and_one_session_per_daemon(edge_update: EdgeLab) -> None:
    """Item 3: one connection per daemon at its version for the whole module, then close."""
    lab = edge_update.lab
    for name in DAEMONS:
        checks.close_and_check(lab, name, final_serial=1)
    assert lab.stray_connections() == []
    assert lab.server.count(r"refused router") == 0
