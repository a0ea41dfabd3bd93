"""`Limits`: the bounds a read checks with SQL counts and lengths before it builds any record.

`CHECKS` holds the queries, with two dialect slots: ``{blob_length}``, the function giving a
BLOB's octet length, and ``{text_octets[column]}``, the expression giving a text column's length
in UTF-8 octets (`TextOctets`).
"""

from __future__ import annotations

from dataclasses import dataclass

from persistence.errors import PersistenceError


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on what one read of a stored state may build (all checked before decoding rows).

    The defaults leave room for several copies of the full global table.
    """

    #: Sources in one state.
    max_sources: int = 10_000
    #: Supports (stored payload rows: VRPs, Router Keys, ASPAs and their providers) in total.
    max_supports: int = 50_000_000
    #: Octets of the state's exchange document, which the state digest streams under this
    #: bound at every commit and read; a read first checks the stored large fields (VRP
    #: networks, Router Key SKIs and SPKIs, never more than the document) against it in SQL.
    max_export_bytes: int = 1 << 30
    #: Octets of the metadata in total: every source's name, group, kind and location, and the
    #: header's text and digest columns (store id, package version, the digests).
    max_metadata_bytes: int = 64 << 20


class LimitExceededError(PersistenceError):
    """The stored state is larger than the `Limits` allow: nothing of it was built.

    Not retryable (the same file is as large next time) and not corrupt: the file is left as
    it is; larger limits read it.
    """


class TextOctets:
    """``{text_octets[column]}`` in a query: the dialect's octet length of a text column."""

    def __init__(self, pattern: str) -> None:
        """``pattern`` has one ``{}`` for the column name."""
        self.pattern = pattern

    def __getitem__(self, column: str) -> str:
        """The expression for ``column``."""
        return self.pattern.format(column)


#: The counts a read checks, as (what, the `Limits` field, SQL with the dialect slots).
CHECKS = (
    ("sources", "max_sources", "SELECT COUNT(*) FROM sources"),
    (
        "supports",
        "max_supports",
        (
            "SELECT (SELECT COUNT(*) FROM vrps) + (SELECT COUNT(*) FROM router_keys)"
            " + (SELECT COUNT(*) FROM aspas) + (SELECT COUNT(*) FROM aspa_providers)"
        ),
    ),
    (
        "octets of large fields",
        "max_export_bytes",
        (
            "SELECT (SELECT COALESCE(SUM({blob_length}(network)), 0) FROM vrps) + (SELECT"
            " COALESCE(SUM({blob_length}(ski) + {blob_length}(spki)), 0) FROM router_keys)"
        ),
    ),
    (
        "octets of metadata",
        "max_metadata_bytes",
        (
            "SELECT (SELECT COALESCE(SUM({text_octets[name]} + {text_octets[group_name]}"
            " + {text_octets[kind]} + {text_octets[location]}"
            " + COALESCE({text_octets[metadata_json]}, 0)), 0) FROM sources)"
            " + (SELECT COALESCE(SUM({text_octets[name]}), 0) FROM groups)"
            " + (SELECT COALESCE(SUM({text_octets[store_id]} + {text_octets[package_version]}"
            " + {text_octets[versions_json]} + {blob_length}(state_digest)"
            " + {blob_length}(meta_digest)), 0) FROM store_meta)"
            " + (SELECT COALESCE(SUM(COALESCE({text_octets[policy_json]}, 0)), 0)"
            " FROM publication)"
        ),
    ),
)
