"""The schema-2 DDL as released before the keys and CHECKs (a fixture: files of that layout).

The exact statements `persistence.schema.DDL` had until the keys, ``UNIQUE`` and ``CHECK``
constraints and the ``recovered_from_*`` columns came: the same tables and columns (the stored
evaluation times included), no constraint but NOT NULL. `legacy_store` builds such a file as
the old code did, so the tests can write rows the current DDL refuses "behind the backend's back".
"""

from __future__ import annotations

from pathlib import Path

from tests.persistence.helpers import raw

LEGACY_DDL = (
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


def legacy_store(kind: str, path: Path, store_id: str = "e" * 32) -> None:
    """Create an empty schema-2 store at ``path`` with `LEGACY_DDL`, as the old code did."""
    with raw(kind, path) as db:
        for statement in LEGACY_DDL:
            db.execute(statement)
        db.execute("INSERT INTO schema_info VALUES (?, ?, ?)", (2, store_id, 0))
