"""Schema version 2: the tables and columns shared by every SQL backend, as DDL text.

Both SQLite and DuckDB run exactly these statements. Networks are an address family plus 4 or 16
network octets, ASNs BIGINT, times signed integer microseconds UTC; ``seq`` keeps each source's
order so the digest can be recomputed from what is read. The stored evaluation times
(``header.observed_at``, ``header.evaluated_digest``, ``sources.evaluated_at``) came later and
are nullable, so that a file written before them keeps its meaning (see `TIME_COLUMNS`).
"""

from __future__ import annotations

from persistence.state import SCHEMA_VERSION

#: Columns added to schema 2 after its first release, per table, with their SQL type. They are
#: nullable (NULL: written before they existed); `persistence.meta_rows` adds them to an older
#: file and reads both layouts.
TIME_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "header": (("observed_at", "BIGINT"), ("evaluated_digest", "BLOB")),
    "sources": (("evaluated_at", "BIGINT"),),
}

TABLES = ("schema_info", "header", "sources", "vrps", "router_keys", "aspas", "aspa_providers")

DDL = (
    """CREATE TABLE schema_info (
        schema_version INTEGER NOT NULL,
        store_id TEXT NOT NULL,
        created_at BIGINT NOT NULL
    )""",
    """CREATE TABLE header (
        schema_version INTEGER NOT NULL,
        store_id TEXT NOT NULL,
        epoch BIGINT NOT NULL,
        generation BIGINT NOT NULL,
        config_revision BIGINT NOT NULL,
        serial BIGINT NOT NULL,
        session_v0 INTEGER NOT NULL,
        session_v1 INTEGER NOT NULL,
        session_v2 INTEGER NOT NULL,
        published_at BIGINT NOT NULL,
        written_at BIGINT NOT NULL,
        state_digest BLOB NOT NULL,
        header_digest BLOB NOT NULL,
        package_version TEXT NOT NULL,
        observed_at BIGINT,
        evaluated_digest BLOB
    )""",
    """CREATE TABLE sources (
        source_id INTEGER NOT NULL,
        name TEXT NOT NULL,
        group_name TEXT NOT NULL,
        kind TEXT NOT NULL,
        location TEXT NOT NULL,
        complete SMALLINT NOT NULL,
        capabilities INTEGER NOT NULL,
        selected INTEGER NOT NULL,
        accepted_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        rtr_session INTEGER,
        rtr_serial BIGINT,
        generated_at BIGINT,
        evaluated_at BIGINT
    )""",
    """CREATE TABLE vrps (
        source_id INTEGER NOT NULL,
        family SMALLINT NOT NULL,
        seq BIGINT NOT NULL,
        network BLOB NOT NULL,
        prefix_length SMALLINT NOT NULL,
        max_length SMALLINT NOT NULL,
        asn BIGINT NOT NULL,
        expires_at BIGINT NOT NULL
    )""",
    """CREATE TABLE router_keys (
        source_id INTEGER NOT NULL,
        seq BIGINT NOT NULL,
        ski BLOB NOT NULL,
        asn BIGINT NOT NULL,
        spki BLOB NOT NULL,
        expires_at BIGINT NOT NULL
    )""",
    """CREATE TABLE aspas (
        source_id INTEGER NOT NULL,
        seq BIGINT NOT NULL,
        customer BIGINT NOT NULL,
        expires_at BIGINT NOT NULL
    )""",
    """CREATE TABLE aspa_providers (
        source_id INTEGER NOT NULL,
        seq BIGINT NOT NULL,
        idx INTEGER NOT NULL,
        provider BIGINT NOT NULL
    )""",
)

HEADER_COLUMNS = (
    "schema_version",
    "store_id",
    "epoch",
    "generation",
    "config_revision",
    "serial",
    "session_v0",
    "session_v1",
    "session_v2",
    "published_at",
    "written_at",
    "state_digest",
    "header_digest",
    "package_version",
    *(name for name, _ in TIME_COLUMNS["header"]),
)
SOURCE_COLUMNS = (
    "source_id",
    "name",
    "group_name",
    "kind",
    "location",
    "complete",
    "capabilities",
    "selected",
    "accepted_at",
    "expires_at",
    "rtr_session",
    "rtr_serial",
    "generated_at",
    *(name for name, _ in TIME_COLUMNS["sources"]),
)
VRP_COLUMNS = (
    "source_id",
    "family",
    "seq",
    "network",
    "prefix_length",
    "max_length",
    "asn",
    "expires_at",
)
ROUTER_KEY_COLUMNS = ("source_id", "seq", "ski", "asn", "spki", "expires_at")
ASPA_COLUMNS = ("source_id", "seq", "customer", "expires_at")
PROVIDER_COLUMNS = ("source_id", "seq", "idx", "provider")

#: Rows that break a range rule (NULLs are excluded by NOT NULL); any count above 0 is corruption.
#: ``{blob_length}`` is the dialect's octet length of a BLOB.
RANGE_CHECKS = (
    (
        "vrps",
        """SELECT count(*) FROM vrps WHERE NOT (
            family IN (4, 6)
            AND lower(typeof(network)) = 'blob'
            AND {blob_length}(network) = CASE WHEN family = 4 THEN 4 ELSE 16 END
            AND prefix_length BETWEEN 0 AND CASE WHEN family = 4 THEN 32 ELSE 128 END
            AND max_length BETWEEN prefix_length AND CASE WHEN family = 4 THEN 32 ELSE 128 END
            AND asn BETWEEN 0 AND 4294967295
            AND seq >= 0
        )""",
    ),
    (
        "router_keys",
        """SELECT count(*) FROM router_keys WHERE NOT (
            lower(typeof(ski)) = 'blob' AND {blob_length}(ski) = 20
            AND lower(typeof(spki)) = 'blob' AND {blob_length}(spki) > 0
            AND asn BETWEEN 0 AND 4294967295
        )""",
    ),
    ("aspas", "SELECT count(*) FROM aspas WHERE NOT (customer BETWEEN 1 AND 4294967295)"),
    (
        "aspa_providers",
        "SELECT count(*) FROM aspa_providers WHERE NOT (provider BETWEEN 0 AND 4294967295)",
    ),
    (
        "sources",
        """SELECT count(*) FROM sources WHERE NOT (
            complete IN (0, 1) AND capabilities BETWEEN 0 AND 7 AND selected BETWEEN 0 AND 7
        )""",
    ),
)

__all__ = ["DDL", "SCHEMA_VERSION", "TABLES", "TIME_COLUMNS"]
