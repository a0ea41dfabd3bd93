"""Schema version 2: the tables, columns, keys and value rules shared by every SQL backend.

Both SQLite and DuckDB run the statements of `ddl`, which differ only in the dialect's octet
length function of a BLOB (SQLite ``length``, DuckDB ``octet_length``). Networks are an address
family plus 4 or 16 network octets, ASNs BIGINT, times signed integer microseconds UTC;
``support_id`` is each source's contiguous 0-based support position per payload family (VRPs,
router keys, ASPAs), a duplicate support keeping its own position.

``schema_info`` and ``store_meta`` are the contract's tables, exactly; ``publication``,
``groups`` and ``active_groups`` and the sources' ``group_name`` are ours (see
`persistence.store_meta`). Every table has a primary key and ``CHECK`` constraints hold the
legal ranges, so SQL itself refuses an out-of-range row; every read also runs `RANGE_CHECKS`
and strict type checks. A file of an earlier layout (a ``header`` table) is refused, never
migrated (`persistence.structure`).
"""

from __future__ import annotations

from persistence.state import SCHEMA_VERSION

__all__ = [
    "COLUMNS",
    "DDL",
    "RANGE_CHECKS",
    "SCHEMA_VERSION",
    "STORE_META_FIELDS",
    "TABLES",
    "VERSIONS_JSON",
    "ddl",
]

#: (name, declared SQL type, NOT NULL) of one column.
ColumnSpec = tuple[str, str, bool]

#: ``store_meta.versions_json`` as we write it (canonical JSON, sorted keys): the logical schema,
#: the exchange format and the adapter's semantic version the state follows.
VERSIONS_JSON = '{"adapter_semantics":1,"exchange_format":2,"schema":2}'

TABLES = (
    "schema_info",
    "store_meta",
    "publication",
    "groups",
    "active_groups",
    "sources",
    "vrps",
    "router_keys",
    "aspas",
    "aspa_providers",
)
#: The tables one commit replaces (every table but ``schema_info``).
STATE_TABLES = TABLES[1:]
#: The tables that must be empty while ``store_meta`` is (P-28).
HEADERLESS_EMPTY = TABLES[2:]

#: The contract's ``store_meta`` fields, in its order (after ``singleton``); ``meta_digest`` is
#: the SHA-256 of the canonical JSON array of all the others (`persistence.store_meta`).
STORE_META_FIELDS = (
    "schema_version",
    "store_id",
    "epoch",
    "generation",
    "config_store_id",
    "config_epoch",
    "config_revision",
    "published_at",
    "written_at",
    "mode",
    "reference_time",
    "upstream_store_id",
    "upstream_epoch",
    "upstream_generation",
    "policy_id",
    "versions_json",
    "package_version",
    "config_identity",
    "state_digest",
    "meta_digest",
)
_META_TYPES = {
    "schema_version": ("INTEGER", True),
    "store_id": ("TEXT", True),
    "epoch": ("BIGINT", True),
    "generation": ("BIGINT", True),
    "config_store_id": ("TEXT", False),
    "config_epoch": ("BIGINT", False),
    "config_revision": ("BIGINT", True),
    "published_at": ("BIGINT", True),
    "written_at": ("BIGINT", True),
    "mode": ("TEXT", True),
    "reference_time": ("BIGINT", False),
    "upstream_store_id": ("TEXT", False),
    "upstream_epoch": ("BIGINT", False),
    "upstream_generation": ("BIGINT", False),
    "policy_id": ("TEXT", False),
    "versions_json": ("TEXT", True),
    "package_version": ("TEXT", True),
    "config_identity": ("TEXT", False),
    "state_digest": ("BLOB", True),
    "meta_digest": ("BLOB", True),
}

