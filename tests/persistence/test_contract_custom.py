"""The backend contract suite run the way a custom backend author runs it (P-04).

`tests.persistence.contract_suite` star-imported, one ``contract_backend`` fixture: the backend
here is not one of ours but a separate class that implements the synchronous
`PersistenceBackend` protocol (and the store id) by delegating to an SQLite owner under its own
name, run in the `ThreadedBackend` adapter the client uses for any backend. It offers none of
the adapter's optional extensions, so the suite can only pass through the protocol (headers
derived from the receipts a read returns, no SQL).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from persistence.backend import BackendCapabilities, ThreadedBackend
from persistence.sqlite_backend import SQLiteBackend
from persistence.state import PersistedState, PersistReceipt, StateId
from tests.persistence.contract_backend import ContractBackend
from tests.persistence.contract_suite import *  # noqa: F403 - the suite's tests


class DelegatingBackend:
    """A synchronous `PersistenceBackend` of its own name that keeps its state in SQLite."""

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

    def open(self) -> None:
        """Open the inner owner."""
        self._inner.open()

    def read_state(self) -> PersistedState | None:
        """The inner state, with its receipt."""
        return self._inner.read_state()

    def commit(self, state: PersistedState, *, expected: StateId | None) -> PersistReceipt:
        """Commit into the inner owner."""
        return self._inner.commit(state, expected=expected)

    def close(self) -> None:
        """Close the inner owner."""
        self._inner.close()


DELEGATING = ContractBackend(
    name="delegating",
    make=lambda path, wall: ThreadedBackend(DelegatingBackend(path, wall=wall)),
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
