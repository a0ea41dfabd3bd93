"""Groups end to end through the aggregator: failover, fail-back, start-up, configuration commits.

Real file sources where the file system says it all (a missing file, a slow first read);
`ScriptedSource` where the test must decide a source's health (a cache that can no longer
refresh) without waiting out real intervals. The monotonic clock is moved by the test.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream

from snapshot.snapshot import Snapshot
from tests.clock import FakeClock
from tests.upstream.helpers import A, B, dumps, export, roa, slow_builds, wait_for, write_atomically
from tests.upstream.scripted_source import ScriptedSource, payload
from upstream.aggregate import Aggregator, Build, Group
from upstream.client import Client
from upstream.config import ClientConfig, GroupConfig, SourceConfig
from upstream.file_source import FileSource
from upstream.json_format import parse_export
from upstream.payload import SourcePayload
from upstream.selection import GroupSpec, PayloadKind
from upstream.source import Delivery, DeliverySink, Source

pytestmark = pytest.mark.anyio


@dataclass
class Run:
    aggregator: Aggregator
    builds: MemoryObjectReceiveStream[Build]
    clock: FakeClock

    async def until(self, predicate: Callable[[Snapshot], bool], within: float = 5.0) -> Snapshot:
        """The first snapshot for which ``predicate(snapshot)`` holds."""
        with anyio.fail_after(within):
            while True:
                build = await self.builds.receive()
                if predicate(build.snapshot):
                    return build.snapshot

    def jump(self, seconds: float) -> None:
        self.clock.move_monotonic(seconds)
        self.aggregator.poke()


@asynccontextmanager
async def running(groups: list[Group]) -> AsyncIterator[Run]:
    send, receive = anyio.create_memory_object_stream[Build](100)
    clock = FakeClock(wall=1_700_000_000.0, monotonic="real")

    async def on_snapshot(build: Build) -> None:
        await send.send(build)

    aggregator = Aggregator([], on_snapshot, clock=clock, groups=groups)
    with send, receive:
        async with anyio.create_task_group() as tg:
            await tg.start(aggregator.run)
            run = Run(aggregator, receive, clock)
            await wait_for(lambda: bool(aggregator.started_groups()))
            yield run
            tg.cancel_scope.cancel()


def source(path: Path, name: str) -> FileSource:
    return FileSource(path, name=name, poll_interval=0.05)


def has(snap: Snapshot, vrps: list[tuple[str, int, int]]) -> bool:
    return {(str(v.prefix), v.max_length, v.asn) for v in snap.vrps()} == set(vrps)


def two_groups(primary: Source, backup: Source, failback: float = 300.0) -> list[Group]:
    return [
        Group(GroupSpec("primary", 10, startup_timeout=30, failback_delay=failback), (primary,)),
        Group(GroupSpec("backup", 20, startup_timeout=30, failback_delay=failback), (backup,)),
    ]


class GatedFile(FileSource):
    """A file source whose first look waits for ``gate`` (a slow first load)."""

    def __init__(self, path: Path, name: str, gate: anyio.Event) -> None:
        super().__init__(path, name=name, poll_interval=0.05)
        self.gate = gate

    async def check(self, sink: DeliverySink) -> bool:
        await self.gate.wait()
        return await super().check(sink)


async def test_primary_file_missing_at_start_backup_starts_at_once(tmp_path: Path) -> None:
    """A primary that fails its first attempt does not make the backup wait its window (item 7)."""
    primary, backup = tmp_path / "a.json", tmp_path / "b.json"
    write_atomically(backup, export(B))
    async with running(two_groups(source(primary, "a"), source(backup, "b"))) as run:
        await run.until(lambda s: has(s, B), within=2)
        assert run.aggregator.active[PayloadKind.VRP] == "backup"


async def test_slow_primary_backup_starts_after_the_startup_timeout(tmp_path: Path) -> None:
    primary, backup = tmp_path / "a.json", tmp_path / "b.json"
    write_atomically(primary, export(A))
    write_atomically(backup, export(B))
    gate = anyio.Event()
    async with running(two_groups(GatedFile(primary, "a", gate), source(backup, "b"))) as run:
        await anyio.sleep(0.3)
        assert "backup" not in run.aggregator.started_groups()
        run.jump(30)
        await run.until(lambda s: has(s, B))
        assert run.aggregator.active[PayloadKind.VRP] == "backup"
        gate.set()
        await wait_for(lambda: run.aggregator.entries["a"].payload is not None)
        assert run.aggregator.active[PayloadKind.VRP] == "backup"  # fail-back waits its delay


async def test_failback_waits_for_the_delay_then_switches(tmp_path: Path) -> None:
    primary, backup = tmp_path / "a.json", tmp_path / "b.json"
    write_atomically(backup, export(B))
    async with running(two_groups(source(primary, "a"), source(backup, "b"))) as run:
        await run.until(lambda s: has(s, B))
        write_atomically(primary, export(A))
        # The primary loads and is healthy, but the backup stays active for the delay.
        await wait_for(lambda: run.aggregator.entries["a"].payload is not None)
        await anyio.sleep(0.2)
        assert run.aggregator.active[PayloadKind.VRP] == "backup"
        run.jump(290)
        await anyio.sleep(0.2)
        assert run.aggregator.active[PayloadKind.VRP] == "backup"
        run.jump(11)
        await run.until(lambda s: has(s, A))
        assert run.aggregator.active[PayloadKind.VRP] == "primary"


async def test_failover_when_the_primary_can_no_longer_refresh() -> None:
    """The primary's data is still valid, but it cannot refresh: the ready backup takes over
    at once instead of after the primary's data expires (item 6)."""
    primary, backup = ScriptedSource("a", online=True), ScriptedSource("b")
    async with running(two_groups(primary, backup)) as run:
        await wait_for(lambda: primary.running)
        primary.deliver(payload(A))
        await run.until(lambda s: has(s, A))
        assert "backup" not in run.aggregator.started_groups()
        primary.fail()  # e.g. the cache connection lost and not re-synced within Retry
        run.aggregator.poke()
        await wait_for(lambda: backup.running)
        assert run.aggregator.active[PayloadKind.VRP] == "primary"  # until the backup syncs
        backup.deliver(payload(B))
        await run.until(lambda s: has(s, B))
        assert run.aggregator.active[PayloadKind.VRP] == "backup"


