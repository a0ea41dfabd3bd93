"""Schema-v2 reads and writes shared by the SQL backends; synchronous, run on the worker thread.

A subclass supplies the connection, the transaction statements, batched inserts and the error
classification. Everything here works on a DB-API-like connection whose ``execute`` returns
something with ``fetchone``/``fetchall``.
"""

from __future__ import annotations

import logging
import os
import struct
from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from persistence.errors import (
    BackendClosedError,
    CallInterruptedError,
    CommitConflictError,
    DamagedStateError,
    ForkedProcessError,
    PersistenceError,
    TransientError,
)
from persistence.exchange import state_digest
from persistence.interrupt import Interrupt
from persistence.limits import CHECKS, LimitExceededError, Limits, TextOctets
from persistence.lock import OwnerLock
from persistence.meta_digest import sealed
from persistence.meta_rows import (
    checked_observed_at,
    group_rows,
    publication_row,
    read_groups,
    read_header,
    record_counts,
    source_fields,
    source_row,
    source_rows,
    store_meta_row,
)
from persistence.payload_read import read_payloads
from persistence.rows import (
    BATCH,
    Row,
    as_int,
    aspa_rows,
    batches,
    provider_rows,
    router_key_rows,
    vrp_rows,
)
from persistence.schema import (
    ACTIVE_GROUP_COLUMNS,
    ASPA_COLUMNS,
    GROUP_COLUMNS,
    HEADERLESS_EMPTY,
    PROVIDER_COLUMNS,
    PUBLICATION_COLUMNS,
    RANGE_CHECKS,
    ROUTER_KEY_COLUMNS,
    SOURCE_COLUMNS,
    STATE_TABLES,
    STORE_META_COLUMNS,
    VRP_COLUMNS,
)
from persistence.state import (
    SCHEMA_VERSION,
    GroupRecord,
    PersistedState,
    PersistReceipt,
    SourceRecord,
    StateHeader,
    StateId,
)
from persistence.structure import StructureChecks
from persistence.supports import check_state_supports
from snapshot.model import PayloadError

log = logging.getLogger(__name__)
R = TypeVar("R")


