"""A `SlurmPolicy` as one canonical SLURM document: `policy_document`, `read_policy_document`.

The owner of a state stores the SLURM policy in force as this text (`PersistedState.policy_json`)
so that a shared reader without a policy of its own applies the owner's. The document is a
``"slurmVersion": 2`` SLURM file (RFC 8416 with the ASPA draft's members) that `parse_slurm`
reads back to an equal policy, entries in the policy's order, comments kept (an entry's
``origin`` is not). Canonical bytes: UTF-8 (``ensure_ascii=False``), no insignificant
whitespace (separators ``,`` and ``:``), members in the fixed order of RFC 8416's examples (not
sorted); a member absent from an entry is left out (never ``null``); SKI and router public keys
base64url without padding (RFC 8416 §3.3.2); an IPv4-mapped IPv6 prefix spelt
``::ffff:a.b.c.d/len`` whatever the interpreter's ``ipaddress`` would print. Pure: no I/O.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from snapshot.prefix_text import network_text
from snapshot.slurm import ASSERTIONS, FILTERS, SlurmPolicy, parse_slurm

__all__ = ["policy_document", "read_policy_document"]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _entry(fields: dict[str, Any], comment: str | None) -> dict[str, Any]:
    entry = {key: value for key, value in fields.items() if value is not None}
    if comment is not None:
        entry["comment"] = comment
    return entry


def policy_document(policy: SlurmPolicy) -> str:
    """The canonical SLURM document of ``policy`` (see the module docstring)."""
    filters = {
        "prefixFilters": [
            _entry(
                {"prefix": None if f.prefix is None else network_text(f.prefix), "asn": f.asn},
                f.comment,
            )
            for f in policy.prefix_filters
        ],
        "bgpsecFilters": [
            _entry({"asn": f.asn, "SKI": None if f.ski is None else _b64(f.ski)}, f.comment)
            for f in policy.bgpsec_filters
        ],
        "aspaFilters": [
            _entry({"customerAsn": f.customer}, f.comment) for f in policy.aspa_filters
        ],
    }
    assertions = {
        "prefixAssertions": [
            _entry(
                {
                    "asn": a.vrp.asn,
                    "prefix": network_text(a.vrp.prefix),
                    "maxPrefixLength": a.vrp.max_length,
                },
                a.comment,
            )
            for a in policy.prefix_assertions
        ],
        "bgpsecAssertions": [
            _entry(
                {
                    "asn": a.key.asn,
                    "SKI": _b64(a.key.ski),
                    "routerPublicKey": _b64(a.key.spki),
                },
                a.comment,
            )
            for a in policy.bgpsec_assertions
        ],
        "aspaAssertions": [
            _entry(
                {"customerAsn": a.aspa.customer, "providerAsns": list(a.aspa.providers)},
                a.comment,
            )
            for a in policy.aspa_assertions
        ],
    }
    document = {"slurmVersion": 2, FILTERS: filters, ASSERTIONS: assertions}
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))


def read_policy_document(text: str, name: str = "the stored SLURM policy") -> SlurmPolicy:
    """The policy of a stored document (any valid SLURM file is read).

    Raises:
        SlurmError: the text is no valid SLURM document (the message starts with ``name``).
    """
    return parse_slurm(text, name)
