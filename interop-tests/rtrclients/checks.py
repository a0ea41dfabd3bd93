"""The assertions shared by the real-table and edge-case phases, one function per step."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from rtrclients import summary
from rtrclients.base import Client, wait_holds
from rtrclients.bird import Bird
from rtrclients.frr import Frr
from rtrclients.gobgp import GoBgp
from rtrclients.lab import HOST, Lab
from rtrclients.openbgpd import OpenBgpd
from rtrclients.rtrclient import RtrClientLive
from rtrclients.rtrdump import Dump, dump
from rtrclients.serverlog import DeltaAnswer, connected_peers, peer_log, peer_name
from rtrclients.vrps import Expected, delta_bytes, v0_full_bytes, v1_full_bytes

CLOSED = re.compile(
    r"closed: (?P<reason>.*) \(version (?P<version>\S+), session \S+, serial (?P<serial>\S+), "
    r"(?P<resets>\d+) reset \+ (?P<serials>\d+) serial queries, (?P<notifies>\d+) notifies"
)


def full_bytes(expected: Expected, version: int) -> int:
    """Size of the full response rtr-serve must send at ``version`` (v0: no router keys)."""
    return v0_full_bytes(expected) if version == 0 else v1_full_bytes(expected)


def shown(lab: Lab, name: str, expected: Expected) -> str:
    """How a held set is written in the summary (OpenBGPD counts distinct prefixes)."""
    v4, v6 = lab.clients[name].target_counts(expected)
    unit = " prefixes" if lab.clients[name].count_basis == "prefixes" else ""
    keys = f" +{len(expected.router_keys)} keys" if lab.clients[name].lists_router_keys else ""
    return f"{v4:,}+{v6:,}{unit}{keys}"


def wait_counts(client: Client, expected: Expected, timeout: float) -> bool:
    """Wait (bounded) until the client's counts match ``expected``; False if they never did."""
    deadline = time.monotonic() + timeout
    target = client.target_counts(expected)
    while time.monotonic() < deadline:
        try:
            if client.counts() == target:
                return True
        except (RuntimeError, OSError, ValueError):
            pass
        time.sleep(0.5)
    return False


def own_view(lab: Lab, name: str) -> str:
    """What the daemon itself says about the session (only BIRD shows the version)."""
    client = lab.clients[name]
    if isinstance(client, Bird):
        p = client.protocol()
        return f"{p.get('Status')}, version {p.get('Protocol version')}"
    if isinstance(client, GoBgp):
        text = client.server()
        state = re.search(r"State:\s*(\S+)", text)
        return f"State {state[1] if state else '?'}"
    if isinstance(client, OpenBgpd):
        r = client.rtr()
        return f"session {r.get('session_id')}, serial {r.get('serial')}"
    if isinstance(client, Frr | RtrClientLive):
        return client.rtrlib_view()
    return "-"


def full_load(lab: Lab, name: str, expected: Expected, timeout: float) -> str:
    """The daemon holds ``expected`` over one connection that made one Reset Query.

    Returns the time from the daemon's start until it held the set (and how it is known).
    """
    client = lab.clients[name]
    wait_holds(client, expected, timeout, serial=0)
    story = lab.first_connection(name)
    lab.server.wait_log(rf"router {re.escape(story.peer)}: reset query", 10)
    story = lab.first_connection(name)
    assert story.connected == 1, story
    assert [r.version for r in story.resets] == [client.expected_version], story
    assert story.resets[0].serial == 0, story
    # The size proves what was sent: a v0 answer without router keys, no ASPA below v2.
    assert story.resets[0].size == full_bytes(expected, client.expected_version), story
    assert story.closed == [], story
    assert story.cache_resets == 0, story
    if isinstance(client, Bird):  # the only daemon that shows the negotiated version
        assert client.protocol().get("Protocol version") == str(client.expected_version)
    assert client.started_at is not None
    return lab.held_time(name, expected, client.started_at, serial=0)


@dataclass
class UpdateResult:
    """How one daemon took an update."""

    delta: DeltaAnswer
    sent_s: float
    held: str
    notifies: int | None


