"""`rtr_server.admission.Admission`: silent connections make way at the caps; sessions never do."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rtr_server.admission import PRESSURE_QUERY_TIMEOUT, Admission, Ticket


class Evictions:
    """Records which connections were evicted, by name."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def of(self, name: str) -> object:
        return lambda: self.names.append(name)


def admit(admission: Admission, ip: str, name: str, evictions: Evictions) -> Ticket:
    ticket = admission.admit(ip, evictions.of(name))  # type: ignore[arg-type]
    assert isinstance(ticket, Ticket), ticket
    return ticket


def test_at_the_global_cap_the_oldest_silent_connection_makes_way() -> None:
    ev = Evictions()
    a = Admission(max_connections=3, max_per_ip=10)
    first = admit(a, "192.0.2.1", "first", ev)
    admit(a, "192.0.2.2", "second", ev)
    admit(a, "192.0.2.3", "third", ev)
    a.negotiated(first)  # a router session: never evicted
    admit(a, "192.0.2.4", "router", ev)
    assert ev.names == ["second"]
    assert (a.admitted, a.silent) == (3, 2)
    assert a.stats.evicted == {"max_connections": 1}


def test_only_when_every_connection_is_a_session_is_the_newcomer_refused() -> None:
    ev = Evictions()
    a = Admission(max_connections=2, max_per_ip=10)
    for name in ("a", "b"):
        a.negotiated(admit(a, "192.0.2.1", name, ev))
    assert a.admit("192.0.2.9", ev.of("c")) == "max_connections"  # type: ignore[arg-type]
    assert ev.names == []
    assert a.stats.refused == {"max_connections": 1}


def test_per_address_the_oldest_silent_connection_of_that_address_makes_way() -> None:
    ev = Evictions()
    a = Admission(max_connections=100, max_per_ip=2)
    admit(a, "198.51.100.7", "flood-1", ev)
    admit(a, "198.51.100.8", "other", ev)
    admit(a, "198.51.100.7", "flood-2", ev)
    admit(a, "198.51.100.7", "router", ev)  # behind the flood's own address
    assert ev.names == ["flood-1"]
    assert a.count_for("198.51.100.7") == 2
    assert a.stats.evicted == {"max_per_ip": 1}
    sessions = Admission(max_connections=100, max_per_ip=1)
    sessions.negotiated(admit(sessions, "198.51.100.7", "s", ev))
    assert sessions.admit("198.51.100.7", ev.of("x")) == "max_per_ip"  # type: ignore[arg-type]


def test_release_is_idempotent_and_an_evicted_ticket_is_released_already() -> None:
    ev = Evictions()
    a = Admission(max_connections=1, max_per_ip=1)
    old = admit(a, "192.0.2.1", "old", ev)
    admit(a, "192.0.2.2", "new", ev)
    a.release(old)  # its task ends after the eviction
    a.release(old)
    assert a.admitted == 1


def test_pressure_shrinks_the_pre_query_timeout_and_is_logged_once_per_episode(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ev = Evictions()
    a = Admission(max_connections=20, max_per_ip=100)
    caplog.set_level(logging.WARNING, "rtr_server.admission")
    tickets = [admit(a, "192.0.2.1", str(i), ev) for i in range(17)]
    assert a.query_timeout(60.0) == 60.0
    tickets += [admit(a, "192.0.2.1", str(i), ev) for i in range(17, 40)]  # 20 evicted
    assert a.under_pressure
    assert a.query_timeout(60.0) == PRESSURE_QUERY_TIMEOUT
    assert a.query_timeout(2.0) == 2.0  # never above the configured one
    for ticket in tickets:
        a.release(ticket)
    assert a.query_timeout(60.0) == 60.0  # the episode is over
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("admission under pressure: 18 of 20")
    assert "20 evicted max_connections" in lines[1]
    assert a.stats.pressure_episodes == 1


@given(
    st.lists(
        st.tuples(st.sampled_from(["admit", "negotiate", "release"]), st.integers(0, 4)),
        max_size=120,
    ),
    st.integers(1, 6),
    st.integers(1, 4),
)
def test_caps_hold_and_no_session_is_ever_evicted(
    steps: list[tuple[str, int]], max_connections: int, max_per_ip: int
) -> None:
    a = Admission(max_connections, max_per_ip)
    live: list[Ticket] = []
    evicted: list[Ticket] = []
    sessions: set[int] = set()

    def evictor(box: list[Ticket]) -> Callable[[], None]:
        return lambda: evicted.append(box[0])

    for op, n in steps:
        if op == "admit":
            ip = f"192.0.2.{n}"
            box: list[Ticket] = []
            result = a.admit(ip, evictor(box))
            if isinstance(result, Ticket):
                box.append(result)
                live.append(result)
            else:  # refused: nothing silent could make way
                pool = [t for t in live if not t.released]
                if result == "max_per_ip":
                    pool = [t for t in pool if t.peer_ip == ip]
                assert pool
                assert all(not t.silent for t in pool)
        elif live:
            ticket = live[n % len(live)]
            if op == "negotiate":
                if not ticket.released:
                    sessions.add(id(ticket))
                a.negotiated(ticket)
            else:
                a.release(ticket)
        assert all(t.released and id(t) not in sessions for t in evicted)
        alive = [t for t in live if not t.released]
        assert a.admitted == len(alive) <= max_connections
        assert all(a.count_for(t.peer_ip) <= max_per_ip for t in alive)