async def test_a_stale_primary_keeps_serving_while_no_backup_is_ready() -> None:
    primary, backup = ScriptedSource("a", online=True), ScriptedSource("b")
    async with running(two_groups(primary, backup)) as run:
        await wait_for(lambda: primary.running)
        primary.deliver(payload(A))
        await run.until(lambda s: has(s, A))
        primary.fail()
        backup_started = wait_for(lambda: backup.running)
        run.aggregator.poke()
        await backup_started
        backup.fail()  # the backup cannot deliver either
        run.aggregator.poke()
        await anyio.sleep(0.3)
        assert run.aggregator.active[PayloadKind.VRP] == "primary"


async def test_vrps_from_one_group_aspas_from_another_without_waiting(tmp_path: Path) -> None:
    """A group that explicitly cannot provide ASPA (an RTR cache at v1) does not make the
    backup wait its window for ASPA (item 7)."""
    primary = ScriptedSource("a", online=True)
    primary.capabilities = frozenset({PayloadKind.VRP, PayloadKind.ROUTER_KEY})
    backup = tmp_path / "b.json"
    doc = {
        "roas": [roa(p, m, a) for p, m, a in B],
        "aspas": [{"customer_asid": 64496, "providers": [64497]}],
    }
    write_atomically(backup, dumps(doc))
    async with running(two_groups(primary, source(backup, "b"))) as run:
        await wait_for(lambda: primary.running)
        primary.deliver(payload(A))
        snap = await run.until(lambda s: bool(s.aspas) and has(s, A), within=3)
        assert [(a.customer, a.providers) for a in snap.aspas] == [(64496, (64497,))]
        assert run.aggregator.active == {
            PayloadKind.VRP: "primary",
            PayloadKind.ROUTER_KEY: "primary",
            PayloadKind.ASPA: "backup",
        }


