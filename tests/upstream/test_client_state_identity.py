"""What a `Client` writes into its state file besides the payloads: the configuration's publish
identity and digest, the SLURM policy in force, every configured group (P-10, P-28, P-66, P-82)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from persistence.location import StateLocation
from persistence.shared import SharedReaderConfig, SharedSnapshotClient
from persistence.sqlite_backend import SQLiteBackend
from persistence.state import PersistedState
from snapshot.kinds import PayloadKind
from snapshot.slurm import parse_slurm
from snapshot.slurm_combine import combine
from snapshot.slurm_document import policy_document, read_policy_document
from tests.slurm_docs import slurm_json
from tests.upstream.helpers import export, write_atomically
from upstream import Client, ClientConfig, SourceConfig
from upstream.config import GroupConfig
from upstream.delivery import config_identity

pytestmark = pytest.mark.anyio

TIMEOUT = 10.0
VRPS = [("192.0.2.0/24", 24, 64496), ("198.51.100.0/24", 24, 64497)]
FILTER = slurm_json(prefixFilters=[{"prefix": "192.0.2.0/24"}])


def config(tmp_path: Path, **kw: Any) -> ClientConfig:
    return ClientConfig(
        (
            SourceConfig("z-file", str(tmp_path / "z.json"), group="main"),
            SourceConfig("a-file", str(tmp_path / "a.json"), group="main"),
        ),
        groups=(
            GroupConfig("main", 10, startup_timeout=0.0, failback_delay=0.0),
            GroupConfig("spare", 20, startup_timeout=0.0, failback_delay=0.0),  # no source
        ),
        poll_interval=0.05,
        state=StateLocation("sqlite", tmp_path / "state.db"),
        slurm=(str(tmp_path / "filter.slurm"),),
        flush_timeout=5.0,
        **kw,
    )


def read(db: Path) -> PersistedState:
    backend = SQLiteBackend(db, read_only=True)
    backend.open()
    try:
        state = backend.read_state()
    finally:
        backend.close()
    assert state is not None
    return state


async def commit(cfg: ClientConfig, tmp_path: Path) -> int:
    """Run a client on ``cfg`` until its first state is committed; the epoch it committed in."""
    write_atomically(tmp_path / "z.json", export(VRPS))
    write_atomically(tmp_path / "a.json", export(VRPS[:1]))
    write_atomically(tmp_path / "filter.slurm", FILTER.encode())
    async with Client(cfg) as client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        with anyio.fail_after(TIMEOUT):
            ready = await client.wait_ready()
            await client.flush()
        assert ready.snapshot.vrp_count == 1  # 192.0.2.0/24 filtered by the SLURM file
        epoch = client.epoch
        await client.aclose()
        tg.cancel_scope.cancel()
    return epoch


async def test_the_state_holds_the_configuration_identity_policy_and_every_group(
    tmp_path: Path,
) -> None:
    cfg = config(tmp_path)
    epoch = await commit(cfg, tmp_path)
    state = read(tmp_path / "state.db")
    assert state.config_store_id == state.store_id
    assert state.config_epoch == epoch == state.state_id.epoch
    assert state.config_identity == config_identity(cfg)
    assert state.config_identity is not None
    assert state.config_identity.startswith("sha256:")
    policy = combine([parse_slurm(FILTER.encode(), cfg.slurm[0])])  # as the client reads it
    assert state.policy_json == policy_document(policy)
    assert state.policy_id == cfg.policy_id(policy.identity())
    assert read_policy_document(state.policy_json).summary() == "prefixFilters=1"
    # Every configured group in priority order, the empty one kept; members sorted by name.
    assert [(g.group_id, g.name, g.source_names) for g in state.groups] == [
        (0, "main", ("a-file", "z-file")),
        (1, "spare", ()),
    ]
    assert [s.protocol for s in state.sources] == [None, None]  # JSON sources


def test_the_configuration_identity_ignores_order_and_revision_but_not_membership(
    tmp_path: Path,
) -> None:
    cfg = config(tmp_path)
    reordered = ClientConfig(
        tuple(reversed(cfg.sources)),
        groups=cfg.groups,
        poll_interval=cfg.poll_interval,
        state=cfg.state,
        slurm=cfg.slurm,
        revision=7,
    )
    assert config_identity(reordered) == config_identity(cfg)
    moved = ClientConfig(
        (cfg.sources[0], SourceConfig("a-file", str(tmp_path / "a.json"), group="spare")),
        groups=cfg.groups,
        slurm=cfg.slurm,
    )
    assert config_identity(moved) != config_identity(cfg)
    no_empty_group = ClientConfig(cfg.sources, groups=cfg.groups[:1], slurm=cfg.slurm)
    assert config_identity(no_empty_group) != config_identity(cfg)


async def test_a_reader_without_its_own_policy_serves_the_owners_slurm_filtered_set(
    tmp_path: Path,
) -> None:
    await commit(config(tmp_path), tmp_path)
    reader = SharedSnapshotClient(SharedReaderConfig(tmp_path / "state.db", poll_interval=0.02))
    async with reader, anyio.create_task_group() as tg:
        await tg.start(reader.run)
        with anyio.fail_after(TIMEOUT):
            ready = await reader.wait_ready({PayloadKind.VRP})
        assert ready.snapshot.vrp_count == 1
        assert {v.asn for v in ready.snapshot.vrps()} == {64497}
        tg.cancel_scope.cancel()
