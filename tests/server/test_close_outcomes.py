"""How an orderly stop with ``--state`` ends when its final (revocation) build fails or is slow,
or when the store's own close fails; in-process apps on a real SQLite file, with a scripted
source (`ScriptedSource`) so that a withdrawal can be decided right before the stop.

* P-48: an exception in the final build goes to the host (out of `App.run`); the persister is
  stopped at once (a waiting `flush` gets a stop error, the pre-revocation state that waits is
  never committed) and the close result is ``persistence_failed``, phase ``close``, cause
  ``revocation_failed`` (log line, `App.shutdown`, the /status persistence section).
* L-20: a final build that outlasts ``flush_timeout`` is reported NOT persisted and the older
  acknowledged state stays on disk.
* L-15: a failing close of the store is logged once and shows in the status; it replaces neither
  the outcome of a stop nor a primary exception or a cancellation.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import TaskStatus

from persistence import sqlite_backend
from persistence.backend import ThreadedBackend
from persistence.location import StateLocation
from persistence.sqlite_backend import SQLiteBackend, SQLiteStore
from persistence.state import StateId
from rtr_server.app import App
from rtr_server.app_config import AppConfig
from rtr_server.http import observe
from tests.server.helpers import settings
from tests.upstream.helpers import wait_for
from tests.upstream.scripted_source import ScriptedSource, payload
from upstream import client_setup as client_module
from upstream.client import ClientState
from upstream.clock import SystemClock

pytestmark = pytest.mark.anyio

A = [("192.0.2.0/24", 24, 64496), ("198.51.100.0/24", 24, 64497)]
B = [("192.0.2.0/24", 24, 64496), ("203.0.113.0/24", 24, 64498)]
TIMEOUT = 15.0
BOOM = "boom: an internal error in the revocation build"


@dataclass
class Run:
    """One app on a scripted source, run in the background until it ends by itself."""

    app: App
    source: ScriptedSource
    db: Path
    error: BaseException | None = None
    ended: anyio.Event = field(default_factory=anyio.Event)

    async def until_ended(self, within: float = TIMEOUT) -> None:
        with anyio.fail_after(within):
            await self.ended.wait()

    async def committed(self, commits: int) -> StateId:
        """Wait until the persister has made ``commits`` commits; the id it holds then."""
        persister = self.app.persister
        assert persister is not None
        await wait_for(lambda: persister.status.commits >= commits, TIMEOUT)
        assert persister.persisted is not None
        return persister.persisted


@asynccontextmanager
async def scripted_app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **overrides: Any
) -> AsyncIterator[Run]:
    """An app whose one source is scripted, persisting to ``tmp_path/state.db``."""
    source = ScriptedSource("scripted", online=True)
    monkeypatch.setattr(client_module, "make_source", lambda *_: source)
    db = tmp_path / "state.db"
    values: dict[str, Any] = {
        "sources": ("scripted",),
        "server": settings(),
        "state": StateLocation("sqlite", db),
        "flush_timeout": 10.0,
    }
    values.update(overrides)
    app = App(AppConfig(**values), SystemClock())
    run = Run(app, source, db)

    async def serve(*, task_status: TaskStatus[App]) -> None:
        try:
            await app.run(task_status=task_status)
        except Exception as exc:  # noqa: BLE001 - what the host gets is checked by the test
            run.error = exc
        finally:
            run.ended.set()

    async with anyio.create_task_group() as tg:
        with anyio.fail_after(TIMEOUT):
            await tg.start(serve)
            await wait_for(lambda: source.running, TIMEOUT)
        try:
            yield run
        finally:
            tg.cancel_scope.cancel()


@contextmanager
def held_builds(
    monkeypatch: pytest.MonkeyPatch, *, fail: bool
) -> Iterator[tuple[threading.Event, threading.Event]]:
    """From now on every build waits in its worker thread; yields (building, release):
    ``building`` is set once one waits, which goes on when ``release`` is set (at most
    `TIMEOUT` s) and then raises an internal error when ``fail``."""
    from upstream import aggregate, merge

    original = merge.build_snapshot
    release = threading.Event()

    def held(*args: Any) -> Any:
        building.set()
        release.wait(TIMEOUT)
        if fail:
            raise RuntimeError(BOOM)
        return original(*args)

    building = threading.Event()
    monkeypatch.setattr(aggregate, "build_snapshot", held)
    try:
        yield building, release
    finally:
        release.set()


class WriteLock:
    """Another connection holds SQLite's write lock: every commit fails busy until `release`."""

    def __init__(self, db: Path) -> None:
        self._conn: sqlite3.Connection | None = sqlite3.connect(db, isolation_level=None)
        self._conn.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        if self._conn is not None:
            self._conn.rollback()
            self._conn.close()
            self._conn = None

    def __enter__(self) -> WriteLock:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


