"""The stored evaluation times (`observed_at`, each source's `evaluated_at`) on real files.

Covered, on SQLite and DuckDB: a round trip keeps both (also for a new owner and a read-only
reader), neither changes the state digest, ``written_at`` is never below either, the header
digest and the evaluated digest catch their damage. A file of our earlier layout
(``data/before-times.*.gz``, a ``header`` table) is refused untouched, never migrated.

The two files in ``data/`` were written by the backends of commit b7942bc (the last one without
the time columns): ``make_state(store_id, StateId(3, 5))`` committed at the tests' `START`.
"""

from __future__ import annotations

import gzip
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from persistence.backend import ThreadedBackend
from persistence.errors import CorruptStateError, UnsupportedSchemaError
from persistence.exchange import state_digest
from persistence.meta_digest import publication_digest
from persistence.sqlite_backend import SQLiteBackend
from persistence.state import PersistedState, StateId
from persistence.state_binary import evaluated_digest
from tests.clock import FakeClock
from tests.persistence.helpers import START, make, opened, raw, wall_us
from tests.persistence.states import US, assert_same_state, make_state, realistic_sources

pytestmark = pytest.mark.anyio

DATA = Path(__file__).parent / "data"
HOUR = 3600 * US


@pytest.fixture
def path(kind: str, tmp_path: Path) -> Path:
    """The database file (not created)."""
    return tmp_path / f"state.{kind}"


def timed(store_id: str, state_id: StateId, clock: FakeClock) -> PersistedState:
    """The realistic state with distinct stored times, all behind the wall clock."""
    http, rtr, empty = realistic_sources()
    sources = (
        replace(http, evaluated_at=wall_us(clock) - 50 * US),
        replace(rtr, evaluated_at=wall_us(clock) - 70 * US),
        replace(empty, evaluated_at=wall_us(clock) - 90 * US),
    )
    return replace(make_state(store_id, state_id, sources), observed_at=wall_us(clock) - 10 * US)


def stored_times(state: PersistedState) -> tuple[int, list[int]]:
    return state.observed_at, [s.evaluated_at for s in state.sources]


async def test_a_round_trip_keeps_the_observed_and_evaluated_times(kind: str, path: Path) -> None:
    clock = FakeClock(wall=START)
    async with opened(kind, path, clock) as backend:
        assert backend.store_id is not None
        state = timed(backend.store_id, StateId(1, 1), clock)
        await backend.commit(state, None)
        result = await backend.read_state()
        assert result is not None
        assert stored_times(result[1]) == stored_times(state)
        assert_same_state(result[1], state)
        assert result[0].observed_at == state.observed_at
        assert result[0].evaluated_digest == evaluated_digest(state.sources)
    async with opened(kind, path) as backend:  # a new owner
        result = await backend.read_state()
        assert result is not None
        assert stored_times(result[1]) == stored_times(state)
    if kind == "sqlite":
        reader = ThreadedBackend(SQLiteBackend(path, read_only=True))
        await reader.open()
        try:
            result = await reader.read_state()
        finally:
            assert await reader.close()
        assert result is not None
        assert stored_times(result[1]) == stored_times(state)


async def test_the_stored_times_leave_the_state_digest_alone(kind: str, path: Path) -> None:
    """States differing only in their times have one digest: the second is a retry."""
    clock = FakeClock(wall=START)
    async with opened(kind, path, clock) as backend:
        assert backend.store_id is not None
        state = timed(backend.store_id, StateId(1, 1), clock)
        first = await backend.commit(state, None)
        later = replace(
            state,
            observed_at=state.observed_at + 5 * US,
            sources=tuple(replace(s, evaluated_at=s.evaluated_at + 5 * US) for s in state.sources),
        )
        assert state_digest(later) == state_digest(state)
        again = await backend.commit(later, None)
        assert again.retried
        assert again.committed_at == first.committed_at
        assert again.state_digest == first.state_digest
        result = await backend.read_state()
        assert result is not None
        assert stored_times(result[1]) == stored_times(state)  # the original commit's times


