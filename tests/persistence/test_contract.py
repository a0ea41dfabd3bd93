"""The `PersistenceBackend` contract, run against SQLite and DuckDB on real files on both loops.

Two parts. The tests named in `__all__` are the backend contract suite: they use nothing but the
`PersistenceBackend` protocol and the `contract_backend` fixture (a `ContractBackend`), and a
custom backend runs exactly these through `tests.persistence.contract_suite`. The other tests
are our SQL backends' own (raw SQL tampering, the shared DDL, the worker thread, the extra).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from persistence.backend import (
    AsyncPersistenceBackend,
    BackendCapabilities,
    PersistenceBackend,
    ThreadedBackend,
)
from persistence.duckdb_backend import DuckDBBackend
from persistence.errors import (
    BackendClosedError,
    CommitConflictError,
    CorruptStateError,
    DamagedStateError,
    MissingExtraError,
    OwnerLockedError,
    PersistenceError,
    UnsupportedSchemaError,
)
from persistence.exchange import state_digest
from persistence.meta_digest import meta_digest, publication_digest
from persistence.schema import TABLES, ddl
from persistence.state import (
    NOT_INCREMENTAL_METADATA,
    SCHEMA_VERSION,
    PersistReceipt,
    StateId,
    UpstreamRef,
)
from tests.clock import FakeClock
from tests.persistence.contract_backend import DUCKDB, SQLITE, ContractBackend
from tests.persistence.helpers import (
    KINDS,
    ROOT,
    START,
    listing,
    make,
    opened,
    raw,
    sql_store,
    wall_us,
)
from tests.persistence.states import (
    US,
    assert_same_state,
    crash_state,
    make_state,
    realistic_sources,
)
from tests.persistence.unchecked_ddl import UNCHECKED_DDL
from tests.persistence.unchecked_ddl import unchecked_store as legacy_store

pytestmark = pytest.mark.anyio

#: The backend contract suite (see the module text): the tests any backend must pass, and the
#: fixtures and marker they need besides ``contract_backend``.
__all__ = [
    "path",
    "pytestmark",
    "test_capabilities",
    "test_closed_backend_refuses_calls",
    "test_constructor_touches_no_file",
    "test_empty_state_round_trip",
    "test_empty_store_reads_none",
    "test_expected_conflict_leaves_the_stored_state",
    "test_full_state_round_trip",
    "test_idempotent_retry_returns_the_original_commit",
    "test_open_creates_missing_directories",
    "test_same_id_other_content_is_a_conflict",
    "test_schema2_state_fields_round_trip",
    "test_second_owner_in_another_process_is_refused",
    "test_second_owner_in_process_is_refused",
    "test_second_owner_through_a_hard_link_is_refused",
    "test_state_of_another_store_is_refused",
    "test_written_at_is_no_earlier_than_the_states_own_times",
]


@pytest.fixture(params=[SQLITE, DUCKDB], ids=KINDS)
def contract_backend(request: pytest.FixtureRequest) -> ContractBackend:
    """Each contract test runs once per backend (a custom backend's module defines its own)."""
    assert isinstance(request.param, ContractBackend)
    return request.param


@pytest.fixture
def kind(contract_backend: ContractBackend) -> str:
    """The SQL backend's name, for our own SQL-level tests."""
    return contract_backend.name


@pytest.fixture
def path(contract_backend: ContractBackend, tmp_path: Path) -> Path:
    """The database file (not created)."""
    return tmp_path / f"state.{contract_backend.name}"


async def committed(kind: str, path: Path, clock: FakeClock | None = None) -> StateId:
    """Commit the realistic state into a fresh store and close it; its id."""
    async with opened(kind, path, clock) as backend:
        assert backend.store_id is not None
        state = make_state(backend.store_id, StateId(1, 1))
        await backend.commit(state, None)
        return state.state_id


# ---------------------------------------------------------------- construction and open


async def test_capabilities(contract_backend: ContractBackend, path: Path) -> None:
    backend = contract_backend.build(path)
    assert isinstance(backend, AsyncPersistenceBackend)
    if isinstance(backend, ThreadedBackend):  # the adapter of a synchronous backend (P-03)
        assert isinstance(backend.inner, PersistenceBackend)
    caps = backend.capabilities
    assert isinstance(caps, BackendCapabilities)
    assert caps.backend_name == contract_backend.name
    assert caps.schema_version == SCHEMA_VERSION == 2
    assert caps.shared_read is contract_backend.shared_read
    assert caps.single_owner
    assert caps.atomic_commit
    assert await backend.close()


async def test_constructor_touches_no_file(
    contract_backend: ContractBackend, tmp_path: Path
) -> None:
    backend = contract_backend.build(tmp_path / "not" / "yet" / "state.db")
    assert await listing(tmp_path) == []
    assert backend.store_id is None
    with pytest.raises(BackendClosedError):
        await backend.read_state()
    assert await backend.close()
    assert await listing(tmp_path) == []


async def test_open_creates_schema_v2(kind: str, path: Path) -> None:
    clock = FakeClock(wall=START)
    async with opened(kind, path, clock) as backend:
        assert backend.is_open
        store_id = backend.store_id
        assert store_id is not None
        assert len(store_id) == 32
    with raw(kind, path) as db:
        if kind == "sqlite":
            names = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        else:
            names = db.execute("SELECT table_name FROM information_schema.tables").fetchall()
        assert {name for (name,) in names} == set(TABLES)
        info = db.execute("SELECT singleton, schema_version, store_id, created_at FROM schema_info")
        assert info.fetchall() == [(1, 2, store_id, wall_us(clock))]
        assert db.execute("SELECT count(*) FROM store_meta").fetchall() == [(0,)]
    # Reopening keeps the store id.
    async with opened(kind, path) as backend:
        assert backend.store_id == store_id


async def test_open_creates_missing_directories(
    contract_backend: ContractBackend, tmp_path: Path
) -> None:
    path = tmp_path / "new" / "dir" / "state.db"
    async with contract_backend.opened(path) as backend:
        assert await backend.read_state() is None
    assert path.is_file()


async def test_empty_store_reads_none(contract_backend: ContractBackend, path: Path) -> None:
    async with contract_backend.opened(path) as backend:
        assert await backend.read_header() is None
        assert await backend.read_state() is None
    async with contract_backend.opened(path) as backend:
        assert await backend.read_state() is None


# ---------------------------------------------------------------- commits


async def test_schema2_state_fields_round_trip(
    contract_backend: ContractBackend, path: Path
) -> None:
    """The evaluation context, identities, groups and a v2 -> v1 revocation read back exactly."""
    async with contract_backend.opened(path) as backend:
        assert backend.store_id is not None
        base = make_state(backend.store_id, StateId(2, 1))
        http, rtr, empty = base.sources
        revoked = replace(
            rtr,
            capabilities=frozenset({"vrp", "router_key"}),
            selected=frozenset({"vrp"}),
            present=frozenset({"vrp"}),
            aspas=(),
            aspa_afis=b"",
            aspa_families=0,
            metadata_json=NOT_INCREMENTAL_METADATA,
        )
        state = replace(
            base,
            sources=(http, revoked, empty),
            mode="offline",
            reference_time=base.published_at - 5 * US,
            upstream=UpstreamRef("u" * 32, 4, 9),
            active_groups=(("aspa", "primary"), ("router_key", "primary"), ("vrp", "primary")),
        )
        receipt = await backend.commit(state, None)
        assert receipt.state_digest == state_digest(state) != state_digest(base)
        result = await backend.read_state()
        assert result is not None
        header, got = result
        assert_same_state(got, state)
        assert header.mode == "offline"
        assert header.upstream == UpstreamRef("u" * 32, 4, 9)
        assert (header.policy_id, header.config_identity) == (
            state.policy_id,
            state.config_identity,
        )
        assert not got.sources[1].incremental_usable
        assert [g.source_names for g in got.groups] == [g.source_names for g in state.groups]
        assert got.groups[2].source_names == ()  # an empty group is kept


async def test_full_state_round_trip(contract_backend: ContractBackend, path: Path) -> None:
    clock = FakeClock(wall=START)
    async with contract_backend.opened(path, clock) as backend:
        assert backend.store_id is not None
        first = make_state(backend.store_id, StateId(7, 1))
        receipt = await backend.commit(first, None)
        assert receipt.snapshot_id == first.state_id
        assert receipt.committed_at == wall_us(clock)
        assert receipt.state_digest == state_digest(first)
        assert receipt.config_revision == first.config_revision
        assert receipt.schema_version == SCHEMA_VERSION
        assert isinstance(receipt, PersistReceipt)
        assert not receipt.retried
        result = await backend.read_state()
        assert result is not None
        header, got = result
        assert header.receipt() == receipt  # what a read reports is the commit's receipt
        assert_same_state(got, first)
        assert header == await backend.read_header()
        assert header.schema_version == 2
        assert header.store_id == backend.store_id
        assert header.state_id == StateId(7, 1)
        assert header.written_at == wall_us(clock)
        assert header.state_digest == state_digest(first)
        assert header.meta_digest == meta_digest(header)
        assert header.publication_digest == publication_digest(header)
        assert (header.serial, header.config_revision) == (first.serial, first.config_revision)
        assert header.session_ids == first.session_ids
        assert header.published_at == first.published_at
        assert header.package_version == first.package_version

        # A second, different state replaces the first entirely.
        clock.move_wall(30)
        assert header.recovered_from is None
        second = make_state(backend.store_id, StateId(7, 2), realistic_sources(1)[:2], serial=43)
        second = replace(second, recovered_from=StateId(6, 4))  # as built by a recovery
        assert state_digest(second) != state_digest(first)
        await backend.commit(second, first.state_id)
        result = await backend.read_state()
        assert result is not None
        assert_same_state(result[1], second)
        assert result[0].written_at == wall_us(clock)
        assert result[0].recovered_from == result[1].recovered_from == StateId(6, 4)

    # A new owner (a restart) reads exactly the same state.
    async with contract_backend.opened(path) as backend:
        result = await backend.read_state()
        assert result is not None
        assert_same_state(result[1], second)


async def test_written_at_is_no_earlier_than_the_states_own_times(
    contract_backend: ContractBackend, path: Path
) -> None:
    """A wall clock behind what the state shows (set back) does not make the commit look older."""
    clock = FakeClock(wall=START)
    hour = 3600 * US
    async with contract_backend.opened(path, clock) as backend:
        assert backend.store_id is not None
        published = replace(
            make_state(backend.store_id, StateId(1, 1)), published_at=wall_us(clock) + hour
        )
        receipt = await backend.commit(published, None)
        assert receipt.committed_at == wall_us(clock) + hour
        header = await backend.read_header()
        assert header is not None
        assert header.written_at == wall_us(clock) + hour

        plain = make_state(backend.store_id, StateId(1, 2), serial=43)
        observed = replace(plain, observed_at=wall_us(clock) + 2 * hour)
        assert state_digest(observed) == state_digest(
            plain
        )  # observed_at is no part of the content
        receipt = await backend.commit(observed, StateId(1, 1))
        assert receipt.committed_at == wall_us(clock) + 2 * hour
        # A retry keeps the original written_at, whatever it observed since.
        again = await backend.commit(replace(observed, observed_at=wall_us(clock) + 9 * hour), None)
        assert again.retried
        assert again.committed_at == wall_us(clock) + 2 * hour

        http, rtr, empty = realistic_sources()
        ahead = replace(rtr, accepted_at=wall_us(clock) + 3 * hour)
        accepted = make_state(backend.store_id, StateId(1, 3), (http, ahead, empty), serial=44)
        receipt = await backend.commit(accepted, StateId(1, 2))
        assert receipt.committed_at == wall_us(clock) + 3 * hour

        clock.move_wall(5 * 3600)  # the wall clock ahead of everything in the state wins
        later = replace(make_state(backend.store_id, StateId(1, 4), serial=45), observed_at=1)
        receipt = await backend.commit(later, StateId(1, 3))
        assert receipt.committed_at == wall_us(clock)
    async with contract_backend.opened(path) as backend:
        result = await backend.read_state()
        assert result is not None
        assert result[0].written_at == wall_us(clock)
        assert_same_state(result[1], later)


async def test_empty_state_round_trip(contract_backend: ContractBackend, path: Path) -> None:
    async with contract_backend.opened(path) as backend:
        assert backend.store_id is not None
        state = make_state(backend.store_id, StateId(1, 1), ())
        await backend.commit(state, None)
        result = await backend.read_state()
        assert result is not None
        assert_same_state(result[1], state)
        assert result[1].sources == ()


async def test_idempotent_retry_returns_the_original_commit(
    contract_backend: ContractBackend, path: Path
) -> None:
    clock = FakeClock(wall=START)
    async with contract_backend.opened(path, clock) as backend:
        assert backend.store_id is not None
        state = make_state(backend.store_id, StateId(1, 1))
        first = await backend.commit(state, None)
        clock.move_wall(60)
        # The caller did not learn the outcome and tries again with the same expectation.
        again = await backend.commit(state, None)
        assert again.retried
        assert again.committed_at == first.committed_at == wall_us(FakeClock(wall=START))
        assert again.state_digest == first.state_digest
        # An equal state built anew is the same content.
        rebuilt = make_state(backend.store_id, StateId(1, 1))
        assert (await backend.commit(rebuilt, None)).retried
        header = await backend.read_header()
        assert header is not None
        assert header.written_at == first.committed_at


async def test_expected_conflict_leaves_the_stored_state(
    contract_backend: ContractBackend, path: Path
) -> None:
    async with contract_backend.opened(path) as backend:
        assert backend.store_id is not None
        # Nothing stored yet, but the caller expects a state.
        first = make_state(backend.store_id, StateId(1, 1))
        with pytest.raises(CommitConflictError):
            await backend.commit(first, StateId(1, 0))
        assert await backend.read_state() is None
        await backend.commit(first, None)
        second = make_state(backend.store_id, StateId(1, 2), serial=43)
        for wrong in (None, StateId(1, 0), StateId(2, 1)):
            with pytest.raises(CommitConflictError) as caught:
                await backend.commit(second, wrong)
            assert not caught.value.retryable
        result = await backend.read_state()
        assert result is not None
        assert result[0].state_digest == state_digest(first)
        assert_same_state(result[1], first)
        # After a newer commit, retrying the older one is a conflict, not a retry.
        await backend.commit(second, first.state_id)
        with pytest.raises(CommitConflictError):
            await backend.commit(first, None)


async def test_same_id_other_content_is_a_conflict(
    contract_backend: ContractBackend, path: Path
) -> None:
    async with contract_backend.opened(path) as backend:
        assert backend.store_id is not None
        state = make_state(backend.store_id, StateId(1, 1))
        await backend.commit(state, None)
        other = make_state(backend.store_id, StateId(1, 1), realistic_sources(1))
        for expected in (None, state.state_id):
            with pytest.raises(CommitConflictError, match="other content"):
                await backend.commit(other, expected)
        result = await backend.read_state()
        assert result is not None
        assert_same_state(result[1], state)


async def test_state_of_another_store_is_refused(
    contract_backend: ContractBackend, path: Path
) -> None:
    async with contract_backend.opened(path) as backend:
        with pytest.raises(CommitConflictError):
            await backend.commit(make_state("another-store", StateId(1, 1)), None)
        assert await backend.read_state() is None


class BoomError(Exception):
    """Raised by a sabotaged insert."""


@pytest.mark.parametrize("fail_at", [0, 5, 40, "header"])
async def test_error_mid_write_rolls_back(
    kind: str, path: Path, fail_at: int | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with opened(kind, path) as backend:
        assert backend.store_id is not None
        old = make_state(backend.store_id, StateId(1, 1))
        await backend.commit(old, None)
        new = crash_state(backend.store_id, StateId(1, 2), 12_000)
        store: Any = sql_store(backend)
        insert = store._insert
        calls: list[str] = []

        def sabotaged(table: str, columns: Any, rows: Any) -> None:
            if (fail_at == "header" and table == "store_meta") or len(calls) == fail_at:
                raise BoomError(f"after {len(calls)} batches")
            calls.append(table)
            insert(table, columns, rows)

        monkeypatch.setattr(store, "_insert", sabotaged)
        with pytest.raises(BoomError):
            await backend.commit(new, old.state_id)
        if fail_at != 0:
            assert "vrps" in calls  # the failure came after rows were written
        result = await backend.read_state()
        assert result is not None
        assert_same_state(result[1], old)

        # The connection is clean: the same commit goes through once the fault is gone.
        monkeypatch.setattr(store, "_insert", insert)
        await backend.commit(new, old.state_id)
    async with opened(kind, path) as backend:
        result = await backend.read_state()
        assert result is not None
        assert_same_state(result[1], new)


# ---------------------------------------------------------------- refusing foreign or broken files


def create_schema(kind: str, path: Path, version: int, *, skip: str = "") -> None:
    """A database with our DDL (minus ``skip``) and ``version`` in schema_info.

    Its schema_info has no key or CHECK (so it can say another version, or hold two rows).
    """
    with raw(kind, path) as db:
        for statement in ddl("length" if kind == "sqlite" else "octet_length"):
            if "TABLE schema_info (" in statement:
                statement = UNCHECKED_DDL[0]  # noqa: PLW2901 - the one replaced statement
            if not skip or f"TABLE {skip} (" not in statement:
                db.execute(statement)
        db.execute("INSERT INTO schema_info VALUES (1, ?, ?, ?)", (version, "f" * 32, 0))


async def assert_refused_untouched(
    kind: str, path: Path, error: type[PersistenceError] | tuple[type[PersistenceError], ...]
) -> None:
    """Opening fails with ``error`` (not retryable), the file keeps its bytes, the lock is free."""
    before = await anyio.Path(path).read_bytes()
    for _ in range(2):  # twice: a failed open released the owner lock
        backend = make(kind, path)
        with pytest.raises(error) as caught:
            await backend.open()
        assert not caught.value.retryable
        assert not backend.is_open
        assert await backend.close()
    assert await anyio.Path(path).read_bytes() == before


@pytest.mark.parametrize("version", [1, 3])
async def test_unknown_schema_version_is_refused(kind: str, path: Path, version: int) -> None:
    create_schema(kind, path, version)
    await assert_refused_untouched(kind, path, UnsupportedSchemaError)


async def test_foreign_database_is_refused(kind: str, path: Path) -> None:
    with raw(kind, path) as db:
        db.execute("CREATE TABLE customers (id INTEGER, name TEXT)")
        db.execute("INSERT INTO customers VALUES (1, 'someone else''s data')")
    await assert_refused_untouched(kind, path, UnsupportedSchemaError)


async def test_schema_v2_with_a_missing_table_is_corrupt(kind: str, path: Path) -> None:
    create_schema(kind, path, 2, skip="aspa_providers")
    await assert_refused_untouched(kind, path, CorruptStateError)


async def test_schema_info_with_two_rows_is_corrupt(kind: str, path: Path) -> None:
    create_schema(kind, path, 2)
    with raw(kind, path) as db:
        db.execute("INSERT INTO schema_info VALUES (1, 2, 'x', 0)")
    await assert_refused_untouched(kind, path, CorruptStateError)


async def test_not_a_database_is_refused(kind: str, path: Path) -> None:
    await anyio.Path(path).write_bytes(b"these are not the pages you are looking for\n" * 500)
    # SQLite says "not a database" (SQLITE_NOTADB); DuckDB only raises its generic IOException,
    # which is permanent without claiming corruption (see test_errors).
    refused = CorruptStateError if kind == "sqlite" else PersistenceError
    await assert_refused_untouched(kind, path, refused)


# Row tampering after a clean commit. Realistic state: source 0 "ripe-http" (4 IPv4 VRPs,
# support_id 0-3, then 2 IPv6, 4-5, then 2 duplicate supports, 6-7; 2 router keys and 1
# duplicate; 3 ASPAs of afi 0/1/2 and 1 duplicate), source 1 "rtr-upstream" (3 IPv4, 0-2, then
# 2 IPv6, 3-4; 1 ASPA of afi 1), source 2 "local-file" (empty, invalidated, group 1).
ROW_TAMPERS: list[tuple[str, tuple[object, ...]]] = [
    ("UPDATE vrps SET asn = asn + 1 WHERE source_id = 0 AND support_id = 1", ()),
    ("UPDATE vrps SET expires_at = expires_at - 1 WHERE source_id = 1 AND support_id = 4", ()),
    ("UPDATE vrps SET max_length = 31 WHERE source_id = 0 AND support_id = 0", ()),
    ("DELETE FROM vrps WHERE source_id = 0 AND support_id = 2", ()),
    (
        "UPDATE vrps SET family = 6, network = ? WHERE source_id = 1 AND support_id = 2",
        (bytes(16),),
    ),
    ("UPDATE router_keys SET spki = ? WHERE source_id = 0 AND support_id = 1", (b"\x31",)),
    ("UPDATE router_keys SET expires_at = 0 WHERE source_id = 0 AND support_id = 0", ()),
    ("UPDATE aspas SET customer = 64495 WHERE source_id = 0 AND support_id = 0", ()),
    ("UPDATE aspa_providers SET provider = 64600 WHERE source_id = 0 AND idx = 2", ()),
    (
        "UPDATE aspa_providers SET provider = 1 WHERE source_id = 0 AND support_id = 0 AND idx = 2",
        (),
    ),
    ("DELETE FROM aspa_providers WHERE source_id = 0 AND support_id = 0 AND idx = 1", ()),
    ("DELETE FROM aspas WHERE source_id = 1", ()),
    ("UPDATE sources SET rtr_serial = NULL WHERE source_id = 1", ()),
    ("UPDATE sources SET name = 'renamed' WHERE source_id = 2", ()),
    ("UPDATE sources SET location = 'rtr://192.0.2.2:323' WHERE source_id = 1", ()),
    ("UPDATE sources SET complete = 0 WHERE source_id = 0", ()),
    ("UPDATE sources SET selected = 7 WHERE source_id = 1", ()),
    ("DELETE FROM sources WHERE source_id = 2", ()),
    ("INSERT INTO sources SELECT * FROM sources WHERE source_id = 2", ()),
    ("UPDATE vrps SET source_id = 7 WHERE source_id = 0 AND support_id = 0", ()),
    ("UPDATE router_keys SET source_id = 7 WHERE source_id = 0 AND support_id = 0", ()),
    ("UPDATE aspas SET source_id = 7 WHERE source_id = 1", ()),
    ("UPDATE sources SET name = 'ripe-http' WHERE source_id = 1", ()),
    # Schema 2's later shape (P-02, P-10, P-27, P-28).
    ("UPDATE aspas SET afi = 2 WHERE source_id = 0 AND support_id = 0", ()),
    ("UPDATE aspas SET afi = 0 WHERE source_id = 1", ()),
    ("UPDATE vrps SET support_id = 9 WHERE source_id = 0 AND support_id = 7", ()),
    ("DELETE FROM vrps WHERE source_id = 0 AND support_id = 6", ()),
    ("DELETE FROM router_keys WHERE source_id = 0 AND support_id = 2", ()),
    ("UPDATE sources SET vrp_records = 7 WHERE source_id = 0", ()),
    ("UPDATE sources SET present = 1 WHERE source_id = 1", ()),
    ("UPDATE sources SET protocol = 1 WHERE source_id = 1", ()),
    ("UPDATE sources SET invalidated = 0 WHERE source_id = 2", ()),
    ("UPDATE sources SET aspa_families = 3 WHERE source_id = 1", ()),
    ("UPDATE sources SET metadata_json = NULL WHERE source_id = 0", ()),
    ("UPDATE sources SET group_id = 1 WHERE source_id = 1", ()),
    ("UPDATE sources SET group_id = 5 WHERE source_id = 1", ()),
    ("UPDATE groups SET name = 'other' WHERE group_id = 2", ()),
    ("DELETE FROM groups WHERE group_id = 2", ()),
    ("UPDATE groups SET kinds = 1 WHERE group_id = 0", ()),
    ("UPDATE active_groups SET group_id = 1 WHERE kind = 'vrp'", ()),
    ("DELETE FROM active_groups WHERE kind = 'aspa_v4'", ()),
    ("UPDATE active_groups SET group_id = 9 WHERE kind = 'vrp'", ()),
]
#: SQLite keeps a value of another type in a typed column; DuckDB refuses it at UPDATE time.
SQLITE_TYPE_TAMPERS: list[tuple[str, tuple[object, ...]]] = [
    ("UPDATE vrps SET expires_at = 1.5 WHERE source_id = 0 AND support_id = 0", ()),
    ("UPDATE vrps SET asn = 64496.5 WHERE source_id = 0 AND support_id = 0", ()),
    ("UPDATE vrps SET network = 'abcd' WHERE source_id = 0 AND support_id = 0", ()),
    ("UPDATE router_keys SET asn = 1.5 WHERE source_id = 0 AND support_id = 0", ()),
    ("UPDATE router_keys SET ski = 'twenty characters...' WHERE source_id = 0", ()),
    ("UPDATE aspas SET expires_at = 'soon' WHERE source_id = 0 AND support_id = 0", ()),
    ("UPDATE sources SET accepted_at = 2.5 WHERE source_id = 0", ()),
    ("UPDATE sources SET name = X'00' WHERE source_id = 0", ()),
    ("UPDATE sources SET location = 7 WHERE source_id = 0", ()),
]
#: Rows the range rules must catch before any digest is computed.
RANGE_TAMPERS: list[tuple[str, tuple[object, ...]]] = [
    ("UPDATE vrps SET prefix_length = 40, max_length = 40 WHERE family = 4 AND support_id = 0", ()),
    ("UPDATE vrps SET max_length = 129 WHERE family = 6 AND source_id = 0 AND support_id = 4", ()),
    ("UPDATE vrps SET max_length = prefix_length - 1 WHERE source_id = 0 AND support_id = 0", ()),
    ("UPDATE vrps SET asn = 4294967296 WHERE source_id = 0 AND support_id = 0", ()),
    ("UPDATE vrps SET asn = -1 WHERE source_id = 0 AND support_id = 0", ()),
    ("UPDATE vrps SET family = 5 WHERE source_id = 0 AND support_id = 0", ()),
    ("UPDATE vrps SET support_id = -1 WHERE source_id = 0 AND support_id = 0", ()),
    (
        "UPDATE vrps SET network = ? WHERE family = 4 AND source_id = 0 AND support_id = 0",
        (b"\x01\x02",),
    ),
    (
        "UPDATE vrps SET network = ? WHERE family = 6 AND source_id = 0 AND support_id = 4",
        (bytes(4),),
    ),
    ("UPDATE router_keys SET ski = ? WHERE source_id = 0 AND support_id = 0", (bytes(19),)),
    ("UPDATE router_keys SET spki = ? WHERE source_id = 0 AND support_id = 0", (b"",)),
    ("UPDATE router_keys SET asn = 4294967296 WHERE source_id = 0 AND support_id = 0", ()),
    ("UPDATE aspas SET customer = 0 WHERE source_id = 0 AND support_id = 0", ()),
    ("UPDATE aspa_providers SET provider = 4294967296 WHERE source_id = 1", ()),
    ("UPDATE sources SET complete = 2 WHERE source_id = 0", ()),
    ("UPDATE sources SET capabilities = 8 WHERE source_id = 0", ()),
    ("UPDATE sources SET rtr_session = 65536 WHERE source_id = 1", ()),
    ("UPDATE sources SET rtr_session = -1 WHERE source_id = 1", ()),
    ("UPDATE sources SET rtr_serial = 4294967296 WHERE source_id = 1", ()),
    ("UPDATE sources SET rtr_serial = -1 WHERE source_id = 1", ()),
    ("UPDATE aspas SET afi = 3 WHERE source_id = 0 AND support_id = 0", ()),
    ("UPDATE sources SET protocol = 3 WHERE source_id = 1", ()),
    ("UPDATE sources SET present = 8 WHERE source_id = 1", ()),
    ("UPDATE sources SET invalidated = 2 WHERE source_id = 2", ()),
    ("UPDATE sources SET aspa_families = 4 WHERE source_id = 0", ()),
    ("UPDATE groups SET kinds = 8 WHERE group_id = 0", ()),
    ("UPDATE active_groups SET kind = 'aspa_v5' WHERE kind = 'aspa_v4'", ()),
]
#: Bugs in persistence/ found by these tests, marked as strict xfails (none open: all fixed).
KNOWN_BUGS: dict[str, tuple[str, type[Exception]]] = {}


def tamper_params(
    tampers: list[tuple[str, tuple[object, ...]]], kinds: tuple[str, ...] = KINDS
) -> list[Any]:
    """Parameters (kind, sql, args), the known bugs marked as strict xfail."""
    params: list[Any] = []
    for sql, args in tampers:
        bug = next((bug for key, bug in KNOWN_BUGS.items() if key in sql), None)
        marks = (
            [pytest.mark.xfail(reason=f"persistence bug: {bug[0]}", raises=bug[1], strict=True)]
            if bug
            else []
        )
        params.extend(pytest.param(k, sql, args, marks=marks, id=f"{k}-{sql}") for k in kinds)
    return params


#: Tampers the current DDL's keys and CHECKs refuse in SQL (see test_contract_schema): on such a
#: file they cannot happen, so they run on a file of the first DDL (`LEGACY_DDL`) instead.
SQL_REFUSED = (
    "INSERT INTO sources SELECT * FROM sources WHERE source_id = 2",
    "UPDATE sources SET name = 'ripe-http' WHERE source_id = 1",
    "UPDATE vrps SET network = 'abcd' WHERE source_id = 0 AND support_id = 0",
    "UPDATE router_keys SET ski = 'twenty characters...' WHERE source_id = 0",
)


def layout_params(
    tampers: list[tuple[str, tuple[object, ...]]], kinds: tuple[str, ...] = KINDS
) -> list[Any]:
    """`tamper_params` on a current file where SQL allows the tamper, and on a legacy file."""
    current = [(sql, args) for sql, args in tampers if sql not in SQL_REFUSED]
    params = [pytest.param(False, *p.values, id=p.id) for p in tamper_params(current, kinds)]
    return params + [
        pytest.param(True, *p.values, id=f"legacy-{p.id}") for p in tamper_params(tampers, kinds)
    ]


#: A cleanly committed and closed store per backend and layout, copied by the tamper tests.
_COMMITTED: dict[tuple[str, bool], bytes] = {}


async def tamper_and_read(
    kind: str, path: Path, sql: str, args: tuple[object, ...], *, legacy: bool = False
) -> bytes:
    """A committed, closed store tampered with through a raw connection; the file's bytes.

    ``legacy``: the store was created by the first schema-2 DDL (no keys or CHECKs).
    """
    if (kind, legacy) not in _COMMITTED:
        if legacy:
            legacy_store(kind, path)
        await committed(kind, path)
        _COMMITTED[kind, legacy] = await anyio.Path(path).read_bytes()
    else:
        await anyio.Path(path).write_bytes(_COMMITTED[kind, legacy])
    with raw(kind, path) as db:
        db.execute(sql, args) if args else db.execute(sql)
    return await anyio.Path(path).read_bytes()


@pytest.mark.parametrize(
    ("legacy", "kind", "sql", "args"),
    layout_params(ROW_TAMPERS) + layout_params(SQLITE_TYPE_TAMPERS, ("sqlite",)),
)
async def test_tampered_rows_are_corrupt(
    legacy: bool, kind: str, sql: str, args: tuple[object, ...], tmp_path: Path
) -> None:
    path = tmp_path / "state.db"
    before = await tamper_and_read(kind, path, sql, args, legacy=legacy)
    async with opened(kind, path) as backend:
        with pytest.raises(CorruptStateError) as caught:
            await backend.read_state()
        assert not caught.value.retryable
        assert await backend.read_header() is not None  # the header itself is intact
    assert await anyio.Path(path).read_bytes() == before


@pytest.mark.parametrize(("kind", "sql", "args"), tamper_params(RANGE_TAMPERS))
async def test_out_of_range_rows_are_corrupt(
    kind: str, sql: str, args: tuple[object, ...], tmp_path: Path
) -> None:
    """Written behind the backend's back into a file of the first DDL (the current one's CHECKs
    refuse these rows in SQL, test_contract_schema): the read's range rules still catch them."""
    path = tmp_path / "state.db"
    before = await tamper_and_read(kind, path, sql, args, legacy=True)
    async with opened(kind, path) as backend:
        with pytest.raises(DamagedStateError, match="type or range rule"):
            await backend.read_state()
    assert await anyio.Path(path).read_bytes() == before


HEADER_TAMPERS: list[tuple[str, tuple[object, ...]]] = [
    ("UPDATE publication SET serial = serial + 1", ()),
    ("UPDATE store_meta SET written_at = written_at - 1", ()),
    ("UPDATE store_meta SET generation = 2", ()),
    ("UPDATE publication SET session_v2 = 0", ()),
    ("UPDATE store_meta SET store_id = 'someone-else'", ()),
    ("UPDATE store_meta SET package_version = '9.9.9'", ()),
    ("UPDATE store_meta SET meta_digest = state_digest", ()),
    ("UPDATE store_meta SET state_digest = meta_digest", ()),
    ("UPDATE store_meta SET meta_digest = ?", (bytes(32),)),
    ("UPDATE store_meta SET config_epoch = 8", ()),
    ("UPDATE store_meta SET config_store_id = NULL", ()),
    ("UPDATE store_meta SET config_identity = 'sha256:00'", ()),
    ("UPDATE store_meta SET mode = 'offline'", ()),
    ("UPDATE store_meta SET reference_time = 0", ()),
    ("UPDATE store_meta SET policy_id = NULL", ()),
    ("UPDATE store_meta SET versions_json = '{\"schema\":2}'", ()),
    ("UPDATE publication SET observed_at = observed_at - 1", ()),
    ("UPDATE publication SET evaluated_digest = ?", (bytes(32),)),
    ("UPDATE publication SET recovered_from_epoch = 1, recovered_from_generation = 1", ()),
    ("UPDATE publication SET publication_digest = ?", (bytes(32),)),
    ("DELETE FROM publication", ()),
    ("UPDATE publication SET policy_json = '{}'", ()),
    ("DELETE FROM store_meta", ()),
]
SQLITE_HEADER_TAMPERS: list[tuple[str, tuple[object, ...]]] = [
    ("UPDATE store_meta SET epoch = 1.5", ()),
    ("UPDATE store_meta SET state_digest = 'text'", ()),
    ("UPDATE store_meta SET store_id = X'00'", ()),
    ("UPDATE store_meta SET config_epoch = 7.5", ()),
]


@pytest.mark.parametrize(
    ("kind", "sql", "args"),
    tamper_params(HEADER_TAMPERS) + tamper_params(SQLITE_HEADER_TAMPERS, ("sqlite",)),
)
async def test_tampered_header_is_corrupt(
    kind: str, sql: str, args: tuple[object, ...], tmp_path: Path
) -> None:
    path = tmp_path / "state.db"
    before = await tamper_and_read(kind, path, sql, args)
    # The header is what every commit is checked against: the owner's open refuses the file
    # (contract P-51), before anything could be written into it.
    backend = make(kind, path)
    with pytest.raises(CorruptStateError, match="header"):
        await backend.open()
    assert await backend.close()
    assert await anyio.Path(path).read_bytes() == before


async def test_resigned_header_still_fails_the_state_digest(kind: str, path: Path) -> None:
    """A header edited and given a matching header digest: the state digest catches it."""
    await committed(kind, path)
    async with opened(kind, path) as backend:
        header = await backend.read_header()
    assert header is not None
    forged = replace(header, serial=header.serial + 1)
    forged = replace(forged, publication_digest=publication_digest(forged))
    with raw(kind, path) as db:
        db.execute(
            "UPDATE publication SET serial = ?, publication_digest = ?",
            (forged.serial, forged.publication_digest),
        )
    async with opened(kind, path) as backend:
        assert await backend.read_header() == forged
        with pytest.raises(CorruptStateError, match="state digest"):
            await backend.read_state()


async def test_header_of_another_schema_version_is_corrupt(kind: str, path: Path) -> None:
    """A header claiming version 3 over schema_info version 2, re-signed: refused."""
    await committed(kind, path)
    async with opened(kind, path) as backend:
        h = await backend.read_header()
    assert h is not None
    forged = replace(h, schema_version=3)
    forged = replace(forged, meta_digest=meta_digest(forged))
    forged = replace(forged, publication_digest=publication_digest(forged))
    with raw(kind, path) as db:
        # The DDL's CHECK (schema_version = 2) refuses it: the same table without the CHECK.
        db.execute("CREATE TABLE sm AS SELECT * FROM store_meta")
        db.execute("DROP TABLE store_meta")
        db.execute(UNCHECKED_DDL[1])
        db.execute("INSERT INTO store_meta SELECT * FROM sm")
        db.execute("DROP TABLE sm")
        db.execute(
            "UPDATE store_meta SET schema_version = 3, meta_digest = ?", (forged.meta_digest,)
        )
        db.execute("UPDATE publication SET publication_digest = ?", (forged.publication_digest,))
    backend = make(kind, path)
    with pytest.raises(CorruptStateError, match="schema version"):
        await backend.open()  # the owner refuses a damaged header at open (P-51)
    assert await backend.close()


# ---------------------------------------------------------------- ownership and lifecycle


async def test_second_owner_in_process_is_refused(
    contract_backend: ContractBackend, tmp_path: Path
) -> None:
    (tmp_path / "sub").mkdir()
    path = tmp_path / "state.db"
    (tmp_path / "link.db").symlink_to(path)
    async with contract_backend.opened(path) as owner:
        for spelling in (path, tmp_path / "sub" / ".." / "state.db", tmp_path / "link.db"):
            second = contract_backend.build(spelling)
            with pytest.raises(OwnerLockedError) as caught:
                await second.open()
            assert not caught.value.retryable
            assert await second.close()
        assert await owner.read_state() is None  # the owner is unaffected
    # Once the owner is gone, a new one opens.
    async with contract_backend.opened(tmp_path / "link.db") as backend:
        assert await backend.read_state() is None


OPEN_SCRIPT = """
import sys, time, anyio
from pathlib import Path
from tests.persistence.contract_backend import load

async def main() -> None:
    backend = load(sys.argv[1]).make(Path(sys.argv[2]), time.time)
    try:
        await backend.open()
    except Exception as exc:
        print(type(exc).__name__)
    else:
        print("opened")
    finally:
        await backend.close()

anyio.run(main)
"""


async def open_in_subprocess(contract_backend: ContractBackend, path: Path) -> str:
    """What another process gets when it opens ``path`` as owner."""
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [sys.executable, "-c", OPEN_SCRIPT, contract_backend.ref, str(path)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
    return done.stdout.decode().strip()


async def test_second_owner_in_another_process_is_refused(
    contract_backend: ContractBackend, path: Path
) -> None:
    async with contract_backend.opened(path):
        assert await open_in_subprocess(contract_backend, path) == "OwnerLockedError"
    assert await open_in_subprocess(contract_backend, path) == "opened"


async def test_second_owner_through_a_hard_link_is_refused(
    contract_backend: ContractBackend, tmp_path: Path
) -> None:
    """Ownership follows the file (its inode), not the path: a hard link does not get in."""
    path = tmp_path / "state.db"
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / "elsewhere" / "link.db"
    async with contract_backend.opened(path) as owner:  # creates the file, then locks it
        assert owner.store_id is not None
        os.link(path, link)
        second = contract_backend.build(link)
        with pytest.raises(OwnerLockedError) as caught:
            await second.open()
        assert not caught.value.retryable
        assert await second.close()
        assert await open_in_subprocess(contract_backend, link) == "OwnerLockedError"
        # The owner is unaffected: it still commits and reads.
        state = make_state(owner.store_id, StateId(1, 1))
        await owner.commit(state, None)
        result = await owner.read_state()
        assert result is not None
        assert_same_state(result[1], state)
    # The other way round: an owner through the link keeps out the original name.
    async with contract_backend.opened(link):
        second = contract_backend.build(path)
        with pytest.raises(OwnerLockedError):
            await second.open()
        assert await second.close()
        assert await open_in_subprocess(contract_backend, path) == "OwnerLockedError"
    assert await open_in_subprocess(contract_backend, link) == "opened"
    async with contract_backend.opened(path) as backend:
        result = await backend.read_state()
        assert result is not None
        assert_same_state(result[1], state)


async def test_closed_backend_refuses_calls(contract_backend: ContractBackend, path: Path) -> None:
    backend = contract_backend.build(path)
    with pytest.raises(BackendClosedError):
        await backend.read_header()
    await backend.open()
    assert backend.store_id is not None
    state = make_state(backend.store_id, StateId(1, 1))
    await backend.open()  # a second open of an open backend is harmless
    assert await backend.close()
    assert await backend.close()  # idempotent
    with pytest.raises(BackendClosedError):
        await backend.read_header()
    with pytest.raises(BackendClosedError):
        await backend.read_state()
    with pytest.raises(BackendClosedError):
        await backend.commit(state, None)
    with pytest.raises(BackendClosedError):
        await backend.open()
    assert await backend.close()
    # The closed backend released the file.
    async with contract_backend.opened(path) as again:
        assert await again.read_state() is None


async def test_all_calls_run_on_one_worker_thread(
    kind: str, path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = make(kind, path)
    store: Any = sql_store(backend)
    seen: list[tuple[str, int]] = []
    for name in (
        "open_sync",
        "read_header_sync",
        "read_state_sync",
        "commit_sync",
        "close_sync",
        "_begin",
        "_insert",
    ):
        original = getattr(store, name)

        def recorder(*args: Any, _name: str = name, _fn: Any = original, **kw: Any) -> Any:
            seen.append((_name, threading.get_ident()))
            return _fn(*args, **kw)

        monkeypatch.setattr(store, name, recorder)
    await backend.open()
    assert backend.store_id is not None
    await backend.commit(make_state(backend.store_id, StateId(1, 1)), None)
    await backend.read_header()
    await backend.read_state()
    assert await backend.close()
    names = {name for name, _ in seen}
    assert names == {
        "open_sync",
        "read_header_sync",
        "read_state_sync",
        "commit_sync",
        "close_sync",
        "_begin",
        "_insert",
    }
    threads = {ident for _, ident in seen}
    assert len(threads) == 1
    assert threads != {threading.get_ident()}  # not the event loop's thread


# ---------------------------------------------------------------- the duckdb extra


async def test_missing_duckdb_extra_fails_at_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "duckdb", None)  # makes `import duckdb` fail
    backend = ThreadedBackend(
        DuckDBBackend(tmp_path / "state.duckdb")
    )  # constructing needs no duckdb
    with pytest.raises(MissingExtraError, match="duckdb") as caught:
        await backend.open()
    assert not caught.value.retryable
    assert not backend.is_open
    assert await backend.close()
    assert await listing(tmp_path) == []


def test_importing_the_backends_does_not_import_duckdb() -> None:
    script = (
        "import sys\n"
        "sys.modules['duckdb'] = None\n"
        "import persistence.duckdb_backend, persistence.location\n"
        "from persistence.location import parse_state_location\n"
        "parse_state_location('duckdb:/nonexistent/x.duckdb').make_backend()\n"
        "persistence.duckdb_backend.DuckDBBackend('/nonexistent/y.duckdb')\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, check=False, timeout=60
    )
    assert done.stdout.decode().strip() == "ok", done.stderr.decode()
