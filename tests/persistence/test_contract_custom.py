"""The backend contract suite run the way a custom backend author runs it (P-04).

`tests.persistence.contract_suite` star-imported, one ``contract_backend`` fixture: the backend
here is not one of ours but a separate class that implements the `PersistenceBackend` protocol
by delegating to an SQLite owner under its own name, so the suite can only pass through the
protocol (no `ThreadedBackend` internals, no SQL).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from persistence.backend import BackendCapabilities
from persistence.sqlite_backend import SQLiteBackend
from persistence.state import PersistedState, PersistReceipt, StateHeader, StateId
from tests.persistence.contract_backend import ContractBackend
from tests.persistence.contract_suite import *  # noqa: F403 - the suite's tests


class DelegatingBackend:
    """A `PersistenceBackend` of its own name that keeps its state in an SQLite owner."""

    def __init__(self, path: Path, *, wall: Callable[[], float]) -> None:
        """Nothing is opened here."""
        self._inner = SQLiteBackend(path, wall=wall)

    @property
    def capabilities(self) -> BackendCapabilities:
        """SQLite's, under the name ``delegating``, without shared reads."""
        return replace(self._inner.capabilities, backend_name="delegating", shared_read=False)

    @property
    def store_id(self) -> str | None:
        """The inner store's id."""
        return self._inner.store_id

    async def open(self) -> None:
        """Open the inner owner."""
        await self._inner.open()

    async def read_header(self) -> StateHeader | None:
        """The inner header."""
        return await self._inner.read_header()

    async def read_state(self) -> tuple[StateHeader, PersistedState] | None:
        """The inner state."""
        return await self._inner.read_state()

    async def commit(self, state: PersistedState, expected: StateId | None) -> PersistReceipt:
        """Commit into the inner owner."""
        return await self._inner.commit(state, expected)

    async def close(self) -> bool:
        """Close the inner owner."""
        return await self._inner.close()


DELEGATING = ContractBackend(
    name="delegating",
    make=lambda path, wall: DelegatingBackend(path, wall=wall),
    shared_read=False,
    ref="tests.persistence.test_contract_custom:DELEGATING",
)


@pytest.fixture
def contract_backend() -> ContractBackend:
    """The backend the suite runs against."""
    return DELEGATING


def test_the_suite_is_every_protocol_level_contract_test() -> None:
    """The suite holds every contract test that needs no SQL backend, and only those."""
    import inspect

    from tests.persistence import contract_suite, test_contract

    suite = {name for name in contract_suite.__all__ if name.startswith("test_")}
    assert suite == {name for name in test_contract.__all__ if name.startswith("test_")}
    for name, fn in vars(test_contract).items():
        if not name.startswith("test_") or not inspect.isfunction(fn):
            continue
        params = set(inspect.signature(fn).parameters)
        if name in suite:
            assert params <= {"contract_backend", "path", "tmp_path"}, name
        else:  # our SQL backends' own: they name the SQL kind, or test the duckdb extra
            assert "kind" in params or "duckdb" in name, name
