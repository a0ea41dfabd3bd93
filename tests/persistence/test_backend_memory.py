"""The backend contract suite on a third-party backend of the tests' own (P-03, P-04, P-08).

`tests.persistence.memory_backend.MemoryBackend` implements only the synchronous protocol (and
a store id); the suite runs it in the `ThreadedBackend` adapter that the client uses for any
backend, the one a host injects too (`ClientConfig.backend`).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from persistence import PersistenceBackend, ThreadedBackend, receipt_of
from persistence.state import StateId
from tests.persistence.contract_backend import ContractBackend
from tests.persistence.contract_suite import *  # noqa: F403 - the suite's tests
from tests.persistence.memory_backend import MemoryBackend
from tests.persistence.states import make_state

MEMORY = ContractBackend(
    name="memory",
    make=lambda path, wall: ThreadedBackend(MemoryBackend(path, wall=wall)),
    shared_read=False,
    ref="tests.persistence.test_backend_memory:MEMORY",
)


@pytest.fixture
def contract_backend() -> ContractBackend:
    """The backend the suite runs against."""
    return MEMORY


async def test_the_adapter_runs_every_call_on_its_one_worker_thread(tmp_path: Path) -> None:
    inner = MemoryBackend(tmp_path / "state.mem")
    assert isinstance(inner, PersistenceBackend)
    backend = ThreadedBackend(inner)
    await backend.open()
    assert backend.store_id is not None
    state = make_state(backend.store_id, StateId(1, 1))
    receipt = await backend.commit(state, None)
    found = await backend.read_state()
    assert found is not None
    header, got = found
    assert header.receipt() == receipt
    assert receipt_of(got) == receipt  # the read's state carries its actual receipt
    assert receipt_of(state) is None  # the state that waited to be committed had none
    assert (await backend.read_header()) == header
    assert await backend.close()
    threads = {thread for _, thread in inner.calls}
    assert len(threads) == 1
    assert threading.get_ident() not in threads  # never the event loop's thread
    assert [name for name, _ in inner.calls] == [
        "open",
        "commit",
        "read_state",
        "read_state",
        "close",
    ]
