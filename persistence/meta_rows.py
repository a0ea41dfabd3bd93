"""Header, group and source rows <-> state fields: ``store_meta``, ``publication`` and the rest.

The contract's ``store_meta`` holds exactly its fields; ours go into the one-row
``publication`` table (the RTR serial and session ids, ``observed_at``, the evaluated digest of
the sources' ``evaluated_at``, the state a recovery started from, the SLURM policy's JSON),
beside it rather than into ``versions_json``, which stays what its name says (the versions the
state follows) and so remains readable by any reader of the contract's layout. A read verifies
``meta_digest`` over ``store_meta`` and ``publication_digest`` over ``meta_digest`` and the
publication (`persistence.meta_digest`); a full read also checks the sources' evaluation times
against the evaluated digest and refuses a ``written_at`` below any time the state shows.
"""

from __future__ import annotations

import json
from typing import Any

from persistence.errors import CorruptStateError, DamagedStateError, UnsupportedSchemaError
from persistence.meta_digest import (
    meta_digest,
    meta_values,
    publication_digest,
    publication_values,
)
from persistence.rows import as_blob, as_int, as_text
from persistence.schema import (
    PUBLICATION_COLUMNS,
    SOURCE_COLUMNS,
    STORE_META_COLUMNS,
)
from persistence.state import (
    ASN_MAX,
    SCHEMA_VERSION,
    SESSION_MAX,
    GroupRecord,
    PersistedState,
    SourceRecord,
    StateHeader,
    StateId,
    UpstreamRef,
    kinds_to_mask,
    mask_to_kinds,
)
from persistence.state_binary import evaluated_digest

__all__ = [
    "checked_observed_at",
    "group_rows",
    "publication_row",
    "read_groups",
    "read_header",
    "record_counts",
    "source_fields",
    "source_row",
    "source_rows",
    "store_meta_row",
]

#: One row as column name -> value.
Named = dict[str, Any]


def _named(conn: Any, sql: str) -> list[Named]:
    cursor = conn.execute(sql)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _opt_int(value: object) -> int | None:
    return None if value is None else as_int(value)


def _opt_text(value: object) -> str | None:
    return None if value is None else as_text(value)


# ------------------------------------------------------------------ header
def read_header(conn: Any, store_id: str | None) -> StateHeader | None:
    """The verified header (``store_meta`` and ``publication``); None: nothing committed."""
    meta = _named(conn, "SELECT * FROM store_meta")
    publication = _named(conn, "SELECT * FROM publication")
    if not meta:
        return None  # the caller checks every other table is empty (P-28)
    if len(meta) != 1 or len(publication) != 1:
        raise CorruptStateError(
            f"the header tables hold {len(meta)} store_meta and {len(publication)} "
            "publication rows, not 1 each"
        )
    try:
        header = _header(meta[0], publication[0])
    except (TypeError, ValueError, KeyError) as exc:
        raise CorruptStateError(f"header: {exc}") from exc
    _check_header_ranges(header)
    if meta_digest(header) != header.meta_digest:
        raise CorruptStateError("header meta_digest mismatch")
    if publication_digest(header) != header.publication_digest:
        raise CorruptStateError("header publication_digest mismatch")
    if header.schema_version != SCHEMA_VERSION or header.store_id != store_id:
        raise CorruptStateError("header schema version or store id disagrees with schema_info")
    _check_versions(header.versions_json)
    return header


