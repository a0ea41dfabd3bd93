"""DuckDB only: one connection with threads=1 and external access off; no read-only followers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from persistence.backend import ThreadedBackend
from persistence.duckdb_backend import DuckDBBackend
from persistence.location import StateLocation
from tests.persistence.helpers import sql_store

pytestmark = pytest.mark.anyio


async def test_connection_settings(tmp_path: Path) -> None:
    backend = ThreadedBackend(DuckDBBackend(tmp_path / "state.duckdb"))
    await backend.open()
    try:
        store: Any = sql_store(backend)

        def settings() -> Any:
            return (
                store._conn()
                .execute(
                    "SELECT current_setting('threads'), current_setting('enable_external_access')"
                )
                .fetchone()
            )

        assert await backend._worker.run(settings) == (1, False)
    finally:
        assert await backend.close()


def test_no_read_only_follower(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sqlite"):
        StateLocation("duckdb", tmp_path / "state.duckdb").make_backend(read_only=True)
