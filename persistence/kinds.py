"""Payload kind bitmasks, ASPA family bits and the fixed values of a source's metadata.

Pure constants and conversions shared by the state model, its digests and the row code.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "ASPA_FAMILIES_BOTH",
    "ASPA_FAMILY_V4",
    "ASPA_FAMILY_V6",
    "KIND_BITS",
    "MODES",
    "NOT_INCREMENTAL_METADATA",
    "kinds_to_mask",
    "mask_to_kinds",
]

#: Payload kinds as stored: the contract's ``present`` bit order (bit 0 VRP, bit 1 ASPA, bit 2
#: Router Key), used for the ``capabilities``, ``selected`` and ``present`` masks alike.
KIND_BITS = {"vrp": 1, "aspa": 2, "router_key": 4}
#: `SourceRecord.aspa_families` bits: complete IPv4 / IPv6 ASPA coverage (0: no ASPA support).
ASPA_FAMILY_V4 = 1
ASPA_FAMILY_V6 = 2
ASPA_FAMILIES_BOTH = ASPA_FAMILY_V4 | ASPA_FAMILY_V6
#: `SourceRecord.metadata_json` of an ASPA revocation by a v2 -> v1 negotiation (contract P-33):
#: the retained records may not serve as an incremental (Serial Query) base.
NOT_INCREMENTAL_METADATA = '{"rtr":{"incremental_usable":false}}'
#: The state's ``mode`` values.
MODES = ("online", "offline")


def kinds_to_mask(kinds: Iterable[str]) -> int:
    """The bitmask of payload kind names."""
    mask = 0
    for kind in kinds:
        mask |= KIND_BITS[kind]
    return mask


def mask_to_kinds(mask: int) -> frozenset[str]:
    """The payload kind names of a bitmask."""
    return frozenset(kind for kind, bit in KIND_BITS.items() if mask & bit)
