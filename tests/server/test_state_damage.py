"""P-51 on real files: a state file too damaged to be written safely fails the start (before any
network, the file byte for byte unchanged); damaged rows in a sound file are not served, the
owner resynchronises from the network and its first commit replaces them.

Fail the start: not a database (garbage bytes), a truncated file, a failed integrity check, a
foreign or newer schema, other columns or schema objects, a damaged header, a file of our
earlier layout (a ``header`` table: never migrated, the host picks a new empty file). Go on: a state
digest mismatch (or a row breaking a type or range rule) in an otherwise sound file.
"""

from __future__ import annotations

import gzip
import hashlib
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from persistence.errors import PersistenceError
from persistence.location import StateLocation
from persistence.state import StateId
from rtr_server.app import App
from tests.persistence.helpers import make, raw
from tests.persistence.states import crash_state
from tests.server.helpers import base_export, expected_state, wait_until, write_export
from tests.server.test_cli import RTR_SERVE, free_port
from tests.server.test_state import full_table, running, state_config
from upstream.clock import SystemClock

pytestmark = pytest.mark.anyio


async def sound_file(kind: str, path: Path) -> None:
    """A state file as an owner leaves it: one committed state of 20 000 VRPs."""
    backend = make(kind, path)
    await backend.open()
    assert backend.store_id is not None
    await backend.commit(crash_state(backend.store_id, StateId(1, 1), 20_000), None)
    assert await backend.close()


def garbage(kind: str, path: Path) -> None:
    path.write_bytes(b"\x5a\xa5 not a database " * 4096)


def truncated(kind: str, path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def foreign_schema(kind: str, path: Path) -> None:
    path.unlink()
    with raw(kind, path) as db:
        db.execute("CREATE TABLE routes (prefix TEXT, origin BIGINT)")
        db.execute("INSERT INTO routes VALUES ('192.0.2.0/24', 64496)")


def newer_schema(kind: str, path: Path) -> None:
    """Schema version 3 in schema_info (whose schema-2 CHECK is dropped with the table)."""
    with raw(kind, path) as db:
        db.execute("CREATE TABLE info_copy AS SELECT * FROM schema_info")
        db.execute("DROP TABLE schema_info")
        db.execute(
            "CREATE TABLE schema_info (singleton INTEGER NOT NULL, schema_version INTEGER NOT "
            "NULL, store_id TEXT NOT NULL, created_at BIGINT NOT NULL)"
        )
        db.execute(
            "INSERT INTO schema_info SELECT singleton, 3, store_id, created_at FROM info_copy"
        )
        db.execute("DROP TABLE info_copy")


def earlier_layout(kind: str, path: Path) -> None:
    """A file of our earlier layout (a ``header`` table), as the backends of b7942bc wrote it."""
    data = Path(__file__).parents[1] / "persistence" / "data" / f"before-times.{kind}.gz"
    path.write_bytes(gzip.decompress(data.read_bytes()))


def other_columns(kind: str, path: Path) -> None:
    """Schema version 2 by its tables and version, but vrps lacks a column."""
    with raw(kind, path) as db:
        db.execute("DROP TABLE vrps")
        db.execute(
            "CREATE TABLE vrps (source_id INTEGER NOT NULL, family SMALLINT NOT NULL, "
            "seq BIGINT NOT NULL, network BLOB NOT NULL, prefix_length SMALLINT NOT NULL, "
            "max_length SMALLINT NOT NULL, asn BIGINT NOT NULL)"
        )


def foreign_object(kind: str, path: Path) -> None:
    """A trigger (SQLite) or a view (DuckDB) that our writes would run into."""
    with raw(kind, path) as db:
        if kind == "sqlite":
            db.execute("CREATE TRIGGER audit AFTER DELETE ON vrps BEGIN SELECT 1; END")
        else:
            db.execute("CREATE VIEW v AS SELECT * FROM vrps")


def damaged_header(kind: str, path: Path) -> None:
    with raw(kind, path) as db:
        db.execute("UPDATE publication SET serial = serial + 1")


DAMAGE: dict[str, Callable[[str, Path], None]] = {
    "garbage": garbage,
    "truncated": truncated,
    "foreign-schema": foreign_schema,
    "newer-schema": newer_schema,
    "other-columns": other_columns,
    "foreign-object": foreign_object,
    "damaged-header": damaged_header,
    "earlier-layout": earlier_layout,
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("kind", ["sqlite", "duckdb"])
@pytest.mark.parametrize("damage", list(DAMAGE))
async def test_a_file_that_cannot_be_written_safely_fails_the_start(
    tmp_path: Path, kind: str, damage: str
) -> None:
    source = tmp_path / "export.json"
    write_export(source, base_export())
    path = tmp_path / f"state.{kind}"
    await sound_file(kind, path)
    DAMAGE[damage](kind, path)
    before = sha256(path)
    app = App(state_config((source,), StateLocation(kind, path)), SystemClock())
    with anyio.fail_after(30), pytest.raises(PersistenceError) as caught:
        await app.run()
    assert not caught.value.retryable, caught.value
    assert app.server.addresses == []  # it never listened
    assert app.published == 0
    assert sha256(path) == before


@pytest.mark.parametrize("kind", ["sqlite", "duckdb"])
async def test_a_digest_mismatch_in_a_sound_file_resyncs_and_the_first_commit_replaces_it(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    source = tmp_path / "export.json"
    write_export(source, base_export())
    path = tmp_path / f"state.{kind}"
    await sound_file(kind, path)
    with raw(kind, path) as db:
        db.execute("UPDATE vrps SET asn = asn + 1 WHERE support_id = 7")
    config = state_config((source,), StateLocation(kind, path))
    async with running(config) as app:
        assert app.recovery is None  # nothing of the damaged state was served
        assert "holds a damaged state (state digest mismatch" in caplog.text, caplog.text
        assert app.persister is not None
        await wait_until(lambda: app.state is not None, what="a publish from the network")
        assert await full_table(app) == expected_state(base_export(), 2)
        with anyio.fail_after(30):
            await app.persister.flush()
    # The file is written again: a restart serves what the network delivered, before polling.
    write_export(source, base_export())
    async with running(config) as again:
        assert again.recovery is not None
        assert again.state is not None
        assert await full_table(again) == expected_state(base_export(), 2)


@pytest.mark.parametrize("kind", ["sqlite", "duckdb"])
@pytest.mark.parametrize(
    "damage", ["garbage", "truncated", "newer-schema", "damaged-header", "earlier-layout"]
)
def test_rtr_serve_with_a_damaged_state_exits_before_any_network(
    tmp_path: Path, kind: str, damage: str
) -> None:
    path = tmp_path / f"state.{kind}"
    anyio.run(sound_file, kind, path)
    DAMAGE[damage](kind, path)
    before = sha256(path)
    with socket.create_server(("127.0.0.1", 0)) as upstream:
        upstream.setblocking(False)
        port = upstream.getsockname()[1]
        done = subprocess.run(
            [
                RTR_SERVE,
                "--source",
                f"http://127.0.0.1:{port}/export.json",
                "--state",
                f"{kind}:{path}",
                "--listen",
                f"127.0.0.1:{free_port()}",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        with pytest.raises(BlockingIOError):
            upstream.accept()  # nobody connected to the source
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1, done.stderr
    assert f"cannot use state {kind}:{path}: " in errors[0], errors
    if damage == "earlier-layout":
        assert "earlier rtr-serve layout" in errors[0], errors
        assert "new empty file" in errors[0], errors
    assert sha256(path) == before