async def test_written_at_is_never_below_a_stored_time(kind: str, path: Path) -> None:
    clock = FakeClock(wall=START)
    async with opened(kind, path, clock) as backend:
        assert backend.store_id is not None
        state = timed(backend.store_id, StateId(1, 1), clock)
        http, rtr, empty = state.sources
        ahead = replace(
            state, sources=(http, replace(rtr, evaluated_at=wall_us(clock) + HOUR), empty)
        )
        receipt = await backend.commit(ahead, None)
        assert receipt.committed_at == wall_us(clock) + HOUR
        observed = replace(
            timed(backend.store_id, StateId(1, 2), clock), observed_at=wall_us(clock) + 2 * HOUR
        )
        receipt = await backend.commit(observed, StateId(1, 1))
        assert receipt.committed_at == wall_us(clock) + 2 * HOUR
        header = await backend.read_header()
        assert header is not None
        assert header.written_at == wall_us(clock) + 2 * HOUR


TIME_TAMPERS = [
    "UPDATE sources SET evaluated_at = evaluated_at + 1 WHERE source_id = 1",
    "UPDATE publication SET observed_at = observed_at - 1",
    "UPDATE publication SET evaluated_digest = (SELECT state_digest FROM store_meta)",
]


@pytest.mark.parametrize("sql", TIME_TAMPERS)
async def test_damaged_stored_times_are_corrupt(kind: str, path: Path, sql: str) -> None:
    clock = FakeClock(wall=START)
    async with opened(kind, path, clock) as backend:
        assert backend.store_id is not None
        await backend.commit(timed(backend.store_id, StateId(1, 1), clock), None)
    with raw(kind, path) as db:
        db.execute(sql)
    with pytest.raises(CorruptStateError):
        # A damaged header fails the owner's open (P-51); damaged source rows fail the read.
        async with opened(kind, path) as backend:
            await backend.read_state()


async def test_a_written_at_below_an_evaluation_time_is_corrupt(kind: str, path: Path) -> None:
    """Rows and digests made consistent by hand, but no commit writes such a write time."""
    clock = FakeClock(wall=START)
    async with opened(kind, path, clock) as backend:
        assert backend.store_id is not None
        state = timed(backend.store_id, StateId(1, 1), clock)
        await backend.commit(state, None)
        header = await backend.read_header()
    assert header is not None
    http, rtr, empty = state.sources
    forged_rtr = replace(rtr, evaluated_at=header.written_at + 1)
    forged = replace(header, evaluated_digest=evaluated_digest((http, forged_rtr, empty)))
    with raw(kind, path) as db:
        db.execute(
            "UPDATE sources SET evaluated_at = ? WHERE source_id = 1", [forged_rtr.evaluated_at]
        )
        db.execute(
            "UPDATE publication SET evaluated_digest = ?, publication_digest = ?",
            [forged.evaluated_digest, publication_digest(forged)],
        )
    async with opened(kind, path) as backend:
        assert await backend.read_header() is not None
        with pytest.raises(CorruptStateError, match="written_at is earlier"):
            await backend.read_state()


# ---------------------------------------------------------------- files of before


async def before_times(kind: str, path: Path) -> bytes:
    """The file of our earlier layout (before the stored times), at ``path``; its bytes."""
    data = gzip.decompress((DATA / f"before-times.{kind}.gz").read_bytes())
    await anyio.Path(path).write_bytes(data)
    return data


async def test_a_file_of_the_earlier_layout_is_refused_untouched(kind: str, path: Path) -> None:
    """No automatic migration (contract): the owner refuses it and names what to do."""
    data = await before_times(kind, path)
    backend = make(kind, path)
    with pytest.raises(UnsupportedSchemaError, match="earlier rtr-serve layout") as caught:
        await backend.open()
    assert path.name in str(caught.value)
    assert "new empty file" in str(caught.value)
    assert await backend.close()
    assert await anyio.Path(path).read_bytes() == data


async def test_a_reader_refuses_a_file_of_the_earlier_layout(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    data = await before_times("sqlite", path)
    reader = ThreadedBackend(SQLiteBackend(path, read_only=True))
    with pytest.raises(UnsupportedSchemaError, match="earlier rtr-serve layout"):
        await reader.open()
    assert await reader.close()
    assert await anyio.Path(path).read_bytes() == data