async def test_a_rebuild_merges_only_the_kinds_whose_inputs_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Contract L-49: a build made stale by another group's withdrawal is rebuilt reusing the
    merge of the group whose inputs did not change (its VRPs are not merged again)."""
    vrps = ScriptedSource("a", online=True)
    vrps.capabilities = frozenset({PayloadKind.VRP, PayloadKind.ROUTER_KEY})
    aspas = ScriptedSource("b", online=True)
    aspas.capabilities = frozenset({PayloadKind.ASPA})

    def aspa_payload(customer: int) -> SourcePayload:
        doc = {"roas": [], "aspas": [{"customer_asid": customer, "providers": [64497]}]}
        return parse_export(dumps(doc))

    async with running(two_groups(vrps, aspas)) as run:
        await wait_for(lambda: vrps.running and aspas.running)
        held = payload(A)
        vrps.deliver(held)
        aspas.deliver(aspa_payload(64496))
        await run.until(lambda s: has(s, A) and bool(s.aspas))
        calls: list[int] = []
        original = SourcePayload.snapshot_at

        def counted(self: SourcePayload, now: int) -> Snapshot:
            calls.append(id(self))
            return original(self, now)

        monkeypatch.setattr(SourcePayload, "snapshot_at", counted)
        with slow_builds(monkeypatch) as (building, release):
            aspas.deliver(aspa_payload(64499))
            await wait_for(building.is_set)
            aspas.withdraw()  # decided while the build runs: that build is discarded
            release.set()
            snap = await run.until(lambda s: not s.aspas)
        assert has(snap, A)
        assert id(held) not in calls  # the VRP group's merge was reused by both builds
        assert run.aggregator.merges.reused == 2  # VRP and router keys


async def test_losing_every_group_publishes_the_empty_set() -> None:
    only = ScriptedSource("a", online=True)
    group = Group(GroupSpec("only", 1, startup_timeout=1, failback_delay=0), (only,))
    async with running([group]) as run:
        await wait_for(lambda: only.running)
        only.deliver(payload(A))
        await run.until(lambda s: has(s, A))
        only.withdraw()
        snap = await run.until(lambda s: s.is_empty())
        assert snap.vrp_count == 0
        assert run.aggregator.availability() == {"a": run.aggregator.entries["a"].availability(0)}


async def test_ready_empty_is_not_expired() -> None:
    """Every record expired naturally: ready_empty (still ready); the source's own deadline
    passed: expired. The two are told apart (item 5)."""
    natural, deadline = ScriptedSource("n"), ScriptedSource("d", online=True)
    group = Group(GroupSpec("g", 1, startup_timeout=0, failback_delay=0), (natural, deadline))
    async with running([group]) as run:
        await wait_for(lambda: natural.running and deadline.running)
        now = run.aggregator.keeper.now()
        natural.deliver(payload(A, expires=int(now) + 2))
        deadline.deliver(payload(B), expires_at=now + 2)
        await run.until(lambda s: s.vrp_count == 2)
        await run.until(lambda s: s.is_empty(), within=6)
        expected = {"n": "ready_empty", "d": "expired"}
        await wait_for(
            lambda: {k: v.value for k, v in run.aggregator.availability().items()} == expected
        )
        assert run.aggregator.active[PayloadKind.VRP] == "g"  # ready_empty is still ready


def test_sources_or_groups_not_both(tmp_path: Path) -> None:
    async def ignore(_: Build) -> None:
        return None

    src = source(tmp_path / "a.json", "a")
    with pytest.raises(ValueError, match="not both"):
        Aggregator([src], ignore, groups=[Group(GroupSpec("g", 1), (src,))])


# ---------------------------------------------------------------- configuration commits


def client_config(
    primary: Path, backup: Path, revision: int, **primary_group: float
) -> ClientConfig:
    spec = {"startup_timeout": 30.0, "failback_delay": 300.0, **primary_group}
    return ClientConfig(
        (
            SourceConfig("a", str(primary), "primary"),
            SourceConfig("b", str(backup), "backup"),
        ),
        (
            GroupConfig("primary", 10, **spec),
            GroupConfig("backup", 20, startup_timeout=30, failback_delay=300),
        ),
        poll_interval=0.05,
        revision=revision,
    )


def built_under(client: Client, revision: int) -> bool:
    current = client.get_snapshot()
    return current is not None and current.config_revision == revision


def active_is(client: Client, group: str) -> bool:
    current = client.get_snapshot()
    return current is not None and current.active[PayloadKind.VRP] == group


async def test_a_configuration_commit_keeps_the_selection_state(tmp_path: Path) -> None:
    """A new revision of an identical configuration neither fails back early nor stops the
    backup nor holds publishing back (item 8)."""
    primary, backup = tmp_path / "a.json", tmp_path / "b.json"
    write_atomically(backup, export(B))
    clock = FakeClock(wall=1_700_000_000.0, monotonic="real")
    async with (
        Client(client_config(primary, backup, 0), _clock=clock) as client,
        anyio.create_task_group() as tg,
    ):
        await tg.start(client.run)
        await wait_for(lambda: (s := client.get_snapshot()) is not None and has(s.snapshot, B))
        write_atomically(primary, export(A))
        await wait_for(lambda: client.get_status().availability.get("a") == "ready")
        await anyio.sleep(0.3)  # a selection round has seen it healthy
        clock.move_monotonic(200)  # the primary has been healthy for 200 of its 300 s
        for revision in (1, 2):
            await client.apply_config(client_config(primary, backup, revision))
            await wait_for(functools.partial(built_under, client, revision))
            current = client.get_snapshot()
            assert current is not None
            assert current.active[PayloadKind.VRP] == "backup"
            assert has(current.snapshot, B)
        assert client.get_status().started_groups == ("backup", "primary")
        clock.move_monotonic(101)  # the 300 s count from the first healthy moment, not the commit
        await wait_for(functools.partial(active_is, client, "primary"))
        await client.aclose()


async def test_close_commits_a_withdrawal_already_decided() -> None:
    """A withdrawal decided just before close is built into the final view, and nothing an
    ordinary source delivers after close began is admitted (item 9)."""
    builds: list[Build] = []

    async def on_snapshot(build: Build) -> None:
        builds.append(build)

    only = ScriptedSource("a", online=True)
    group = Group(GroupSpec("only", 1, startup_timeout=0, failback_delay=0), (only,))
    aggregator = Aggregator([], on_snapshot, groups=[group])
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(aggregator.run)
            await wait_for(lambda: only.running)
            only.deliver(payload(A))
            await wait_for(lambda: bool(builds) and has(builds[-1].snapshot, A))
            only.withdraw()
            aggregator.close()  # no round ran in between: the withdrawal is not built yet
            only.deliver(payload(B))  # after close began: not admitted
            # run returns by itself once the last round is done (the task group then ends)
    assert builds[-1].snapshot.is_empty()
    assert aggregator.availability()["a"].value == "revoked"


class StopsWithAWithdrawal(ScriptedSource):
    """A source whose protocol reports a fatal error while it stops (after close began)."""

    async def run(self, sink: DeliverySink) -> None:
        self._sink = sink
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.3)  # e.g. a check still running when the cancel came
                sink(Delivery.withdrawal())


async def test_close_waits_for_the_source_tasks_and_builds_their_late_withdrawal() -> None:
    """Contract L-18/P-46: the last round comes only after every source task ended, so a
    revocation a source reports while it stops is in the final view (never lost)."""
    builds: list[Build] = []

    async def on_snapshot(build: Build) -> None:
        builds.append(build)

    only = StopsWithAWithdrawal("a", kind="rtr", online=True)
    group = Group(GroupSpec("only", 1, startup_timeout=0, failback_delay=0), (only,))
    aggregator = Aggregator([], on_snapshot, groups=[group])
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(aggregator.run)
            await wait_for(lambda: only.running)
            only.deliver(payload(A))
            await wait_for(lambda: bool(builds) and has(builds[-1].snapshot, A))
            aggregator.close()
            await anyio.sleep(0.1)
            assert aggregator.still_running() == ["a"]
            assert not aggregator.final_round.is_set()  # the source has not ended yet
    assert aggregator.final_round.is_set()
    assert aggregator.still_running() == []
    assert builds[-1].snapshot.is_empty()
    assert aggregator.availability()["a"].value == "revoked"


async def test_a_ready_backup_with_an_empty_export_takes_over() -> None:
    """Empty but complete data is ready (contract L-63): an empty standby takes over from a
    primary that can no longer refresh."""
    primary, backup = ScriptedSource("a", online=True), ScriptedSource("b")
    async with running(two_groups(primary, backup)) as run:
        await wait_for(lambda: primary.running)
        primary.deliver(payload(A))
        await run.until(lambda s: has(s, A))
        primary.fail()
        run.aggregator.poke()
        await wait_for(lambda: backup.running)
        backup.deliver(payload([]))
        await run.until(lambda s: s.is_empty())
        assert run.aggregator.active[PayloadKind.VRP] == "backup"


async def test_a_long_build_does_not_delay_a_group_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Contract L-62: selection runs beside the build, so the backup starts while a slow build
    (a worker thread) is still running."""
    primary, backup = ScriptedSource("a", online=True), ScriptedSource("b")
    async with running(two_groups(primary, backup)) as run:
        await wait_for(lambda: primary.running)
        with slow_builds(monkeypatch) as (building, release):
            primary.deliver(payload(A))
            await wait_for(building.is_set)
            primary.fail()
            run.aggregator.poke()
            await wait_for(lambda: backup.running, 2)  # the build is still running
            assert not release.is_set()
        await run.until(lambda s: has(s, A))


async def test_a_build_made_stale_by_a_withdrawal_is_never_published(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A withdrawal decided while a build of the withdrawn data runs makes that build stale:
    it is discarded, never published, and the next build leaves the data out (contract L-49)."""
    builds: list[Build] = []

    async def on_snapshot(build: Build) -> None:
        builds.append(build)

    only = ScriptedSource("a", online=True)
    group = Group(GroupSpec("only", 1, startup_timeout=0, failback_delay=0), (only,))
    aggregator = Aggregator([], on_snapshot, groups=[group])
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await tg.start(aggregator.run)
            await wait_for(lambda: only.running)
            only.deliver(payload(B))
            await wait_for(lambda: bool(builds))
            with slow_builds(monkeypatch) as (building, release):
                only.deliver(payload(A))
                await wait_for(building.is_set)
                only.withdraw()  # decided while the build of A runs
                release.set()
                await wait_for(lambda: not builds or builds[-1].snapshot.is_empty())
            await anyio.sleep(0.3)
            tg.cancel_scope.cancel()
    assert not any(has(b.snapshot, A) for b in builds)  # the stale build never went out