#: Table -> its columns in order.
COLUMNS: dict[str, tuple[ColumnSpec, ...]] = {
    "schema_info": (
        ("singleton", "INTEGER", True),
        ("schema_version", "INTEGER", True),
        ("store_id", "TEXT", True),
        ("created_at", "BIGINT", True),
    ),
    "store_meta": (
        ("singleton", "INTEGER", True),
        *((name, *_META_TYPES[name]) for name in STORE_META_FIELDS),
    ),
    # Our publication of the state, beside the contract's header: see `persistence.store_meta`.
    "publication": (
        ("singleton", "INTEGER", True),
        ("serial", "BIGINT", True),
        ("session_v0", "INTEGER", True),
        ("session_v1", "INTEGER", True),
        ("session_v2", "INTEGER", True),
        ("observed_at", "BIGINT", True),
        ("evaluated_digest", "BLOB", True),
        ("recovered_from_epoch", "BIGINT", False),
        ("recovered_from_generation", "BIGINT", False),
        ("policy_json", "TEXT", False),
        ("publication_digest", "BLOB", True),
    ),
    "groups": (
        ("group_id", "INTEGER", True),
        ("name", "TEXT", True),
        ("kinds", "INTEGER", True),
    ),
    "active_groups": (
        ("kind", "TEXT", True),
        ("group_id", "INTEGER", True),
    ),
    "sources": (
        ("source_id", "INTEGER", True),
        ("name", "TEXT", True),
        ("group_id", "INTEGER", True),
        ("group_name", "TEXT", True),
        ("kind", "TEXT", True),
        ("location", "TEXT", True),
        ("complete", "SMALLINT", True),
        ("capabilities", "INTEGER", True),
        ("selected", "INTEGER", True),
        ("present", "INTEGER", True),
        ("invalidated", "SMALLINT", True),
        ("protocol", "SMALLINT", False),
        ("aspa_families", "SMALLINT", True),
        ("accepted_at", "BIGINT", True),
        ("expires_at", "BIGINT", True),
        ("rtr_session", "INTEGER", False),
        ("rtr_serial", "BIGINT", False),
        ("generated_at", "BIGINT", False),
        ("evaluated_at", "BIGINT", True),
        ("identity", "TEXT", False),
        ("metadata_json", "TEXT", False),
        # Ours: how many of the source's supports, per payload family, are its records; the
        # supports from that position on are duplicate supports (`SourceRecord.vrp_duplicates`).
        ("vrp_records", "BIGINT", True),
        ("router_key_records", "BIGINT", True),
        ("aspa_records", "BIGINT", True),
    ),
    "vrps": (
        ("source_id", "INTEGER", True),
        ("support_id", "BIGINT", True),
        ("family", "SMALLINT", True),
        ("network", "BLOB", True),
        ("prefix_length", "SMALLINT", True),
        ("max_length", "SMALLINT", True),
        ("asn", "BIGINT", True),
        ("expires_at", "BIGINT", True),
    ),
    "router_keys": (
        ("source_id", "INTEGER", True),
        ("support_id", "BIGINT", True),
        ("ski", "BLOB", True),
        ("asn", "BIGINT", True),
        ("spki", "BLOB", True),
        ("expires_at", "BIGINT", True),
    ),
    "aspas": (
        ("source_id", "INTEGER", True),
        ("support_id", "BIGINT", True),
        ("customer", "BIGINT", True),
        ("afi", "SMALLINT", True),
        ("expires_at", "BIGINT", True),
    ),
    "aspa_providers": (
        ("source_id", "INTEGER", True),
        ("support_id", "BIGINT", True),
        ("idx", "INTEGER", True),
        ("provider", "BIGINT", True),
    ),
}

_U32 = "BETWEEN 0 AND 4294967295"
_U16 = "BETWEEN 0 AND 65535"
_MAX_LEN = "CASE WHEN family = 4 THEN 32 ELSE 128 END"

