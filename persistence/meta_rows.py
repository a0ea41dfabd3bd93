"""Header and source rows <-> state fields, the stored evaluation times of either layout included.

Schema 2 first stored neither `PersistedState.observed_at` nor a source's ``evaluated_at``; the
columns that hold them (`persistence.schema.TIME_COLUMNS`) came later and are nullable. Rules:

* A file written before them has neither column, or NULL in them (a file the owner has opened
  since). It is read as it was written: its header digest is the one of that time, and
  ``observed_at`` and every ``evaluated_at`` are taken as its ``written_at``, which that commit
  already made no earlier than every time the state showed. A recovery or reader gets the same
  clock floor as before; nothing is lost or read differently.
* The owner adds the missing columns when it opens such a file (``ALTER TABLE ... ADD COLUMN``
  in one transaction, no row rewritten, readers may go on reading): its next commit stores the
  times. A read-only reader never changes the file and reads both layouts.
* A header that stores the times covers ``observed_at`` and the evaluated digest (each source's
  name and ``evaluated_at``, in stored order) with its header digest; a full read checks the
  source rows against the evaluated digest and refuses a ``written_at`` below ``observed_at`` or
  below any ``evaluated_at`` (no commit writes that). Either one without the other, or source
  rows that disagree with their header's layout, is corrupt.

Neither time is part of the state digest.
"""

from __future__ import annotations

from typing import Any

from persistence.errors import CorruptStateError, DamagedStateError
from persistence.rows import as_blob, as_int, as_text
from persistence.schema import HEADER_COLUMNS, LATER_COLUMNS, SOURCE_COLUMNS
from persistence.state import (
    ASN_MAX,
    SCHEMA_VERSION,
    SESSION_MAX,
    PersistedState,
    SourceRecord,
    StateHeader,
    StateId,
    evaluated_digest,
    header_digest,
    kinds_to_mask,
    mask_to_kinds,
)

__all__ = [
    "add_columns",
    "checked_observed_at",
    "header_row",
    "missing_columns",
    "read_header",
    "source_fields",
    "source_row",
    "source_rows",
]

#: One row as column name -> value.
Named = dict[str, Any]


def _named(conn: Any, sql: str) -> list[Named]:
    cursor = conn.execute(sql)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


# ------------------------------------------------------------------ the layout of a file
def missing_columns(conn: Any) -> list[tuple[str, str, str]]:
    """The (table, column, type) of every later column the file does not have yet, in order."""
    missing = []
    for table, columns in LATER_COLUMNS.items():
        cursor = conn.execute(f"SELECT * FROM {table} LIMIT 0")  # noqa: S608 - fixed names
        present = {d[0] for d in cursor.description}
        missing += [(table, name, kind) for name, kind in columns if name not in present]
    return missing


def add_columns(conn: Any, missing: list[tuple[str, str, str]]) -> None:
    """Add ``missing`` (NULL in every existing row); the caller holds the write transaction."""
    for table, name, kind in missing:
        conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")


# ------------------------------------------------------------------ header
def read_header(conn: Any, store_id: str | None) -> StateHeader | None:
    """The verified header of either layout, or None when nothing was committed."""
    rows = _named(conn, "SELECT * FROM header")
    if not rows:
        return None
    if len(rows) != 1:
        raise CorruptStateError(f"the header table holds {len(rows)} rows, not 1")
    row = rows[0]
    try:
        observed, evaluated = row.get("observed_at"), row.get("evaluated_digest")
        header = StateHeader(
            schema_version=as_int(row["schema_version"]),
            store_id=as_text(row["store_id"]),
            state_id=StateId(as_int(row["epoch"]), as_int(row["generation"])),
            config_revision=as_int(row["config_revision"]),
            serial=as_int(row["serial"]),
            session_ids=(
                as_int(row["session_v0"]),
                as_int(row["session_v1"]),
                as_int(row["session_v2"]),
            ),
            published_at=as_int(row["published_at"]),
            written_at=as_int(row["written_at"]),
            state_digest=as_blob(row["state_digest"]),
            header_digest=as_blob(row["header_digest"]),
            package_version=as_text(row["package_version"]),
            observed_at=None if observed is None else as_int(observed),
            evaluated_digest=None if evaluated is None else as_blob(evaluated),
            recovered_from=_recovered_from(row),
        )
    except (TypeError, ValueError, KeyError) as exc:
        raise CorruptStateError(f"header: {exc}") from exc
    if (header.observed_at is None) != (header.evaluated_digest is None):
        raise CorruptStateError("header: observed_at and evaluated_digest are stored together")
    _check_header_ranges(header)
    if header.computed_digest() != header.header_digest:
        raise CorruptStateError("header digest mismatch")
    if header.schema_version != SCHEMA_VERSION or header.store_id != store_id:
        raise CorruptStateError("header schema version or store id disagrees with schema_info")
    return header


def _recovered_from(row: Named) -> StateId | None:
    """The header's ``recovered_from`` (None: not stored, or a file of before the columns)."""
    epoch, generation = row.get("recovered_from_epoch"), row.get("recovered_from_generation")
    if epoch is None and generation is None:
        return None
    if epoch is None or generation is None:
        raise ValueError("recovered_from_epoch and recovered_from_generation are stored together")
    return StateId(as_int(epoch), as_int(generation))


