"""Schema version 2: the tables, columns, keys and value rules shared by every SQL backend.

Both SQLite and DuckDB run the statements of `ddl`, which differ only in the dialect's octet
length function of a BLOB (SQLite ``length``, DuckDB ``octet_length``). Networks are an address
family plus 4 or 16 network octets, ASNs BIGINT, times signed integer microseconds UTC; ``seq``
keeps each source's order so the digest can be recomputed from what is read.

Every payload table has a primary key, ``sources`` a unique name, and ``CHECK`` constraints
hold the legal ranges, so SQL itself refuses an out-of-range row. A file written by the first
schema-2 DDL (the same tables and columns, no key or CHECK) is still read and committed to:
its physical DDL is left as it is, and every read runs `RANGE_CHECKS` and strict type checks
whatever the DDL. Columns added after the first release (`LATER_COLUMNS`) are nullable, so a
file written before them keeps its meaning; the owner adds them in place.
"""

from __future__ import annotations

from persistence.state import SCHEMA_VERSION

__all__ = [
    "COLUMNS",
    "DDL",
    "LATER_COLUMNS",
    "RANGE_CHECKS",
    "SCHEMA_VERSION",
    "TABLES",
    "TIME_COLUMNS",
    "ddl",
]

#: (name, declared SQL type, NOT NULL) of one column.
ColumnSpec = tuple[str, str, bool]

TABLES = ("schema_info", "header", "sources", "vrps", "router_keys", "aspas", "aspa_providers")

#: Table -> its columns in order (the `LATER_COLUMNS` at the end of their table).
COLUMNS: dict[str, tuple[ColumnSpec, ...]] = {
    "schema_info": (
        ("schema_version", "INTEGER", True),
        ("store_id", "TEXT", True),
        ("created_at", "BIGINT", True),
    ),
    "header": (
        ("schema_version", "INTEGER", True),
        ("store_id", "TEXT", True),
        ("epoch", "BIGINT", True),
        ("generation", "BIGINT", True),
        ("config_revision", "BIGINT", True),
        ("serial", "BIGINT", True),
        ("session_v0", "INTEGER", True),
        ("session_v1", "INTEGER", True),
        ("session_v2", "INTEGER", True),
        ("published_at", "BIGINT", True),
        ("written_at", "BIGINT", True),
        ("state_digest", "BLOB", True),
        ("header_digest", "BLOB", True),
        ("package_version", "TEXT", True),
        ("observed_at", "BIGINT", False),
        ("evaluated_digest", "BLOB", False),
        ("recovered_from_epoch", "BIGINT", False),
        ("recovered_from_generation", "BIGINT", False),
    ),
    "sources": (
        ("source_id", "INTEGER", True),
        ("name", "TEXT", True),
        ("group_name", "TEXT", True),
        ("kind", "TEXT", True),
        ("location", "TEXT", True),
        ("complete", "SMALLINT", True),
        ("capabilities", "INTEGER", True),
        ("selected", "INTEGER", True),
        ("accepted_at", "BIGINT", True),
        ("expires_at", "BIGINT", True),
        ("rtr_session", "INTEGER", False),
        ("rtr_serial", "BIGINT", False),
        ("generated_at", "BIGINT", False),
        ("evaluated_at", "BIGINT", False),
        ("identity", "TEXT", False),
    ),
    "vrps": (
        ("source_id", "INTEGER", True),
        ("family", "SMALLINT", True),
        ("seq", "BIGINT", True),
        ("network", "BLOB", True),
        ("prefix_length", "SMALLINT", True),
        ("max_length", "SMALLINT", True),
        ("asn", "BIGINT", True),
        ("expires_at", "BIGINT", True),
    ),
    "router_keys": (
        ("source_id", "INTEGER", True),
        ("seq", "BIGINT", True),
        ("ski", "BLOB", True),
        ("asn", "BIGINT", True),
        ("spki", "BLOB", True),
        ("expires_at", "BIGINT", True),
    ),
    "aspas": (
        ("source_id", "INTEGER", True),
        ("seq", "BIGINT", True),
        ("customer", "BIGINT", True),
        ("expires_at", "BIGINT", True),
    ),
    "aspa_providers": (
        ("source_id", "INTEGER", True),
        ("seq", "BIGINT", True),
        ("idx", "INTEGER", True),
        ("provider", "BIGINT", True),
    ),
}

