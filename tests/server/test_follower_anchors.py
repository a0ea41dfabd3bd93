"""Each stored source's own time: its ``evaluated_at`` as anchor, its own next change point.

`judge_state` judges each source at its own time (never another source's), the shared reader pins
each source's ``evaluated_at`` to its monotonic clock (`TimeKeeper.pin`, in
`persistence.shared.judging.ReaderTime`) and wakes for a change only in the kinds a source is
selected for; the owner stores the time a build judged each source at. Follower tests run on
real SQLite files written by the backend (see ``test_follower_time``, whose writer and follower
they share).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from persistence.shared.convert import judge_state
from persistence.shared.judging import ReaderTime, digests_of
from persistence.state import (
    NEVER,
    US_PER_SECOND,
    PersistedState,
    SourceRecord,
    StateHeader,
    StateId,
)
from snapshot.kinds import PayloadKind
from snapshot.model import Aspa
from tests.clock import FakeClock
from tests.server.helpers import wait_until
from tests.server.test_follower_time import (
    PROMPT,
    W,
    Writer,
    X,
    Y,
    following,
    names,
    prefixes,
    record,
)
from upstream.merge import SourceInput
from upstream.recovery import build_state, to_payload
from upstream.timekeeper import TimeKeeper

pytestmark = pytest.mark.anyio


def stored(*sources: tuple[str, float], written: float = W) -> tuple[StateHeader, PersistedState]:
    """A stored state of sources (name, evaluated_at), each with X's one VRP (ends at W + 60)."""
    state = PersistedState(
        store_id="s" * 32,
        state_id=StateId(1, 1),
        config_revision=1,
        serial=1,
        session_ids=(1, 2, 3),
        published_at=int(written * US_PER_SECOND),
        package_version="test",
        sources=tuple(
            replace(record(X), name=name, evaluated_at=int(evaluated * US_PER_SECOND))
            for name, evaluated in sources
        ),
    )
    header = StateHeader(
        schema_version=1,
        store_id=state.store_id,
        state_id=state.state_id,
        config_revision=1,
        serial=1,
        session_ids=(1, 2, 3),
        published_at=state.published_at,
        written_at=int(written * US_PER_SECOND),
        state_digest=b"",
        meta_digest=b"",
        package_version="test",
    )
    return header, state


# ------------------------------------------------------------------------------ judge_state


def test_each_source_is_judged_at_its_own_time_never_at_another_sources() -> None:
    # Both sources hold X (ends at W + 60). Source b's own time is already past it, a's is not:
    # a's entry stays (b's later time is not applied to it); the VRPs' usable-until is a's end,
    # taken back to the reader's time (a runs 10 s ahead of it).
    _, state = stored(("a", W), ("b", W))
    snapshot, until = judge_state(state, W, own={"a": W + 10, "b": W + 100})
    assert prefixes(snapshot) == names(X)
    assert until[PayloadKind.VRP] == W + 50
    only_b, _ = judge_state(replace(state, sources=state.sources[1:]), W, own={"b": W + 100})
    assert prefixes(only_b) == set()
    # Without a reader's anchors each is judged at its own stored evaluated_at.
    _, late = stored(("a", W), ("b", W + 100))
    snapshot, until = judge_state(replace(late, sources=late.sources[1:]), W)
    assert prefixes(snapshot) == set()
    snapshot, until = judge_state(late, W)
    assert prefixes(snapshot) == names(X)
    assert until[PayloadKind.VRP] == W + 60


def test_no_source_is_judged_before_the_floor_or_the_readers_time() -> None:
    # The reader raises its time to the state's write time before judging (and its own anchor
    # for the source stays below it): X, past its end by then, is not served.
    header, state = stored(("a", W - 100), written=W + 60)
    times = ReaderTime(FakeClock(wall=W), tolerance=300)
    now, own = times.judging(header, state, digests_of(state))
    assert now == W + 60
    assert own == {"a": W + 60}
    assert prefixes(judge_state(state, now, own=own)[0]) == set()
    assert prefixes(judge_state(stored(("a", W))[1], W + 61)[0]) == set()


# ------------------------------------------------------------------------------ TimeKeeper.pin