#: The legal value of a row, per table, as one SQL condition (``{blob_length}``: the dialect's
#: octet length). The DDL holds it as a CHECK; a read counts the rows that break it.
ROW_RULES: dict[str, str] = {
    "schema_info": f"singleton = 1 AND schema_version = {SCHEMA_VERSION}",
    "store_meta": f"""singleton = 1 AND schema_version = {SCHEMA_VERSION}
            AND mode IN ('online', 'offline')
            AND (upstream_store_id IS NULL) = (upstream_epoch IS NULL)
            AND (upstream_epoch IS NULL) = (upstream_generation IS NULL)""",
    "publication": f"""singleton = 1 AND serial {_U32}
            AND session_v0 {_U16} AND session_v1 {_U16} AND session_v2 {_U16}
            AND (recovered_from_epoch IS NULL) = (recovered_from_generation IS NULL)""",
    "groups": "group_id >= 0 AND kinds BETWEEN 0 AND 7",
    "active_groups": """kind IN ('vrp', 'router_key', 'aspa', 'aspa_v4', 'aspa_v6')
            AND group_id >= 0""",
    "sources": f"""source_id >= 0 AND group_id >= 0
            AND complete IN (0, 1) AND invalidated IN (0, 1)
            AND capabilities BETWEEN 0 AND 7 AND selected BETWEEN 0 AND 7
            AND present BETWEEN 0 AND 7 AND aspa_families BETWEEN 0 AND 3
            AND (protocol IS NULL OR protocol IN (0, 1, 2))
            AND (rtr_session IS NULL OR rtr_session {_U16})
            AND (rtr_serial IS NULL OR rtr_serial {_U32})
            AND vrp_records >= 0 AND router_key_records >= 0 AND aspa_records >= 0""",
    "vrps": f"""family IN (4, 6)
            AND lower(typeof(network)) = 'blob'
            AND {{blob_length}}(network) = CASE WHEN family = 4 THEN 4 ELSE 16 END
            AND prefix_length BETWEEN 0 AND {_MAX_LEN}
            AND max_length BETWEEN prefix_length AND {_MAX_LEN}
            AND asn {_U32}
            AND support_id >= 0""",
    "router_keys": f"""lower(typeof(ski)) = 'blob' AND {{blob_length}}(ski) = 20
            AND lower(typeof(spki)) = 'blob' AND {{blob_length}}(spki) > 0
            AND asn {_U32}
            AND support_id >= 0""",
    "aspas": """customer BETWEEN 1 AND 4294967295 AND afi IN (0, 1, 2)
            AND support_id >= 0""",
    "aspa_providers": f"provider {_U32} AND support_id >= 0 AND idx >= 0",
}
#: Primary keys and unique constraints, per table.
KEYS: dict[str, tuple[str, ...]] = {
    "schema_info": ("PRIMARY KEY (singleton)",),
    "store_meta": ("PRIMARY KEY (singleton)",),
    "publication": ("PRIMARY KEY (singleton)",),
    "groups": ("PRIMARY KEY (group_id)", "UNIQUE (name)"),
    "active_groups": ("PRIMARY KEY (kind)",),
    "sources": ("PRIMARY KEY (source_id)", "UNIQUE (name)"),
    "vrps": ("PRIMARY KEY (source_id, support_id)",),
    "router_keys": ("PRIMARY KEY (source_id, support_id)",),
    "aspas": ("PRIMARY KEY (source_id, support_id)",),
    "aspa_providers": ("PRIMARY KEY (source_id, support_id, idx)",),
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


STORE_META_COLUMNS = _names("store_meta")
PUBLICATION_COLUMNS = _names("publication")
GROUP_COLUMNS = _names("groups")
ACTIVE_GROUP_COLUMNS = _names("active_groups")
SOURCE_COLUMNS = _names("sources")
VRP_COLUMNS = _names("vrps")
ROUTER_KEY_COLUMNS = _names("router_keys")
ASPA_COLUMNS = _names("aspas")
PROVIDER_COLUMNS = _names("aspa_providers")

#: Rows that break a range rule (NULLs are excluded by NOT NULL); any count above 0 is corruption.
#: ``{blob_length}`` is the dialect's octet length of a BLOB. The header's ranges are checked
#: on the header rows themselves (`persistence.meta_rows.read_header`).
RANGE_CHECKS = tuple(
    (table, f"SELECT count(*) FROM {table} WHERE NOT ({rule})")  # noqa: S608 - fixed text
    for table, rule in ROW_RULES.items()
    if table not in {"schema_info", "store_meta", "publication"}
)