async def stored_id(db: Path) -> StateId | None:
    """The id of the state the file holds (read by a new owner after the app ended)."""
    backend = ThreadedBackend(SQLiteBackend(db))
    await backend.open()
    try:
        header = await backend.read_header()
    finally:
        await backend.close()
    return None if header is None else header.state_id


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside ``exc`` (its groups flattened)."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def shutdown_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == "shutdown"]


async def pending_b(run: Run) -> StateId:
    """(A committed) B published and offered while the file is write-locked, so that it waits
    for its commit; returns the id of A. The caller holds the lock."""
    persister = run.app.persister
    assert persister is not None
    run.source.deliver(payload(B))
    await wait_for(lambda: run.app.published == 2 and persister.status.failures >= 1, TIMEOUT)
    assert persister.status.pending
    assert persister.persisted is not None
    return persister.persisted


@pytest.fixture(autouse=True)
def quick_busy_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit against a write-locked file fails after 0.2 s instead of 5 s."""
    monkeypatch.setattr(sqlite_backend, "BUSY_TIMEOUT_MS", 200)


# ------------------------------------------------------------------ P-48


async def test_an_exception_in_the_final_build_is_the_close_result_and_goes_to_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with scripted_app(tmp_path, monkeypatch) as run:
        run.source.deliver(payload(A))
        stored_a = await run.committed(1)
        persister = run.app.persister
        assert persister is not None
        with WriteLock(run.db):
            await pending_b(run)
            flushed: list[BaseException | object] = []
            woken = anyio.Event()

            async def flush() -> None:
                try:
                    flushed.append(await persister.flush())  # waits for B
                except Exception as exc:  # noqa: BLE001 - checked below
                    flushed.append(exc)
                woken.set()

            async with anyio.create_task_group() as waiters:
                waiters.start_soon(flush)
                with held_builds(monkeypatch, fail=True) as (building, release):
                    run.source.withdraw()  # decided: its build is the revocation build
                    await wait_for(building.is_set, TIMEOUT)
                    run.app.stop()
                    client = run.app.client
                    assert client is not None
                    await wait_for(lambda: client.state is ClientState.CLOSING, TIMEOUT)
                    await anyio.sleep(0.3)
                    assert not flushed, "B was never committed: the flush must still wait"
                    release.set()  # the revocation build raises
                    with anyio.fail_after(2.0):  # at once, not after flush_timeout (10 s)
                        await woken.wait()
                await run.until_ended()
    # The exception went to the host, unchanged.
    assert run.error is not None
    assert [str(e) for e in leaves(run.error)] == [BOOM]
    assert type(flushed[0]).__name__ == "PersisterStoppedError", flushed
    # The close result.
    report = run.app.shutdown
    assert report is not None
    assert report.persisted is False
    assert report.code == "persistence_failed"
    assert report.details == {"phase": "close", "cause": "revocation_failed"}
    assert "NOT persisted" in report.message
    assert BOOM in report.message
    assert report.message.endswith(f"the store still holds {stored_a} (serial 0)"), report
    (line,) = shutdown_records(caplog)
    assert line.levelno == logging.ERROR
    assert line.getMessage() == report.message
    assert getattr(line, "code") == "persistence_failed"  # noqa: B009
    assert getattr(line, "details") == {"phase": "close", "cause": "revocation_failed"}  # noqa: B009
    view = observe.persistence(run.app)
    assert view is not None
    assert view.stopped
    assert view.error_code == "persistence_failed"
    assert view.error_details == {"phase": "close", "cause": "revocation_failed"}
    # New candidates are refused; the pre-revocation state B never became the head.
    assert not persister.status.pending
    assert await stored_id(run.db) == stored_a


# ------------------------------------------------------------------ L-20


async def test_a_final_build_past_the_flush_timeout_is_not_persisted_and_the_older_state_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """B waits for its commit when the stop begins; the decided withdrawal's build outlasts
    the flush timeout. Neither B (the pre-revocation state) nor anything else is committed
    while closing: the file keeps A, the last acknowledged state, and the stop says so."""
    caplog.set_level(logging.INFO)
    async with scripted_app(tmp_path, monkeypatch, flush_timeout=1.0) as run:
        run.source.deliver(payload(A))
        stored_a = await run.committed(1)
        with WriteLock(run.db) as lock:
            await pending_b(run)
            with held_builds(monkeypatch, fail=False) as (building, release):
                run.source.withdraw()
                await wait_for(building.is_set, TIMEOUT)
                started = anyio.current_time()
                run.app.stop()
                client = run.app.client
                assert client is not None
                await wait_for(lambda: client.state is ClientState.CLOSING, TIMEOUT)
                await anyio.sleep(0.5)  # a commit attempt begun before the stop fails (busy)
                lock.release()  # B could be committed now, but the close holds commits
                await anyio.sleep(2.0)  # past the flush timeout, the build still runs
                release.set()
                await run.until_ended()
    took = anyio.current_time() - started
    assert run.error is None
    assert took >= 2.5  # no thread is abandoned: the stop ends when the build returned
    report = run.app.shutdown
    assert report is not None
    assert report.persisted is False
    assert report.message == (
        "shutdown: the final state NOT persisted (the sources did not all stop, or a withdrawal "
        "decided at the stop was not built, within the flush timeout); the store still holds "
        f"{stored_a} (serial 0)"
    )
    (line,) = shutdown_records(caplog)
    assert line.levelno == logging.ERROR
    assert await stored_id(run.db) == stored_a


# ------------------------------------------------------------------ L-15


@pytest.fixture
def failing_close(monkeypatch: pytest.MonkeyPatch) -> str:
    """Every SQLite store's close really closes, then raises as a failing disk would."""
    original = SQLiteStore.close_sync
    message = "disk I/O error (scripted close failure)"

    def close_sync(self: SQLiteStore) -> None:
        original(self)
        raise sqlite3.OperationalError(message)

    monkeypatch.setattr(SQLiteStore, "close_sync", close_sync)
    return message


