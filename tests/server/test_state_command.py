"""``rtr-serve state export|import`` end to end on real SQLite and DuckDB files.

A state an rtr-serve run committed is exported (also while its SQLite owner runs), imported
into a new file, and a second rtr-serve serves it recovered; the refusals exit 1 or 2 with
one line and leave the files alone.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from persistence.exchange import encode, encode_version_1, state_digest
from persistence.exchange_import import decode
from persistence.location import StateLocation
from rtr_server import cli
from tests.server.helpers import base_export, expected_state, write_export
from tests.server.test_state import full_table, persist_and_stop, running, state_config

pytestmark = pytest.mark.anyio

BACKENDS = ["sqlite", "duckdb"]
PYTHON_M = [sys.executable, "-m", "rtr_server.cli"]


async def rtr_serve(*args: str) -> int:
    """``rtr-serve args`` in this process (on a worker thread: it runs its own event loop)."""
    return await anyio.to_thread.run_sync(cli.main, list(args))


async def read(location: StateLocation) -> bytes:
    """The exchange document of the state stored at ``location`` (read by the backend)."""
    backend = location.make_backend(read_only=location.backend == "sqlite")
    await backend.open()
    try:
        stored = await backend.read_state()
    finally:
        await backend.close()
    assert stored is not None
    return b"".join(encode(stored[1]))


def without_store_id(doc: bytes) -> bytes:
    """The document with its store id blanked (an import gives the new file's own)."""
    state = decode(doc)
    return doc.replace(f'"store_id":"{state.store_id}"'.encode(), b'"store_id":""', 1)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_export_then_import_then_a_restart_serves_the_state(
    tmp_path: Path, backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "export.json"
    write_export(source, base_export())
    old = StateLocation(backend, tmp_path / f"old.{backend}")
    await persist_and_stop(state_config((source,), old))
    stored = await read(old)
    document = tmp_path / "state.json"
    args = ["--state-backend", backend]
    assert (
        await rtr_serve("state", "export", "--state", str(old.path), *args, "-o", str(document))
        == 0
    )
    assert document.read_bytes() == stored  # the canonical document of the stored state
    assert state_digest(decode(stored)) == hashlib.sha256(stored).digest()
    new = StateLocation(backend, tmp_path / f"new.{backend}")
    assert await rtr_serve("state", "import", str(document), "--state", str(new.path), *args) == 0
    imported = await read(new)
    assert without_store_id(imported) == without_store_id(stored)  # every time kept as written
    err = capsys.readouterr().err
    assert "exported state" in err
    assert "imported state" in err
    source.unlink()  # only the imported state can serve now
    async with running(state_config((source,), new)) as app:
        assert app.recovery is not None
        assert app.recovery.trusted
        assert list(app.recovery.recovered) == [str(source)]
        assert await full_table(app) == expected_state(base_export(), 2)


async def test_export_reads_sqlite_while_its_owner_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "export.json"
    write_export(source, base_export())
    owner = StateLocation("sqlite", tmp_path / "state.sqlite")
    config = state_config((source,), owner)
    await persist_and_stop(config)
    async with running(config) as app:
        assert app.persister is not None
        with anyio.fail_after(10):
            await app.persister.flush()
        before = owner.path.read_bytes()
        assert await rtr_serve("state", "export", "--state", str(owner.path)) == 0
        out = capsys.readouterr().out
        assert decode(out.encode()).sources  # the document went to standard output
        assert owner.path.read_bytes() == before  # read-only: the file is unchanged


async def test_export_of_duckdb_held_by_its_owner_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "export.json"
    write_export(source, base_export())
    owner = StateLocation("duckdb", tmp_path / "state.duckdb")
    config = state_config((source,), owner)
    await persist_and_stop(config)
    async with running(config):
        code = await rtr_serve(
            "state", "export", "--state", str(owner.path), "--state-backend", "duckdb"
        )
    assert code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("rtr-serve state export: ")
    assert len(err.splitlines()) == 1


async def test_import_refuses_an_existing_non_empty_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "export.json"
    write_export(source, base_export())
    old = StateLocation("sqlite", tmp_path / "old.sqlite")
    await persist_and_stop(state_config((source,), old))
    document = tmp_path / "state.json"
    document.write_bytes(await read(old))
    before = old.path.read_bytes()
    assert await rtr_serve("state", "import", str(document), "--state", str(old.path)) == 2
    assert old.path.read_bytes() == before
    assert "exists and is not empty" in capsys.readouterr().err
    empty = tmp_path / "empty.sqlite"
    empty.touch()  # an empty file is a new one
    assert await rtr_serve("state", "import", str(document), "--state", str(empty)) == 0


async def test_import_of_a_bad_document_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = tmp_path / "state.json"
    document.write_bytes(b'{"format":"rtr-serve-exchange","version":2}')
    target = tmp_path / "new.sqlite"
    assert await rtr_serve("state", "import", str(document), "--state", str(target)) == 1
    assert not target.exists()
    err = capsys.readouterr().err
    assert err == "rtr-serve state import: $.package_version: missing member\n"


async def test_a_version_1_document_needs_the_explicit_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "export.json"
    write_export(source, base_export())
    old = StateLocation("sqlite", tmp_path / "old.sqlite")
    await persist_and_stop(state_config((source,), old))
    state = decode(await read(old))
    document = tmp_path / "v1.json"
    document.write_bytes(b"".join(encode_version_1(state)))
    target = tmp_path / "new.sqlite"
    assert await rtr_serve("state", "import", str(document), "--state", str(target)) == 1
    assert "--version-1" in capsys.readouterr().err
    assert not target.exists()
    args = ("state", "import", str(document), "--state", str(target), "--version-1")
    assert await rtr_serve(*args) == 0
    imported = await read(StateLocation("sqlite", target))
    assert without_store_id(imported) == without_store_id(b"".join(encode(state)))


async def test_export_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.sqlite"
    assert await rtr_serve("state", "export", "--state", str(missing)) == 2
    assert not missing.exists()  # an export never creates a state file
    assert (
        capsys.readouterr().err == f"rtr-serve state export: error: {missing}: no such state file\n"
    )
    # A store that was never committed to: nothing to export.
    empty = StateLocation("sqlite", tmp_path / "empty.sqlite")
    backend = empty.make_backend()
    await backend.open()
    await backend.close()
    assert await rtr_serve("state", "export", "--state", str(empty.path)) == 1
    assert "holds no committed state yet" in capsys.readouterr().err
    damaged = tmp_path / "damaged.sqlite"
    damaged.write_bytes(b"not a database" * 100)
    assert await rtr_serve("state", "export", "--state", str(damaged)) == 1
    assert len(capsys.readouterr().err.splitlines()) == 1


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m rtr_server.cli args`` to its end, output captured."""
    return subprocess.run(
        [*PYTHON_M, *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_usage_errors_exit_2_with_one_line_and_help_is_clear() -> None:
    for args in (("state",), ("state", "export"), ("state", "import", "x"), ("state", "bogus")):
        result = run(*args)
        assert result.returncode == 2, args
        assert result.stderr.startswith("rtr-serve state: error: "), args
        assert len(result.stderr.splitlines()) == 1, args
    result = run("state", "--help")
    assert result.returncode == 0
    assert "rtr-serve state export --state FILE" in result.stdout
    assert "rtr-serve state import DOC --state NEWFILE" in result.stdout
    assert "state export|import" in run("--help").stdout


def test_export_as_a_process_writes_the_document_atomically(tmp_path: Path) -> None:
    async def commit() -> bytes:
        source = tmp_path / "export.json"
        write_export(source, base_export())
        location = StateLocation("sqlite", tmp_path / "state.sqlite")
        await persist_and_stop(state_config((source,), location))
        return await read(location)

    stored = anyio.run(commit)
    out = tmp_path / "out.json"
    out.write_text("old")
    result = run("state", "export", "--state", str(tmp_path / "state.sqlite"), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert out.read_bytes() == stored
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out")) == []