def _header(row: Named, pub: Named) -> StateHeader:
    if as_int(row["singleton"]) != 1 or as_int(pub["singleton"]) != 1:
        raise ValueError("singleton is not 1")
    upstream_id = _opt_text(row["upstream_store_id"])
    upstream = None
    if upstream_id is not None:
        upstream = UpstreamRef(
            upstream_id, as_int(row["upstream_epoch"]), as_int(row["upstream_generation"])
        )
    elif row["upstream_epoch"] is not None or row["upstream_generation"] is not None:
        raise ValueError("an upstream epoch or generation without its store id")
    return StateHeader(
        schema_version=as_int(row["schema_version"]),
        store_id=as_text(row["store_id"]),
        state_id=StateId(as_int(row["epoch"]), as_int(row["generation"])),
        config_revision=as_int(row["config_revision"]),
        serial=as_int(pub["serial"]),
        session_ids=(
            as_int(pub["session_v0"]),
            as_int(pub["session_v1"]),
            as_int(pub["session_v2"]),
        ),
        published_at=as_int(row["published_at"]),
        written_at=as_int(row["written_at"]),
        state_digest=as_blob(row["state_digest"]),
        meta_digest=as_blob(row["meta_digest"]),
        package_version=as_text(row["package_version"]),
        observed_at=as_int(pub["observed_at"]),
        evaluated_digest=as_blob(pub["evaluated_digest"]),
        recovered_from=_recovered_from(pub),
        config_store_id=_opt_text(row["config_store_id"]),
        config_epoch=_opt_int(row["config_epoch"]),
        mode=as_text(row["mode"]),
        reference_time=_opt_int(row["reference_time"]),
        upstream=upstream,
        policy_id=_opt_text(row["policy_id"]),
        versions_json=as_text(row["versions_json"]),
        config_identity=_opt_text(row["config_identity"]),
        policy_json=_opt_text(pub["policy_json"]),
        publication_digest=as_blob(pub["publication_digest"]),
    )


def _check_versions(text: str) -> None:
    """`UnsupportedSchemaError` unless ``versions_json`` names schema 2."""
    try:
        versions = json.loads(text)
    except ValueError as exc:
        raise CorruptStateError(f"header: versions_json is no JSON: {exc}") from exc
    if not isinstance(versions, dict) or versions.get("schema") != SCHEMA_VERSION:
        raise UnsupportedSchemaError(f"header: versions_json {text!r} is not of schema 2")


def _recovered_from(row: Named) -> StateId | None:
    epoch, generation = row["recovered_from_epoch"], row["recovered_from_generation"]
    if epoch is None and generation is None:
        return None
    if epoch is None or generation is None:
        raise ValueError("recovered_from_epoch and recovered_from_generation are stored together")
    return StateId(as_int(epoch), as_int(generation))


def _check_header_ranges(header: StateHeader) -> None:
    """`DamagedStateError` for a value no commit writes (whatever the DDL)."""
    if not 0 <= header.serial <= ASN_MAX:
        raise DamagedStateError(f"header: serial {header.serial} out of range 0..{ASN_MAX}")
    bad = [s for s in header.session_ids if not 0 <= s <= SESSION_MAX]
    if bad:
        raise DamagedStateError(f"header: session ids {bad} out of range 0..{SESSION_MAX}")
    if header.mode not in {"online", "offline"}:
        raise DamagedStateError(f"header: mode {header.mode!r}")


def store_meta_row(header: StateHeader) -> tuple[Any, ...]:
    """The ``store_meta`` row of ``header``, in `STORE_META_COLUMNS` order."""
    return (1, *meta_values(header), header.meta_digest)


def publication_row(header: StateHeader) -> tuple[Any, ...]:
    """The ``publication`` row of ``header``, in `PUBLICATION_COLUMNS` order."""
    # The values its digest covers, after the meta_digest they are chained to.
    row = (1, *publication_values(header)[1:], header.publication_digest)
    assert len(row) == len(PUBLICATION_COLUMNS)
    return row


assert STORE_META_COLUMNS[0] == "singleton"


def checked_observed_at(header: StateHeader, sources: tuple[SourceRecord, ...]) -> int:
    """The state's ``observed_at``, once the sources' stored times agree with ``header``."""
    if header.evaluated_digest is None or header.observed_at is None:
        raise DamagedStateError("a header without its stored times")
    if evaluated_digest(sources) != header.evaluated_digest:
        raise DamagedStateError("evaluated digest mismatch: the sources' evaluation times changed")
    late = [s.name for s in sources if s.evaluated_at > header.written_at]
    if header.observed_at > header.written_at or late:
        raise DamagedStateError(
            "written_at is earlier than the observed time or the evaluation time of "
            f"{', '.join(late) or 'the state'}: no commit writes that"
        )
    return header.observed_at