def close_errors(caplog: pytest.LogCaptureFixture, message: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if message in r.getMessage() and r.levelno >= logging.ERROR]


async def test_a_failing_store_close_is_logged_once_and_in_status(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    failing_close: str,
) -> None:
    caplog.set_level(logging.INFO)
    async with scripted_app(tmp_path, monkeypatch) as run:
        run.source.deliver(payload(A))
        await run.committed(1)
        run.app.stop()
        await run.until_ended()
    assert run.error is None
    (line,) = close_errors(caplog, failing_close)
    assert getattr(line, "event") == "persistence_close_failed"  # noqa: B009
    view = observe.persistence(run.app)
    assert view is not None
    assert view.close_error is not None
    assert failing_close in view.close_error
    report = run.app.shutdown
    assert report is not None
    # The commit had its receipt before the close: it is persisted, and said so; the failed
    # close is recorded beside it (and the next owner reads the state).
    assert report.persisted is True
    assert report.close_error == view.close_error
    monkeypatch.undo()
    assert await stored_id(run.db) is not None


async def test_a_failing_close_replaces_neither_the_primary_error_nor_its_report(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    failing_close: str,
) -> None:
    """The final build raises (the primary error) and then the store's close fails too."""
    caplog.set_level(logging.INFO)
    async with scripted_app(tmp_path, monkeypatch) as run:
        run.source.deliver(payload(A))
        await run.committed(1)
        with held_builds(monkeypatch, fail=True) as (building, release):
            run.source.withdraw()
            await wait_for(building.is_set, TIMEOUT)
            run.app.stop()
            release.set()
            await run.until_ended()
    assert run.error is not None
    assert [str(e) for e in leaves(run.error)] == [BOOM]  # not the close error
    report = run.app.shutdown
    assert report is not None
    assert report.details == {"phase": "close", "cause": "revocation_failed"}
    assert report.close_error is not None
    assert failing_close in report.close_error
    assert len(close_errors(caplog, failing_close)) == 1
    view = observe.persistence(run.app)
    assert view is not None
    assert view.error_details == {"phase": "close", "cause": "revocation_failed"}
    assert view.close_error == report.close_error


async def test_a_failing_close_does_not_replace_a_cancellation(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    failing_close: str,
) -> None:
    """`run` cancelled (no orderly stop): it ends as cancelled, the close error is logged."""
    caplog.set_level(logging.INFO)
    source = ScriptedSource("scripted", online=True)
    monkeypatch.setattr(client_module, "make_source", lambda *_: source)
    config = AppConfig(
        sources=("scripted",), server=settings(), state=StateLocation("sqlite", tmp_path / "db")
    )
    app = App(config, SystemClock())
    with anyio.fail_after(TIMEOUT):
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                await tg.start(app.run)
                await wait_for(lambda: source.running, TIMEOUT)
                source.deliver(payload(A))
                assert app.persister is not None
                await wait_for(
                    lambda: app.persister is not None and app.persister.status.commits == 1
                )
                scope.cancel()
    assert scope.cancelled_caught  # the cancellation, not the close error, ended it
    assert len(close_errors(caplog, failing_close)) == 1
    assert app.persistence_close_error is not None
