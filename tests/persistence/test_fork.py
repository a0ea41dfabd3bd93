"""P-07 with a real ``os.fork``: a child can neither use nor release the parent's owner lock."""

from __future__ import annotations

import fcntl
import os
import warnings
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from persistence.errors import ForkedProcessError, OwnerLockedError
from persistence.state import StateId
from tests.persistence.helpers import KINDS, make, opened, sql_store
from tests.persistence.states import make_state

pytestmark = pytest.mark.anyio
OK = 0
#: The child's exit codes for each thing that went wrong.
USED, CLOSED_WRONGLY, UNLOCKED, CRASHED = 10, 11, 12, 13


def first_step(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine up to its first suspension without an event loop (the child has none).

    Returns its result if it finishes there, or the error it raised; None if it suspended.
    """
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    except Exception as exc:  # noqa: BLE001 - the test looks at it
        return exc
    coro.close()
    return None


def lock_is_free(lock_path: Path) -> bool:
    """Whether an exclusive ``flock`` on a new open of ``lock_path`` is granted now."""
    fd = os.open(lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def child(backend: Any, state: Any, lock_path: Path) -> int:
    """What the forked child checks; its exit status."""
    for coro in (
        backend.read_header(),
        backend.read_state(),
        backend.commit(state, StateId(1, 1)),
        backend.open(),
    ):
        if not isinstance(first_step(coro), ForkedProcessError):
            return USED
    if first_step(backend.close()) is not True:
        return CLOSED_WRONGLY
    if not isinstance(backend.close_error, ForkedProcessError):
        return CLOSED_WRONGLY
    if sql_store(backend)._db is None:  # the parent's connection must not be closed here
        return CLOSED_WRONGLY
    if lock_is_free(lock_path):  # the close must not have unlocked the parent's lock
        return UNLOCKED
    return OK


def fork_and_check(backend: Any, state: Any, lock_path: Path) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # forking with threads: on purpose
        pid = os.fork()
    if pid == 0:
        status = CRASHED
        try:
            status = child(backend, state, lock_path)
        finally:
            os._exit(status)  # never back into pytest
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_forked_child_can_neither_use_nor_release_the_owner(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / f"state.{kind}"
    async with opened(kind, path) as backend:
        assert backend.store_id is not None
        first = make_state(backend.store_id, StateId(1, 1))
        await backend.commit(first, None)
        lock_path = path.with_name(path.name + ".owner-lock")
        second = make_state(backend.store_id, StateId(1, 2))
        assert fork_and_check(backend, second, lock_path) == OK
        # The parent still owns the file and works on.
        assert not lock_is_free(lock_path)
        await backend.commit(second, StateId(1, 1))
        header = await backend.read_header()
        assert header is not None
        assert header.state_id == StateId(1, 2)
        with pytest.raises(OwnerLockedError):
            await make(kind, path).open()
    assert lock_is_free(lock_path)  # and releases it on its own close