def update(
    lab: Lab,
    name: str,
    expected: Expected,
    published: float,
    *,
    from_serial: int,
    to_serial: int,
    vrp_changes: tuple[int, int],
    timeout: float,
    before: Expected | None = None,
) -> UpdateResult:
    """The daemon went from ``from_serial`` to ``to_serial`` by one delta on its connection.

    Serial Notify -> Serial Query: rtr-serve logged a delta answer on the daemon's original
    connection (no second Reset Query, no reconnect, no Cache Reset), and where the daemon
    logs it, it received the Serial Notify.
    """
    client = lab.clients[name]
    wait_holds(client, expected, timeout, serial=to_serial)
    port = lab.connection_port(name)
    remembered = lab.ports.setdefault(name, port)
    assert port == remembered, f"{name} reconnected: port {remembered} -> {port}"
    story = peer_log(lab.server, peer_name(port))
    assert story.connected == 1, story
    assert len(story.resets) == 1, f"{name} made another Reset Query: {story}"
    assert story.cache_resets == 0, story
    assert story.closed == [], story
    answers = [d for d in story.deltas if d.to_serial == to_serial and d.from_serial != to_serial]
    assert answers, f"{name}: no Serial Query answered with a delta to serial {to_serial}: {story}"
    first = answers[0]
    assert first.from_serial == from_serial, first
    assert first.vrps == vrp_changes, first
    assert first.version == client.expected_version, first
    if before is not None:  # the size proves which PDUs were sent (v0: no router keys)
        assert first.size == delta_bytes(before, expected, first.version), first
    notifies = client.notifies_received()
    assert notifies is None or notifies >= 1, f"{name} logged no Serial Notify"
    held = lab.held_time(name, expected, published, serial=to_serial)
    return UpdateResult(first, first.time - published, held, notifies)


def rtrdump_once(
    lab: Lab, version: int, *, serial: tuple[int, int] | None = None, timeout: float = 180
) -> tuple[Dump, str]:
    """Run rtrdump once and find its connection in the log; returns (dump, peer)."""
    before = set(connected_peers(lab.server))
    result = dump(lab.run_dir, HOST, lab.server.port, version, serial=serial, timeout=timeout)
    deadline = time.monotonic() + 10
    new: list[str] = []
    while time.monotonic() < deadline:
        new = [p for p in connected_peers(lab.server) if p not in before]
        if new and peer_log(lab.server, new[0]).closed:
            break
        time.sleep(0.1)
    assert len(new) == 1, f"expected one new connection for rtrdump, found {new}"
    lab.one_shots.append(new[0])
    return result, new[0]


def rtrdump_full(lab: Lab, version: int, expected: Expected) -> Dump:
    """rtrdump's Reset Query at ``version`` returns exactly ``expected`` (keys from v1 on)."""
    result, peer = rtrdump_once(lab, version)
    assert result.version == version
    assert result.serial is not None
    assert result.vrps == expected.vrps
    assert result.router_keys == (expected.router_keys if version >= 1 else set())
    story = peer_log(lab.server, peer)
    assert [(r.version, r.size) for r in story.resets] == [(version, full_bytes(expected, version))]
    return result


def session_ids(lab: Lab) -> dict[int, int]:
    """The per-version session ids from the "published serial 0" log line."""
    line = lab.server.lines(r"published serial 0 \(session ids")[0]
    m = re.search(r"session ids v0/v1/v2 (\d+)/(\d+)/(\d+)", line)
    assert m is not None, line
    return {0: int(m[1]), 1: int(m[2]), 2: int(m[3])}


def rtrdump_serial(
    lab: Lab, version: int, before: Expected, after: Expected, *, from_serial: int, to_serial: int
) -> DeltaAnswer:
    """A Serial Query from ``from_serial`` gets exactly the net difference before -> after."""
    session = session_ids(lab)[version]
    result, peer = rtrdump_once(lab, version, serial=(session, from_serial))
    assert (result.version, result.session_id, result.serial) == (version, session, to_serial)
    assert result.vrps == after.vrps - before.vrps
    assert result.withdrawn == before.vrps - after.vrps
    assert (before.vrps - result.withdrawn) | result.vrps == after.vrps
    story = peer_log(lab.server, peer)
    assert story.resets == [], story
    assert len(story.deltas) == 1, story
    assert story.deltas[0].size == delta_bytes(before, after, version), story
    return story.deltas[0]


def close_and_check(lab: Lab, name: str, final_serial: int) -> dict[str, str]:
    """Stop the daemon; its one connection closes at ``final_serial`` after ≥ 1 notify."""
    client = lab.clients[name]
    if name not in lab.ports:
        lab.ports[name] = lab.connection_port(name)
    peer = peer_name(lab.ports[name])
    assert client.running(), f"{name} is not running\n{client.log_tail()}"
    client.stop()
    lab.server.wait_log(rf"router {re.escape(peer)} closed", 15)
    story = peer_log(lab.server, peer)
    assert story.connected == 1, story
    assert len(story.closed) == 1, story
    line = lab.server.lines(rf"router {re.escape(peer)} closed")[0]
    m = CLOSED.search(line)
    assert m is not None, line
    assert m["version"] == str(client.expected_version), line
    assert m["serial"] == str(final_serial), line
    assert int(m["resets"]) == 1, line
    assert int(m["notifies"]) >= 1, line
    summary_cell = (
        f"1 conn; {m['resets']} reset + {m['serials']} serial q; "
        f"{m['notifies']} notify; {m['reason']}"
    )
    return {"line": line, "cell": summary_cell}


def record_full(lab: Lab, name: str, expected: Expected, load: str) -> None:
    """Summary cells of a full load."""
    client = lab.clients[name]
    summary.record(
        name,
        version=f"v{client.expected_version}",
        own_view=own_view(lab, name),
        full=shown(lab, name, expected),
        load_s=load,
    )
