"""`plan_recovery` (pure): what a restart takes over from a stored state, and what it keeps."""

from __future__ import annotations

from array import array

from persistence.exchange import state_digest
from persistence.state import NEVER, PersistedState, SourceRecord, StateHeader, StateId
from snapshot.model import pack_v4
from tests.clock import FakeClock
from tests.upstream.scripted_source import ScriptedSource
from upstream.recovery import SourceIdentity, plan_recovery
from upstream.source_entry import SourceEntry
from upstream.timekeeper import TimeKeeper

W = 1_800_000_000
US = 1_000_000


def rtr_state(expires_at: int) -> tuple[StateHeader, PersistedState]:
    record = SourceRecord(
        name="cache",
        group="default",
        kind="rtr",
        location="rtr://192.0.2.1:323",
        complete=True,
        capabilities=frozenset({"vrp", "router_key", "aspa"}),
        selected=frozenset({"vrp", "router_key", "aspa"}),
        accepted_at=W * US,
        expires_at=expires_at,
        rtr_session=7,
        rtr_serial=42,
        v4=pack_v4(0xC0000200, 24, 24, 64496),
        v4_expires=array("q", [NEVER]),
    )
    state = PersistedState("store", StateId(1, 1), 0, 3, (1, 2, 3), W * US, "t", (record,))
    digest = state_digest(state)
    header = StateHeader(
        2, "store", StateId(1, 1), 0, 3, (1, 2, 3), W * US, W * US, digest, b"", "t"
    )
    return header, state


def test_an_rtr_source_keeps_its_deadline_and_session_across_a_restart() -> None:
    """The cache's End of Data + Expire is not restarted by a restart (contract P-55): the
    recovered entry expires at the stored deadline, judged in effective time."""
    header, state = rtr_state(expires_at=(W + 600) * US)
    identity = SourceIdentity("cache", "rtr", "rtr://192.0.2.1:323")
    plan = plan_recovery(header, state, [identity], wall=W + 10, clock_tolerance=300)
    recovered = plan.recovered["cache"]
    assert recovered.expires_at == W + 600
    assert (recovered.rtr_session, recovered.rtr_serial) == (7, 42)
    assert plan.snapshot is not None
    assert plan.snapshot.vrp_count == 1

    clock = FakeClock(wall=W + 10)
    keeper = TimeKeeper(clock)
    entry = SourceEntry(ScriptedSource("cache", kind="rtr", online=True), "default")
    entry.seed(recovered, keeper)
    assert entry.availability(keeper.now()).value == "ready"
    clock.move_monotonic(591)  # ten minutes after the stored sync, in effective time
    assert entry.availability(keeper.now()).value == "expired"


def test_a_deadline_already_past_revives_nothing() -> None:
    header, state = rtr_state(expires_at=(W - 1) * US)
    identity = SourceIdentity("cache", "rtr", "rtr://192.0.2.1:323")
    plan = plan_recovery(header, state, [identity], wall=W + 10, clock_tolerance=300)
    assert plan.recovered == {}
    assert plan.snapshot is None