class SqlStore(StructureChecks):
    """The schema-v2 logic on one connection; not thread-safe (one worker thread calls it)."""

    backend_name = "sql"
    #: The SQL function giving a BLOB's length in octets.
    blob_length = "length"
    #: The SQL expression giving a text column's length in UTF-8 octets (``{}``: the column).
    text_octets = "length(CAST({} AS BLOB))"
    #: How VRP rows are read in (source, support_id) order; SQLite reads its rowid (insertion)
    #: order.
    vrp_order = "ORDER BY source_id, support_id"

    def __init__(self, path: Path, lock: OwnerLock | None, limits: Limits | None = None) -> None:
        """No connection until `open_sync`; ``lock`` is None for a read-only follower."""
        self.path = path
        self.limits = Limits() if limits is None else limits
        self.store_id: str | None = None
        self._db: Any = None
        self._lock = lock
        self._interrupt = Interrupt()
        #: The name of the call running now (set on the worker thread, read by the closer).
        self.running: str | None = None
        #: The name of the call the interrupt ended (its transaction rolled back), if any.
        self.interrupted: str | None = None
        #: The process that opened the store (None before): a forked child may not use it.
        self.pid: int | None = None

    def check_process(self) -> None:
        """`ForkedProcessError` in a process forked from the one that opened the store."""
        if self.pid is not None and self.pid != os.getpid():
            raise ForkedProcessError(
                f"{self.path}: the connection belongs to process {self.pid}, not to this forked "
                f"process {os.getpid()}"
            )

    def _take_ownership(self) -> None:
        """Create the directory, then take the owner lock (before any connection).

        It covers the database file itself if it exists; else see `_lock_created_file`.
        """
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TransientError(f"cannot create {self.path.parent}: {exc}") from exc
        if self._lock is not None:
            self._lock.acquire()

    def _lock_created_file(self) -> None:
        """Lock the database file itself once the new connection created it (owners only)."""
        if self._lock is not None:
            self._lock.lock_database()

    def close_sync(self) -> None:
        """Close the connection (the database checkpoints its WAL), then release the lock.

        An open transaction (an interrupted call's) is rolled back by the close itself. When
        the connection's close raises, the connection and the owner lock are kept: the error
        propagates and a later call retries the close. In a forked child it raises
        `ForkedProcessError` and touches neither: both are the parent's.
        """
        self.check_process()
        with self._interrupt.guarded():
            if self._db is not None:
                self._close_connection(self._db)
            self._db = None
        if self._lock is not None:
            self._lock.release()

    def _close_connection(self, db: Any) -> None:
        """Close the driver connection (the one point where a close can fail)."""
        db.close()

    def interrupt(self) -> None:
        """From any thread: end the running call and every later one (the close deadline).

        The statement in progress ends with the driver's interrupt, its transaction rolls back,
        and the call raises `CallInterruptedError`; the close still runs after it.
        """
        self._interrupt.request(lambda: self._db)

    # ------------------------------------------------------------------ dialect hooks
    @abstractmethod
    def translate(self, exc: Exception) -> PersistenceError | None:
        """The persistence error class of a database driver's error (None: not the driver's)."""

    def call(self, fn: Callable[..., R], *args: Any) -> R:
        """Run one store method; driver errors as `translate` says, OSError/MemoryError transient.

        Anything else (an `AssertionError`, a bug, a `BaseException` such as cancellation)
        propagates unchanged, after the method's own cleanup.
        """
        self.check_process()
        self.running = getattr(fn, "__name__", "a call")
        try:
            return fn(*args)
        except (PersistenceError, AssertionError) as exc:
            self._note_interrupted(fn, exc)
            raise
        except Exception as exc:
            translated = self.translate(exc)
            if translated is None and isinstance(exc, OSError | MemoryError):
                translated = TransientError(f"{type(exc).__name__}: {exc}")
            if translated is None:
                raise
            if self._interrupt.requested and isinstance(translated, TransientError):
                translated = CallInterruptedError(
                    f"interrupted at the close deadline: {translated}"
                )
            self._note_interrupted(fn, translated)
            raise translated from exc
        finally:
            self.running = None

    def _note_interrupted(self, fn: Callable[..., object], exc: BaseException) -> None:
        if isinstance(exc, CallInterruptedError):
            self.interrupted = getattr(fn, "__name__", "a call")

    @abstractmethod
    def open_sync(self, now: int) -> None:
        """Take ownership (or open read-only) and check or create the schema."""

    def _conn(self) -> Any:
        """The open connection for the next statement (`BackendClosedError` if none).

        Raises `CallInterruptedError` once the store was interrupted.
        """
        self._interrupt.check()
        if self._db is None:
            raise closed()
        return self._db

    @abstractmethod
    def _insert(self, table: str, columns: Sequence[str], rows: list[Row]) -> None:
        """Insert one batch (at most `BATCH` rows)."""

    # ------------------------------------------------------------------ reads
    def read_header_sync(self) -> StateHeader | None:
        """The verified header, or None for a store never committed to."""
        self._begin(write=False)
        try:
            return self._read_header()
        finally:
            self._rollback()

    def _read_header(self) -> StateHeader | None:
        """The verified header; without one, every other table must be empty (P-28)."""
        header = read_header(self._conn(), self.store_id)
        if header is None:
            for table in HEADERLESS_EMPTY:
                sql = f"SELECT 1 FROM {table} LIMIT 1"  # noqa: S608 - fixed names
                if self._conn().execute(sql).fetchone() is not None:
                    raise DamagedStateError(
                        f"no header, but the {table} table holds rows: no commit leaves that"
                    )
        return header

    def read_state_sync(self) -> tuple[StateHeader, PersistedState] | None:
        """The whole verified state in one read transaction, or None if nothing was committed."""
        self._begin(write=False)
        try:
            self._check_limits()
            header = self._read_header()
            if header is None:
                return None
            for table, query in RANGE_CHECKS:
                (bad,) = self._conn().execute(query.format(blob_length=self.blob_length)).fetchone()
                if bad:
                    raise DamagedStateError(f"{table}: {bad} rows break a type or range rule")
            try:
                sources, groups, active = self._read_sources()
                observed_at = checked_observed_at(header, sources)
            except KeyError as exc:
                raise DamagedStateError(f"payload rows of unknown source id {exc}") from exc
            except (TypeError, ValueError, OverflowError, struct.error, PayloadError) as exc:
                raise DamagedStateError(f"payload: {exc}") from exc
        finally:
            self._rollback()
        try:
            state = PersistedState(
                store_id=header.store_id,
                state_id=header.state_id,
                config_revision=header.config_revision,
                serial=header.serial,
                session_ids=header.session_ids,
                published_at=header.published_at,
                package_version=header.package_version,
                sources=sources,
                observed_at=observed_at,
                recovered_from=header.recovered_from,
                groups=groups,
                active_groups=active,
                policy_id=header.policy_id,
                policy_json=header.policy_json,
                mode=header.mode,
                reference_time=header.reference_time,
                upstream=header.upstream,
                config_store_id=header.config_store_id,
                config_epoch=header.config_epoch,
                config_identity=header.config_identity,
            )
            check_state_supports(state)
        except ValueError as exc:  # e.g. two sources of one name, groups that disagree
            raise DamagedStateError(f"sources: {exc}") from exc
        if state_digest(state, limits=self.limits) != header.state_digest:
            raise DamagedStateError("state digest mismatch: the rows are not what was committed")
        return header, state

    def _check_limits(self) -> None:
        """Count sources, supports, large-field and metadata octets in SQL; refuse excess.

        Run before the header row or any record is built; over a `limits` bound is refused.
        """
        octets = TextOctets(self.text_octets)
        for what, name, query in CHECKS:
            sql = query.format(blob_length=self.blob_length, text_octets=octets)
            (found,) = self._conn().execute(sql).fetchone()
            bound: int = getattr(self.limits, name)
            if int(found) > bound:
                raise LimitExceededError(
                    f"the stored state has {int(found)} {what}, more than {name}={bound}"
                )

    def _fetch(self, sql: str) -> Iterator[Row]:
        cursor = self._conn().execute(sql)
        while rows := cursor.fetchmany(BATCH):
            self._interrupt.check()
            yield from rows

    def _read_sources(
        self,
    ) -> tuple[tuple[SourceRecord, ...], tuple[GroupRecord, ...], tuple[tuple[str, str], ...]]:
        """The source records with their payloads, the groups and the active groups."""
        meta = source_rows(self._conn())
        counts = {as_int(row["source_id"]): record_counts(row) for row in meta}
        if len(counts) != len(meta):
            raise DamagedStateError("duplicate source ids")
        payloads = read_payloads(self._fetch, counts, self.vrp_order)
        groups, active = read_groups(self._conn(), meta)
        records = tuple(
            SourceRecord(**source_fields(row), **payloads[as_int(row["source_id"])].fields())
            for row in meta
        )
        return records, groups, active

    # ------------------------------------------------------------------ commit
    def commit_sync(
        self, state: PersistedState, expected: StateId | None, written_at: int
    ) -> PersistReceipt:
        """Replace the stored state by ``state`` if the stored one is ``expected`` (CAS)."""
        if state.store_id != self.store_id:
            raise CommitConflictError(
                f"state of store {state.store_id} cannot go into store {self.store_id}"
            )
        check_state_supports(state)
        digest = state_digest(state, limits=self.limits)
        self._begin(write=True)
        try:
            header = self._read_header()
            if _check_cas(header, state.state_id, expected, digest):
                assert header is not None
                self._rollback()
                return header.receipt(retried=True)
            self._write(state, digest, written_at)
            self._commit()
        except BaseException:
            self._rollback()
            raise
        return PersistReceipt(
            snapshot_id=state.state_id,
            config_revision=state.config_revision,
            committed_at=written_at,
            schema_version=SCHEMA_VERSION,
            state_digest=digest,
        )

    def _write(self, state: PersistedState, digest: bytes, written_at: int) -> None:
        conn = self._conn()
        for table in STATE_TABLES:
            conn.execute(f"DELETE FROM {table}")  # noqa: S608 - fixed names
        groups, active = group_rows(state)
        if groups:
            self._insert("groups", GROUP_COLUMNS, groups)
        if active:
            self._insert("active_groups", ACTIVE_GROUP_COLUMNS, active)
        for sid, source in enumerate(state.sources):
            self._insert("sources", SOURCE_COLUMNS, [source_row(sid, source)])
            for table, columns, rows in (
                ("vrps", VRP_COLUMNS, vrp_rows(sid, source)),
                ("router_keys", ROUTER_KEY_COLUMNS, router_key_rows(sid, source)),
                ("aspas", ASPA_COLUMNS, aspa_rows(sid, source)),
                ("aspa_providers", PROVIDER_COLUMNS, provider_rows(sid, source)),
            ):
                for batch in batches(rows):
                    self._insert(table, columns, batch)
        header = sealed(state, digest, written_at)
        self._insert("publication", PUBLICATION_COLUMNS, [publication_row(header)])
        self._insert("store_meta", STORE_META_COLUMNS, [store_meta_row(header)])


def _check_cas(
    header: StateHeader | None, state_id: StateId, expected: StateId | None, digest: bytes
) -> bool:
    """True for an idempotent retry; raises `CommitConflictError` when the CAS fails."""
    current = None if header is None else header.state_id
    if header is not None and current == state_id:
        if header.state_digest == digest:
            return True
        raise CommitConflictError(f"state {current} is stored with other content")
    if current != expected:
        raise CommitConflictError(f"stored state is {current}, expected {expected}")
    return False


def closed() -> BackendClosedError:
    """The error for a call on a backend that is not open."""
    return BackendClosedError("the backend is not open")