def test_a_pinned_anchor_advances_on_the_monotonic_clock_and_never_moves_back() -> None:
    clock = FakeClock(wall=W)
    keeper = TimeKeeper(clock)
    pinned = keeper.pin(W + 100)  # another process's evaluation time, ahead of the wall clock
    clock.advance(10)
    assert keeper.at(pinned) == W + 110
    assert keeper.at(None) == keeper.now() == W + 10  # nobody else's time is raised
    clock.move_wall(-500)  # set back: the anchor goes on with the monotonic clock
    clock.move_monotonic(5)
    assert keeper.at(pinned) == W + 115
    # The same data again with an earlier time keeps the anchor; a later one raises it.
    assert keeper.pin(W + 50, pinned) is pinned
    raised = keeper.pin(W + 200, pinned)
    assert keeper.at(raised) == W + 200


# ------------------------------------------------------------------------------ the follower


def vrps_and_aspas() -> SourceRecord:
    """A source able to give VRPs and ASPAs, selected for VRPs only; its ASPA expires first."""
    vrp = record(X, Y)
    return replace(
        vrp,
        capabilities=frozenset({"vrp", "aspa"}),
        aspas=((Aspa(64496, (64497,)), (W + 30) * US_PER_SECOND),),
    )


async def commit(writer: Writer, *sources: SourceRecord) -> StateId:
    """Commit ``sources`` as the writer's next state."""
    if not writer.backend.is_open:
        await writer.backend.open()
    state_id = StateId(1, 1 if writer.last is None else writer.last.generation + 1)
    state = PersistedState(
        store_id=writer.backend.store_id or "",
        state_id=state_id,
        config_revision=1,
        serial=state_id.generation,
        session_ids=(1, 2, 3),
        published_at=int(writer.clock.wall() * US_PER_SECOND),
        package_version="test",
        sources=sources,
    )
    await writer.backend.commit(state, writer.last)
    writer.last = state_id
    return state_id


async def test_an_expiry_in_a_kind_the_source_is_not_selected_for_changes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.sqlite"
    writer = Writer(path)
    await commit(writer, vrps_and_aspas())
    await writer.close()
    clock = FakeClock(wall=W + 1)
    async with following(path, clock) as run:
        await run.wait_serving(names(X, Y))
        published = len(run.views)
        clock.advance(30)  # the ASPA (not served) expired at W + 30; X expires at W + 60
        await anyio.sleep(PROMPT)
        assert len(run.views) == published  # no rebuild for a change in no served kind
        clock.advance(30)
        await run.wait_serving(names(Y))


async def test_a_source_removed_and_added_again_gets_no_life_back(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    writer = Writer(path)
    await commit(writer, record(X, Y))
    clock = FakeClock(wall=W + 1)
    async with following(path, clock) as run:
        await run.wait_serving(names(X, Y))
        clock.advance(70)  # X expired at W + 60
        await run.wait_serving(names(Y))
        # The owner's clock and the follower's are set back 200 s (within the tolerance); the
        # owner drops the source, then adds it again with the same representation.
        clock.move_wall(-200)
        clock.move_monotonic(1)
        writer.clock.set_wall(W - 128)
        without = await commit(writer)
        await wait_until(lambda: run.follower.status.state_id == without, what="the removal")
        await run.wait_serving(set())
        writer.clock.move_wall(1)
        again = await commit(writer, record(X, Y))
        published = len(run.views)
        await wait_until(
            lambda: run.follower.status.state_id == again and len(run.views) > published,
            what="the follower to publish the re-added source",
        )
        assert run.serves() == names(Y)
    await writer.close()


# ------------------------------------------------------------------------------ the owner


def test_the_owner_stores_the_time_each_source_was_judged_at() -> None:
    recorded = record(X, Y)
    source = SourceInput(
        name="export",
        group="default",
        kind="file",
        location=recorded.location,
        capabilities=frozenset({PayloadKind.VRP}),
        selected=frozenset({PayloadKind.VRP}),
        payload=to_payload(recorded),
        accepted_wall=W - 30,
    )
    late = replace(source, name="late", accepted_wall=W + 5)  # admitted after the build began
    state = build_state(
        store_id="s" * 32,
        state_id=StateId(1, 1),
        config_revision=1,
        serial=1,
        session_ids=(1, 2, 3),
        published_wall=W + 2,
        package_version="test",
        inputs=(source, late),
        observed_wall=W + 3,
        evaluated_wall=W,
    )
    assert [s.evaluated_at for s in state.sources] == [W * US_PER_SECOND, (W + 5) * US_PER_SECOND]
    assert state.observed_at == (W + 3) * US_PER_SECOND
    assert state.time_floor() == (W + 5) * US_PER_SECOND
    assert all(s.expires_at == NEVER for s in state.sources)
