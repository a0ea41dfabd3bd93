"""A state follower's time rules (``--state-reader``), on real SQLite files written by the backend.

The follower's clock is moved by hand (wall and monotonic); the writer's wall clock too, which
fixes each state's ``written_at``. Covered: expiry on the follower's own timer (writer gone,
poll slow or blocked in SQL), a jump forward then back, a wall clock set back (the floor is
carried on the monotonic clock), refusing a state whose write time is too far ahead of the wall
clock, a read failure, and overlapping rebuilds published one at a time, newest last.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from array import array
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from persistence.errors import TransientError
from persistence.location import StateLocation
from persistence.state import (
    NEVER,
    US_PER_SECOND,
    PersistedState,
    SourceRecord,
    StateHeader,
    StateId,
)
from rtr_server.app import App
from rtr_server.app_config import AppConfig
from rtr_server.follower import StateFollower
from snapshot.model import pack_v4
from snapshot.snapshot import Snapshot
from tests.clock import FakeClock
from tests.server.helpers import RouterState, settings, wait_until
from tests.server.rtr_client import TIMEOUT, RtrClient

pytestmark = pytest.mark.anyio

#: The writer's wall clock at the first commit (2027-01-15).
W = 1_800_000_000
#: Entry X expires a minute after the first commit; Y never does.
X = ("192.0.2.0/24", 64496, W + 60)
Y = ("198.51.100.0/24", 64497, None)
Z = ("203.0.113.0/24", 64498, None)
#: How soon a change of the follower's clock must be acted upon (the timer re-checks every 1 s).
PROMPT = 2.5


def record(*entries: tuple[str, int, int | None]) -> SourceRecord:
    """One file source selected for VRPs, with (prefix, ASN, expires or None) entries."""
    rows = []
    for prefix, asn, expires in entries:
        net = ipaddress.IPv4Network(prefix)
        key = pack_v4(int(net.network_address), net.prefixlen, net.prefixlen, asn)
        rows.append((key, NEVER if expires is None else expires * US_PER_SECOND))
    rows.sort(reverse=True)
    return SourceRecord(
        name="export",
        group="default",
        kind="file",
        location="/var/lib/rpki/export.json",
        complete=True,
        capabilities=frozenset({"vrp"}),
        selected=frozenset({"vrp"}),
        accepted_at=W * US_PER_SECOND,
        v4=b"".join(k for k, _ in rows),
        v4_expires=array("q", [e for _, e in rows]),
    )


class Writer:
    """The owner: a real SQLite backend whose wall clock (hence ``written_at``) the test sets."""

    def __init__(self, path: Path) -> None:
        self.clock = FakeClock(wall=float(W))
        self.backend = StateLocation("sqlite", path).make_backend(wall=self.clock.wall)
        self.last: StateId | None = None

    async def commit(self, *entries: tuple[str, int, int | None]) -> StateId:
        if not self.backend.is_open:
            await self.backend.open()
        state_id = StateId(1, 1 if self.last is None else self.last.generation + 1)
        state = PersistedState(
            store_id=self.backend.store_id or "",
            state_id=state_id,
            config_revision=1,
            serial=state_id.generation,
            session_ids=(1, 2, 3),
            published_at=int(self.clock.wall() * US_PER_SECOND),
            package_version="test",
            sources=(record(*entries),),
        )
        await self.backend.commit(state, self.last)
        self.last = state_id
        return state_id

    async def close(self) -> None:
        """The writer is gone."""
        await self.backend.close()


def prefixes(snapshot: Snapshot) -> set[str]:
    return {str(v.prefix) for v in snapshot.vrps()}


def names(*entries: tuple[str, int, int | None]) -> set[str]:
    return {prefix for prefix, _, _ in entries}


class Following:
    """A running follower and every view it published."""

    def __init__(self, follower: StateFollower, views: list[Snapshot]) -> None:
        self.follower = follower
        self.views = views

    def trusted(self) -> bool:
        """Whether the follower trusts the state it read last."""
        return self.follower.status.trusted

    def serves(self) -> set[str] | None:
        """The prefixes of the last view published (None: nothing published yet)."""
        return prefixes(self.views[-1]) if self.views else None

    async def wait_serving(self, expected: set[str], within: float = PROMPT) -> None:
        await wait_until(
            lambda: self.serves() == expected, within, f"the follower to serve {sorted(expected)}"
        )


@asynccontextmanager
async def following(
    path: Path, clock: FakeClock, *, poll: float = 0.05
) -> AsyncIterator[Following]:
    """Run a `StateFollower` on ``path`` (read-only) until the block ends."""
    views: list[Snapshot] = []

    async def publish(snapshot: Snapshot) -> None:
        views.append(snapshot)

    follower = StateFollower(path, clock, publish, poll=poll)
    async with anyio.create_task_group() as tg:
        tg.start_soon(follower.run)
        yield Following(follower, views)
        tg.cancel_scope.cancel()


class GatedReads:
    """A follower's header reads, held on its reader's owner thread or failing, when told.

    Once `hold` is called, the next header read blocks in the owner thread (as a read stuck in
    SQL does) until `release`; while ``failing`` is set, header reads fail with a transient
    driver error. The real read runs otherwise (the shared reader's store, patched in place).
    """

    def __init__(self, follower: StateFollower) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.blocked = False
        self.failing = False
        store = follower.reader._store
        inner = store.read_header_sync

        def read_header_sync() -> StateHeader | None:
            if self.failing:
                raise TransientError("sqlite SQLITE_IOERR: disk I/O error")
            if not self.gate.is_set():
                self.blocked = True
                self.gate.wait()
                self.blocked = False
            return inner()

        store.read_header_sync = read_header_sync  # type: ignore[method-assign]

    def hold(self) -> None:
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()


# ------------------------------------------------------------------------------ expiry timer


async def routed(app: App) -> set[str]:
    """The IPv4 prefixes a v1 router holds after a Reset Query to ``app``."""
    host, port = app.server.addresses[0]
    async with await RtrClient.connect(port, host) as client:
        response = await client.reset(1)
    held = RouterState().apply(response.payload)
    return {str(ipaddress.IPv4Network((p[1], p[2]))) for p in held.prefixes if p[0] == 4}


async def test_routers_of_a_follower_lose_an_entry_past_a_clock_jump(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    writer = Writer(path)
    await writer.commit(X, Y)
    await writer.close()
    clock = FakeClock(wall=W + 1)
    config = AppConfig(
        server=settings(), state_reader=StateLocation("sqlite", path), reader_poll=30
    )
    async with anyio.create_task_group() as tg:
        app = App(config, clock)
        with anyio.fail_after(TIMEOUT):
            await tg.start(app.run)
        await wait_until(lambda: app.state is not None, what="the follower's first publish")
        assert await routed(app) == names(X, Y)
        clock.set_wall(W + 61)
        await wait_until(
            lambda: app.state is not None and app.state.snapshot.vrp_count == 1,
            PROMPT,
            "X withdrawn",
        )
        assert await routed(app) == names(Y)
        tg.cancel_scope.cancel()


async def test_a_wall_clock_jump_expires_entries_without_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    writer = Writer(path)
    await writer.commit(X, Y)
    await writer.close()  # the writer is gone: no header will ever change again
    clock = FakeClock(wall=W + 1)
    # A slow poll: expiry must not wait for it.
    async with following(path, clock, poll=30) as run:
        await run.wait_serving(names(X, Y))
        clock.set_wall(W + 61)  # jumped forward past X's expiry; no monotonic time passed
        await run.wait_serving(names(Y))


async def test_after_a_jump_forward_and_back_expired_entries_stay_withdrawn(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.sqlite"
    writer = Writer(path)
    await writer.commit(X, Y)
    await writer.close()
    clock = FakeClock(wall=W + 1)
    async with following(path, clock) as run:
        await run.wait_serving(names(X, Y))
        clock.set_wall(W + 61)
        await run.wait_serving(names(Y))
        clock.set_wall(W + 2)  # the jump is undone
        clock.move_monotonic(1)
        published = len(run.views)
        run.follower.policy_changed()  # a rebuild (as a SLURM reload makes) judges again
        await wait_until(lambda: len(run.views) > published, what="the rebuild's view")
        assert run.serves() == names(Y)
        await anyio.sleep(1.5)  # timer ticks change nothing
        assert run.serves() == names(Y)


async def test_the_floor_advances_on_the_monotonic_clock_when_the_wall_is_set_back(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.sqlite"
    writer = Writer(path)
    await writer.commit(X, Y)
    await writer.close()
    clock = FakeClock(wall=W + 1)
    async with following(path, clock) as run:
        await run.wait_serving(names(X, Y))
        # 70 s pass on the monotonic clock while the wall clock is set back 100 s: by the
        # follower's own time X expired at W + 60 although the wall clock says W - 29.
        clock.move_monotonic(70)
        clock.set_wall(W + 1 + 70 - 100)
        await run.wait_serving(names(Y))
        assert run.follower.reader.now() == W + 71


async def test_a_set_back_clock_and_an_old_write_time_revive_nothing(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    writer = Writer(path)
    await writer.commit(X, Y)
    clock = FakeClock(wall=W + 1)
    async with following(path, clock) as run:
        await run.wait_serving(names(X, Y))
        clock.advance(70)  # X expires at W + 60
        await run.wait_serving(names(Y))
        # The machine's clock is set back 200 s (within the 300 s tolerance); the writer
        # commits again, its write time now before X's expiry.
        clock.move_wall(-200)
        clock.move_monotonic(1)
        writer.clock.set_wall(W - 128)
        published = len(run.views)
        second = await writer.commit(X, Y)
        await wait_until(
            lambda: run.follower.status.state_id == second and len(run.views) > published,
            what="the follower to publish the second state",
        )
        # Judged at the carried floor (W + 72), not at max(wall, written_at) = W - 128.
        assert run.serves() == names(Y)
    await writer.close()


async def test_expiry_is_not_delayed_by_a_poll_blocked_in_sql(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    writer = Writer(path)
    await writer.commit(X, Y)
    clock = FakeClock(wall=W + 1)
    try:
        async with following(path, clock) as run:
            gated = GatedReads(run.follower)
            try:
                await run.wait_serving(names(X, Y))
                gated.hold()
                await wait_until(lambda: gated.blocked, what="the poll to block in a read")
                clock.set_wall(W + 61)
                await run.wait_serving(names(Y))
                assert gated.blocked  # expired while the poll was still stuck
            finally:
                gated.release()
    finally:
        await writer.close()


# ------------------------------------------------------------------------------ trust


async def test_a_wall_clock_too_far_behind_the_write_time_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "state.sqlite"
    writer = Writer(path)
    await writer.commit(X, Y)
    clock = FakeClock(wall=W + 1)
    async with following(path, clock) as run:
        await run.wait_serving(names(X, Y))
        # The next state is written 398 s ahead of the follower's wall clock (tolerance 300).
        clock.advance(1)
        writer.clock.set_wall(W + 400)
        with caplog.at_level(logging.WARNING, logger="persistence.shared.client"):
            second = await writer.commit(X, Y, Z)
            await run.wait_serving(set())  # what was served is withdrawn
            assert run.follower.status.state_id == second
            assert not run.trusted()
            await anyio.sleep(1.5)  # timer ticks: still refused, no second warning
            assert run.serves() == set()
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1, warnings
        assert "398 s behind" in warnings[0]
        assert "300 s clock tolerance" in warnings[0]
        # The wall clock catches up to within the tolerance: the state is trusted, judged at
        # its write time (X expired by then).
        clock.advance(150)
        await run.wait_serving(names(Y, Z))
        assert run.trusted()
    await writer.close()


async def test_a_refused_state_is_trusted_when_a_newer_one_passes(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    writer = Writer(path)
    writer.clock.set_wall(W + 1000)
    await writer.commit(X, Y, Z)
    clock = FakeClock(wall=W + 1)
    async with following(path, clock) as run:
        await wait_until(lambda: run.follower.status.reads == 1, what="the first read")
        await anyio.sleep(0.3)
        assert run.views == []  # refused before anything was served: not even an empty set
        assert not run.trusted()
        writer.clock.set_wall(W + 2)
        await writer.commit(X, Y)
        await run.wait_serving(names(X, Y))
        assert run.trusted()
    await writer.close()


# ------------------------------------------------------------------------------ failures, races


async def test_a_read_failure_keeps_the_view_only_until_it_expires(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    writer = Writer(path)
    await writer.commit(X, ("203.0.113.0/24", 64498, W + 120))
    await writer.close()
    clock = FakeClock(wall=W + 1)
    async with following(path, clock) as run:
        failing = GatedReads(run.follower)
        await run.wait_serving({"192.0.2.0/24", "203.0.113.0/24"})
        failing.failing = True
        await wait_until(lambda: run.follower.status.errors > 0, what="a failed read")
        clock.advance(60)
        await run.wait_serving({"203.0.113.0/24"})
        clock.advance(60)
        await run.wait_serving(set())  # all expired: withdrawn
        assert run.follower.status.last_error is not None
        failing.failing = False  # the same header reads again: the error is cleared
        await wait_until(lambda: run.follower.status.last_error is None, what="the error cleared")


async def test_overlapping_rebuilds_publish_one_at_a_time_newest_last(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    writer = Writer(path)
    await writer.commit(X, Y)
    clock = FakeClock(wall=W + 1)
    views: list[Snapshot] = []
    active = 0
    most = 0
    entered = anyio.Event()

    async def slow_publish(snapshot: Snapshot) -> None:
        nonlocal active, most
        active += 1
        most = max(most, active)
        entered.set()
        await anyio.sleep(0.3)
        views.append(snapshot)
        active -= 1

    follower = StateFollower(path, clock, slow_publish, poll=0.05)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(follower.run)
            with anyio.fail_after(5):
                await entered.wait()
            # While the first view is being published: X expires (timer), a new state comes
            # (poll) and the SLURM policy changes (timer again).
            clock.set_wall(W + 61)
            third = ("192.0.2.128/25", 64499, None)
            await writer.commit(X, Y, third)
            follower.policy_changed()
            await wait_until(
                lambda: bool(views) and prefixes(views[-1]) == names(Y, third),
                what="the newest view",
            )
            await anyio.sleep(0.8)
            assert prefixes(views[-1]) == names(Y, third)
            assert most == 1
            tg.cancel_scope.cancel()
    finally:
        await writer.close()
