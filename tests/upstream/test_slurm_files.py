"""SLURM files watched by the upstream half: loads, rejections that keep the policy in force,
and the `Client` applying the policy to every snapshot it builds."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from snapshot.model import Aspa, Vrp
from snapshot.slurm import EMPTY_POLICY, SlurmError, SlurmPolicy
from tests.slurm_docs import slurm_json
from tests.upstream.helpers import export, touch, wait_for, write_atomically
from upstream.client import Client
from upstream.config import ClientConfig, SourceConfig
from upstream.slurm_files import MAX_SLURM_BYTES, SlurmFiles, load_slurm_files, read_slurm_files

pytestmark = pytest.mark.anyio

A = ("192.0.2.0/24", 24, 64496)
B = ("198.51.100.0/24", 24, 64497)


def slurm(**members: list[dict[str, Any]]) -> bytes:
    """A version 2 SLURM file with the given arrays (the others empty)."""
    return slurm_json(**members).encode()


FILTER_A = slurm(prefixFilters=[{"prefix": "192.0.2.0/24"}])
ASSERT_C = slurm(prefixAssertions=[{"prefix": "203.0.113.0/24", "asn": 64499}])
BROKEN = slurm(prefixAssertions=[{"prefix": "203.0.113.0/24", "asn": 1, "maxPrefixLength": 33}])


# ---------------------------------------------------------------- reading


def test_read_combines_files(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_atomically(a, FILTER_A)
    write_atomically(b, ASSERT_C)
    policy, digest = read_slurm_files([str(a), str(b)])
    assert policy.summary() == "prefixFilters=1, prefixAssertions=1"
    assert read_slurm_files([str(a), str(b)])[1] == digest
    assert read_slurm_files([str(b), str(a)])[1] != digest
    assert load_slurm_files([str(a)]).prefix_filters == policy.prefix_filters


def test_read_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    with pytest.raises(SlurmError, match=rf"^{missing}: cannot read: No such file"):
        read_slurm_files([str(missing)])
    broken = tmp_path / "broken.json"
    write_atomically(broken, BROKEN)
    with pytest.raises(SlurmError, match=rf"^{broken}: locallyAddedAssertions\.prefixAssertions"):
        read_slurm_files([str(broken)])
    huge = tmp_path / "huge.json"
    with huge.open("wb") as f:
        f.truncate(MAX_SLURM_BYTES + 1)
    with pytest.raises(SlurmError, match=rf"^{huge}: larger than"):
        read_slurm_files([str(huge)])


def test_overlapping_files_are_rejected(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_atomically(a, FILTER_A)
    write_atomically(b, slurm(prefixAssertions=[{"prefix": "192.0.2.128/25", "asn": 1}]))
    with pytest.raises(SlurmError, match=r"SLURM files overlap \(RFC 8416 §4.2\): .*a\.json"):
        read_slurm_files([str(a), str(b)])


# ---------------------------------------------------------------- watching


# (Read through calls: mypy would keep an attribute narrowed across the awaits.)
def policy_of(files: SlurmFiles) -> SlurmPolicy | None:
    return files.policy


def error_of(files: SlurmFiles) -> str | None:
    return files.error


async def test_watch_loads_rejects_and_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "upstream.slurm_files")
    path = tmp_path / "local.json"
    changes: list[int] = []
    files = SlurmFiles([str(path)], poll_interval=0.05, on_change=lambda: changes.append(1))
    assert policy_of(files) is None

    # Missing at start: rejected, nothing in force yet.
    assert not await files.check()
    assert policy_of(files) is None
    assert "cannot read" in (error_of(files) or "")
    assert "nothing is published until the files are valid" in caplog.text

    write_atomically(path, FILTER_A)
    assert await files.check()
    in_force = policy_of(files)
    assert in_force is not None
    assert in_force.summary() == "prefixFilters=1"
    assert error_of(files) is None
    assert changes == [1]

    touch(path)  # same content, new mtime: nothing changes
    assert not await files.check()
    assert not await files.check()

    caplog.clear()
    write_atomically(path, BROKEN)
    assert not await files.check()
    assert policy_of(files) is in_force
    assert f"{path}: locallyAddedAssertions.prefixAssertions[0].maxPrefixLength" in (
        error_of(files) or ""
    )
    assert "the previous SLURM policy stays in force" in caplog.text
    assert files.rejections == 2
    assert not await files.check()  # the same broken file is not read (or logged) again
    assert files.rejections == 2

    write_atomically(path, FILTER_A)  # back to the content in force
    assert not await files.check()
    assert error_of(files) is None
    assert changes == [1]

    # A new comment only: read, but the policy is the same, so no rebuild.
    write_atomically(path, slurm(prefixFilters=[{"prefix": "192.0.2.0/24", "comment": "x"}]))
    assert not await files.check()
    assert changes == [1]

    path.unlink()
    assert not await files.check()
    assert policy_of(files) is in_force
    assert "cannot read" in (error_of(files) or "")


async def test_set_paths(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_atomically(a, FILTER_A)
    write_atomically(b, BROKEN)
    files = SlurmFiles([str(a)], poll_interval=0.05)
    assert await files.check()
    first = files.policy
    files.set_paths([str(a), str(b)])
    assert not await files.check()  # b is invalid: a's policy stays
    assert policy_of(files) is first
    files.set_paths([])
    assert await files.check()
    assert policy_of(files) is EMPTY_POLICY
    assert SlurmFiles([]).policy is EMPTY_POLICY


async def test_run_polls_until_cancelled(tmp_path: Path) -> None:
    path = tmp_path / "local.json"
    write_atomically(path, FILTER_A)
    files = SlurmFiles([str(path)], poll_interval=0.02)
    async with anyio.create_task_group() as tg:
        tg.start_soon(files.run)
        await wait_for(lambda: files.loads == 1)
        write_atomically(path, ASSERT_C)
        await wait_for(lambda: files.loads == 2)
        files.set_paths([])  # wakes the loop at once
        await wait_for(lambda: files.policy is EMPTY_POLICY)
        tg.cancel_scope.cancel()


def test_config_checks_slurm_paths() -> None:
    source = (SourceConfig("a", "a.json"),)
    with pytest.raises(ValueError, match=r"slurm\[1\]: 'x\.json' is given twice"):
        ClientConfig(source, slurm=("x.json", "x.json"))
    with pytest.raises(ValueError, match=r"slurm\[0\]: empty path"):
        ClientConfig(source, slurm=("",))


# ---------------------------------------------------------------- in the client


def vrps_of(client: Client) -> set[Vrp]:
    current = client.get_snapshot()
    return set() if current is None else set(current.snapshot.vrps())


async def test_client_applies_the_policy(tmp_path: Path) -> None:
    source, local = tmp_path / "export.json", tmp_path / "local.json"
    write_atomically(source, export([A, B]))
    write_atomically(local, BROKEN)
    config = ClientConfig(
        (SourceConfig("export", str(source)),), poll_interval=0.02, slurm=(str(local),)
    )
    async with Client(config) as client, anyio.create_task_group() as tg:
        await tg.start(client.run)
        # An invalid SLURM file before any valid one: nothing is published.
        await wait_for(lambda: client.slurm.error is not None)
        await anyio.sleep(0.2)
        assert client.get_snapshot() is None

        write_atomically(local, FILTER_A)
        with anyio.fail_after(5):
            ready = await client.wait_ready()
        assert set(ready.snapshot.vrps()) == {Vrp.parse(*B)}
        # The publish carries the identity of the policy it was judged under (contract L-36b).
        first_policy = ready.policy_id
        assert len(first_policy) == 64

        doc = slurm(
            prefixAssertions=[{"prefix": "203.0.113.0/24", "asn": 64499}],
            aspaAssertions=[{"customerAsn": 64500, "providerAsns": [64501]}],
        )
        write_atomically(local, doc)
        c = Vrp.parse("203.0.113.0/24", 24, 64499)
        await wait_for(lambda: vrps_of(client) == {Vrp.parse(*A), Vrp.parse(*B), c})
        current = client.get_snapshot()
        assert current is not None
        assert current.snapshot.aspas == (Aspa(64500, (64501,)),)
        second_policy = current.policy_id
        assert second_policy != first_policy

        # A broken change keeps the last policy in force, also when the source changes.
        generation = client.generation
        write_atomically(local, BROKEN)
        await wait_for(lambda: client.slurm.error is not None)
        assert client.generation == generation
        write_atomically(source, export([A]))
        await wait_for(lambda: vrps_of(client) == {Vrp.parse(*A), c})
        current = client.get_snapshot()
        assert current is not None
        assert current.policy_id == second_policy  # the same policy: the same identity

        # apply_config without SLURM files: the policy goes away.
        await client.apply_config(
            ClientConfig((SourceConfig("export", str(source)),), poll_interval=0.02, revision=1)
        )
        await wait_for(lambda: vrps_of(client) == {Vrp.parse(*A)})
        current = client.get_snapshot()
        assert current is not None
        assert current.policy_id not in (first_policy, second_policy)
        assert current.policy_id == client.config.policy_id(EMPTY_POLICY.identity())
        await client.aclose()