# ------------------------------------------------------------------ groups
def group_rows(state: PersistedState) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The ``groups`` rows and the ``active_groups`` rows of ``state``."""
    groups = [(g.group_id, g.name, kinds_to_mask(g.kinds)) for g in state.groups]
    ids = {g.name: g.group_id for g in state.groups}
    active = [(kind, ids[name]) for kind, name in sorted(state.active_groups)]
    return groups, active


def read_groups(
    conn: Any, sources: list[Named]
) -> tuple[tuple[GroupRecord, ...], tuple[tuple[str, str], ...]]:
    """The groups (members from the sources' ``group_id``) and the active groups."""
    members: dict[int, list[str]] = {}
    for row in sources:
        members.setdefault(as_int(row["group_id"]), []).append(as_text(row["name"]))
    groups = []
    for row in _named(conn, "SELECT * FROM groups ORDER BY group_id"):
        gid = as_int(row["group_id"])
        groups.append(
            GroupRecord(
                group_id=gid,
                name=as_text(row["name"]),
                kinds=mask_to_kinds(as_int(row["kinds"])),
                source_names=tuple(sorted(members.get(gid, ()))),
            )
        )
    names = {g.group_id: g.name for g in groups}
    active = []
    for row in _named(conn, "SELECT * FROM active_groups ORDER BY kind"):
        gid = as_int(row["group_id"])
        if gid not in names:
            raise DamagedStateError(f"active group {gid} is no group")
        active.append((as_text(row["kind"]), names[gid]))
    return tuple(groups), tuple(active)


# ------------------------------------------------------------------ sources
def source_rows(conn: Any) -> list[Named]:
    """Every row of ``sources``, in source id order."""
    return _named(conn, "SELECT * FROM sources ORDER BY source_id")


#: A stored identity is a digest (``sha256:`` and 64 hex digits); anything longer is damage.
MAX_IDENTITY = 128


def _identity(value: object) -> str | None:
    if value is None:
        return None
    text = as_text(value)
    if len(text) > MAX_IDENTITY:
        raise DamagedStateError(f"a source identity of {len(text)} characters")
    return text


def record_counts(row: Named) -> tuple[int, int, int]:
    """How many VRP, router key and ASPA supports of a source row are its records."""
    return (
        as_int(row["vrp_records"]),
        as_int(row["router_key_records"]),
        as_int(row["aspa_records"]),
    )


def source_fields(row: Named) -> Named:
    """`SourceRecord` keyword arguments of one source row (its payloads apart)."""
    return {
        "name": as_text(row["name"]),
        "group": as_text(row["group_name"]),
        "group_id": as_int(row["group_id"]),
        "kind": as_text(row["kind"]),
        "location": as_text(row["location"]),
        "complete": bool(as_int(row["complete"])),
        "capabilities": mask_to_kinds(as_int(row["capabilities"])),
        "selected": mask_to_kinds(as_int(row["selected"])),
        "present": mask_to_kinds(as_int(row["present"])),
        "invalidated": bool(as_int(row["invalidated"])),
        "protocol": _opt_int(row["protocol"]),
        "aspa_families": as_int(row["aspa_families"]),
        "accepted_at": as_int(row["accepted_at"]),
        "expires_at": as_int(row["expires_at"]),
        "rtr_session": _opt_int(row["rtr_session"]),
        "rtr_serial": _opt_int(row["rtr_serial"]),
        "generated_at": _opt_int(row["generated_at"]),
        "evaluated_at": as_int(row["evaluated_at"]),
        "identity": _identity(row["identity"]),
        "metadata_json": _opt_text(row["metadata_json"]),
    }


def source_row(sid: int, source: SourceRecord) -> tuple[Any, ...]:
    """The ``sources`` row of ``source`` under id ``sid``, in `SOURCE_COLUMNS` order."""
    values: Named = {
        "source_id": sid,
        "name": source.name,
        "group_id": source.group_id,
        "group_name": source.group,
        "kind": source.kind,
        "location": source.location,
        "complete": int(source.complete),
        "capabilities": kinds_to_mask(source.capabilities),
        "selected": kinds_to_mask(source.selected),
        "present": kinds_to_mask(source.present),
        "invalidated": int(source.invalidated),
        "protocol": source.protocol,
        "aspa_families": source.aspa_families,
        "accepted_at": source.accepted_at,
        "expires_at": source.expires_at,
        "rtr_session": source.rtr_session,
        "rtr_serial": source.rtr_serial,
        "generated_at": source.generated_at,
        "evaluated_at": source.evaluated_at,
        "identity": source.identity,
        "metadata_json": source.metadata_json,
        "vrp_records": source.vrp_count,
        "router_key_records": len(source.router_keys),
        "aspa_records": len(source.aspas),
    }
    return tuple(values[c] for c in SOURCE_COLUMNS)