def _check_header_ranges(header: StateHeader) -> None:
    """`DamagedStateError` for a serial or session id no commit writes (whatever the DDL)."""
    if not 0 <= header.serial <= ASN_MAX:
        raise DamagedStateError(f"header: serial {header.serial} out of range 0..{ASN_MAX}")
    bad = [s for s in header.session_ids if not 0 <= s <= SESSION_MAX]
    if bad:
        raise DamagedStateError(f"header: session ids {bad} out of range 0..{SESSION_MAX}")


def header_row(state: PersistedState, digest: bytes, written_at: int) -> tuple[Any, ...]:
    """The header row of a commit of ``state``, in `HEADER_COLUMNS` order (times stored)."""
    evaluated = evaluated_digest(state.sources)
    recovered = state.recovered_from
    values: Named = {
        "schema_version": SCHEMA_VERSION,
        "store_id": state.store_id,
        "epoch": state.state_id.epoch,
        "generation": state.state_id.generation,
        "config_revision": state.config_revision,
        "serial": state.serial,
        "session_v0": state.session_ids[0],
        "session_v1": state.session_ids[1],
        "session_v2": state.session_ids[2],
        "published_at": state.published_at,
        "written_at": written_at,
        "state_digest": digest,
        "header_digest": header_digest(
            SCHEMA_VERSION,
            state.store_id,
            state.state_id,
            state.config_revision,
            state.serial,
            state.session_ids,
            state.published_at,
            written_at,
            digest,
            state.package_version,
            observed_at=state.observed_at,
            evaluated_digest=evaluated,
            recovered_from=state.recovered_from,
        ),
        "package_version": state.package_version,
        "observed_at": state.observed_at,
        "evaluated_digest": evaluated,
        "recovered_from_epoch": None if recovered is None else recovered.epoch,
        "recovered_from_generation": None if recovered is None else recovered.generation,
    }
    return tuple(values[c] for c in HEADER_COLUMNS)


def checked_observed_at(header: StateHeader, sources: tuple[SourceRecord, ...]) -> int:
    """The state's ``observed_at``, once the sources' stored times agree with ``header``."""
    if header.evaluated_digest is None or header.observed_at is None:
        return header.written_at  # written before the times were stored
    if evaluated_digest(sources) != header.evaluated_digest:
        raise DamagedStateError("evaluated digest mismatch: the sources' evaluation times changed")
    late = [s.name for s in sources if s.evaluated_at > header.written_at]
    if header.observed_at > header.written_at or late:
        raise DamagedStateError(
            "written_at is earlier than the observed time or the evaluation time of "
            f"{', '.join(late) or 'the state'}: no commit writes that"
        )
    return header.observed_at


# ------------------------------------------------------------------ sources
def source_rows(conn: Any) -> list[Named]:
    """Every row of ``sources``, in source id order."""
    return _named(conn, "SELECT * FROM sources ORDER BY source_id")


#: A stored identity is a digest (``sha256:`` and 64 hex digits); anything longer is damage.
MAX_IDENTITY = 128


def _identity(value: object) -> str | None:
    """A source row's stored identity (a file of before has none)."""
    if value is None:
        return None
    text = as_text(value)
    if len(text) > MAX_IDENTITY:
        raise DamagedStateError(f"a source identity of {len(text)} characters")
    return text


def source_fields(row: Named, header: StateHeader) -> Named:
    """`SourceRecord` keyword arguments of one source row (its payloads apart)."""
    stored = row.get("evaluated_at")
    if header.evaluated_digest is None:
        if stored is not None:
            raise DamagedStateError("a source's evaluated_at under a header without the times")
        evaluated = header.written_at
    elif stored is None:
        raise DamagedStateError("a source without evaluated_at under a header with the times")
    else:
        evaluated = as_int(stored)
    return {
        "name": as_text(row["name"]),
        "group": as_text(row["group_name"]),
        "kind": as_text(row["kind"]),
        "location": as_text(row["location"]),
        "complete": bool(as_int(row["complete"])),
        "capabilities": mask_to_kinds(as_int(row["capabilities"])),
        "selected": mask_to_kinds(as_int(row["selected"])),
        "accepted_at": as_int(row["accepted_at"]),
        "expires_at": as_int(row["expires_at"]),
        "rtr_session": None if row["rtr_session"] is None else as_int(row["rtr_session"]),
        "rtr_serial": None if row["rtr_serial"] is None else as_int(row["rtr_serial"]),
        "generated_at": None if row["generated_at"] is None else as_int(row["generated_at"]),
        "evaluated_at": evaluated,
        "identity": _identity(row.get("identity")),
    }


def source_row(sid: int, source: SourceRecord) -> tuple[Any, ...]:
    """The ``sources`` row of ``source`` under id ``sid``, in `SOURCE_COLUMNS` order."""
    values: Named = {
        "source_id": sid,
        "name": source.name,
        "group_name": source.group,
        "kind": source.kind,
        "location": source.location,
        "complete": int(source.complete),
        "capabilities": kinds_to_mask(source.capabilities),
        "selected": kinds_to_mask(source.selected),
        "accepted_at": source.accepted_at,
        "expires_at": source.expires_at,
        "rtr_session": source.rtr_session,
        "rtr_serial": source.rtr_serial,
        "generated_at": source.generated_at,
        "evaluated_at": source.evaluated_at,
        "identity": source.identity,
    }
    return tuple(values[c] for c in SOURCE_COLUMNS)
