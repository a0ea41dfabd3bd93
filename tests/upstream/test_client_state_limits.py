"""`apply_config` lowering `Limits` against an unconfirmed commit (P-58), on a real SQLite file.

While the commit whose acknowledgement was lost is unconfirmed, bounds it is over are refused
(`ValueError` says why; the configuration and the old limits stay); once the stored header
confirmed it, the same change is accepted.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from persistence.errors import TransientError
from persistence.limits import Limits
from persistence.location import StateLocation
from persistence.sqlite_backend import SQLiteBackend
from persistence.state import PersistedState, PersistReceipt, StateHeader, StateId
from tests.upstream.helpers import export, write_atomically
from upstream import Client, ClientConfig, SourceConfig

pytestmark = pytest.mark.anyio

TIMEOUT = 10.0
B = [("192.0.2.0/24", 24, 64496), ("198.51.100.0/24", 24, 64497)]


async def test_lowered_limits_wait_for_the_unconfirmed_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, db = tmp_path / "export.json", tmp_path / "state.db"
    write_atomically(source, export(B))
    lost = [TransientError("connection lost after COMMIT")]
    header_open = threading.Event()
    commit, read_header = SQLiteBackend.commit, SQLiteBackend.read_header

    def losing_commit(
        self: SQLiteBackend, state: PersistedState, *, expected: StateId | None
    ) -> PersistReceipt:
        receipt = commit(self, state, expected=expected)
        if lost:
            raise lost.pop()
        return receipt

    def slow_header(self: SQLiteBackend) -> StateHeader | None:
        assert header_open.wait(TIMEOUT)  # on the worker thread: the outcome stays unknown
        return read_header(self)

    monkeypatch.setattr(SQLiteBackend, "commit", losing_commit)
    monkeypatch.setattr(SQLiteBackend, "read_header", slow_header)
    cfg = ClientConfig(
        (SourceConfig("file", str(source)),),
        poll_interval=0.05,
        state=StateLocation("sqlite", db),
        flush_timeout=5.0,
    )
    client = Client(cfg)
    async with client, anyio.create_task_group() as tg:
        assert client.keeping is not None
        assert client.keeping.persister is not None
        persister = client.keeping.persister
        persister.retry_initial = persister.retry_max = 0.01

        def unconfirmed() -> str | None:
            return persister.status.unconfirmed_id

        await tg.start(client.run)
        with anyio.fail_after(TIMEOUT):
            while unconfirmed() != "1.1":  # noqa: ASYNC110 - polls the persister's status
                await anyio.sleep(0.01)
        lower = dataclasses.replace(cfg, revision=1, limits=Limits(max_supports=1))
        with pytest.raises(ValueError, match=r"limits: refused, the unconfirmed commit of 1\.1"):
            await client.apply_config(lower)
        assert client.config.revision == 0  # nothing changed
        backend: Any = client.keeping.backend
        assert backend.limits == Limits()
        header_open.set()
        with anyio.fail_after(TIMEOUT):
            receipt = await client.flush()
        assert receipt.snapshot_id == StateId(1, 1)  # confirmed by the stored header
        assert unconfirmed() is None
        await client.apply_config(lower)  # the reservation is released: accepted
        assert backend.limits == Limits(max_supports=1)
        await client.aclose()
        tg.cancel_scope.cancel()