#: Columns added to schema 2 after its first release, per table, with their SQL type, in the
#: order they came. They are nullable (NULL: written before they existed); `persistence.meta_rows`
#: adds them to an older file and reads every layout. First the stored evaluation times
#: (``header.observed_at``, ``header.evaluated_digest``, ``sources.evaluated_at``), then the
#: state a recovery started from (``header.recovered_from_*``).
LATER_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "header": (
        ("observed_at", "BIGINT"),
        ("evaluated_digest", "BLOB"),
        ("recovered_from_epoch", "BIGINT"),
        ("recovered_from_generation", "BIGINT"),
    ),
    "sources": (("evaluated_at", "BIGINT"), ("identity", "TEXT")),
}
#: The stored evaluation times alone (the first `LATER_COLUMNS`).
TIME_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "header": LATER_COLUMNS["header"][:2],
    "sources": LATER_COLUMNS["sources"][:1],
}

_U32 = "BETWEEN 0 AND 4294967295"
_U16 = "BETWEEN 0 AND 65535"
_MAX_LEN = "CASE WHEN family = 4 THEN 32 ELSE 128 END"

#: The legal value of a row, per table, as one SQL condition (``{blob_length}``: the dialect's
#: octet length). The DDL holds it as a CHECK; a read counts the rows that break it.
ROW_RULES: dict[str, str] = {
    "header": f"""serial {_U32}
            AND session_v0 {_U16} AND session_v1 {_U16} AND session_v2 {_U16}
            AND (recovered_from_epoch IS NULL) = (recovered_from_generation IS NULL)""",
    "sources": f"""source_id >= 0
            AND complete IN (0, 1) AND capabilities BETWEEN 0 AND 7 AND selected BETWEEN 0 AND 7
            AND (rtr_session IS NULL OR rtr_session {_U16})
            AND (rtr_serial IS NULL OR rtr_serial {_U32})""",
    "vrps": f"""family IN (4, 6)
            AND lower(typeof(network)) = 'blob'
            AND {{blob_length}}(network) = CASE WHEN family = 4 THEN 4 ELSE 16 END
            AND prefix_length BETWEEN 0 AND {_MAX_LEN}
            AND max_length BETWEEN prefix_length AND {_MAX_LEN}
            AND asn {_U32}
            AND seq >= 0""",
    "router_keys": f"""lower(typeof(ski)) = 'blob' AND {{blob_length}}(ski) = 20
            AND lower(typeof(spki)) = 'blob' AND {{blob_length}}(spki) > 0
            AND asn {_U32}
            AND seq >= 0""",
    "aspas": "customer BETWEEN 1 AND 4294967295 AND seq >= 0",
    "aspa_providers": f"provider {_U32} AND seq >= 0 AND idx >= 0",
}
#: Primary keys and unique constraints, per table.
KEYS: dict[str, tuple[str, ...]] = {
    "sources": ("PRIMARY KEY (source_id)", "UNIQUE (name)"),
    "vrps": ("PRIMARY KEY (source_id, seq)",),
    "router_keys": ("PRIMARY KEY (source_id, seq)",),
    "aspas": ("PRIMARY KEY (source_id, seq)",),
    "aspa_providers": ("PRIMARY KEY (source_id, seq, idx)",),
}


def _create_table(table: str) -> str:
    lines = [f"{name} {kind}{' NOT NULL' if nn else ''}" for name, kind, nn in COLUMNS[table]]
    lines += KEYS.get(table, ())
    if table in ROW_RULES:
        lines.append(f"CHECK ({ROW_RULES[table]})")
    body = ",\n        ".join(lines)
    return f"CREATE TABLE {table} (\n        {body}\n    )"


#: The CREATE TABLE statements, with a ``{blob_length}`` slot; `ddl` fills it in.
DDL = tuple(_create_table(table) for table in TABLES)


def ddl(blob_length: str) -> tuple[str, ...]:
    """The schema's statements for a dialect whose octet length of a BLOB is ``blob_length``."""
    return tuple(statement.replace("{blob_length}", blob_length) for statement in DDL)


def _names(table: str) -> tuple[str, ...]:
    return tuple(name for name, _, _ in COLUMNS[table])


HEADER_COLUMNS = _names("header")
SOURCE_COLUMNS = _names("sources")
VRP_COLUMNS = _names("vrps")
ROUTER_KEY_COLUMNS = _names("router_keys")
ASPA_COLUMNS = _names("aspas")
PROVIDER_COLUMNS = _names("aspa_providers")

#: Rows that break a range rule (NULLs are excluded by NOT NULL); any count above 0 is corruption.
#: ``{blob_length}`` is the dialect's octet length of a BLOB. The header's ranges are checked
#: on the header row itself (`persistence.meta_rows.read_header`).
RANGE_CHECKS = tuple(
    (table, f"SELECT count(*) FROM {table} WHERE NOT ({rule})")  # noqa: S608 - fixed text
    for table, rule in ROW_RULES.items()
    if table != "header"
)
