"""SLURM documents for tests and benchmarks: the given arrays, every other one present and empty."""

from __future__ import annotations

import json
from typing import Any


def slurm_document(version: int = 2, **members: list[Any]) -> dict[str, Any]:
    """A SLURM document with the given arrays (the others empty).

    Version 1 is RFC 8416; version 2 adds the ASPA arrays (draft-ietf-sidrops-aspa-slurm).
    """
    filters = ["prefixFilters", "bgpsecFilters"] + (["aspaFilters"] if version == 2 else [])
    assertions = ["prefixAssertions", "bgpsecAssertions"]
    assertions += ["aspaAssertions"] if version == 2 else []
    return {
        "slurmVersion": version,
        "validationOutputFilters": {k: members.get(k, []) for k in filters},
        "locallyAddedAssertions": {k: members.get(k, []) for k in assertions},
    }


def slurm_json(**members: list[Any]) -> str:
    """`slurm_document` (version 2) as JSON text."""
    return json.dumps(slurm_document(2, **members))
