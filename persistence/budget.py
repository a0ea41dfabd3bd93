"""`Budget`: what one state costs against `Limits`, and the check of lowered limits (P-58).

The quantities a read checks, computed from a `PersistedState` in memory: sources and supports
(VRPs, Router Keys, ASPAs and their providers, duplicate supports included) as the read counts
them in SQL before it builds anything (`persistence.limits`); the octets of the state's exchange
document, which its digest streams under ``max_export_bytes`` (the read's cheaper SQL count of
the large fields is never more); the octets of the metadata (each source's name, group, kind,
location and metadata, the group names, the header's store id, package version, versions and
two digests, the stored SLURM policy). A budget is immutable: a check keeps the one it observed.
"""

from __future__ import annotations

from dataclasses import dataclass

from persistence.exchange import encode
from persistence.limits import Limits
from persistence.schema import VERSIONS_JSON
from persistence.state import PersistedState

__all__ = ["Budget", "state_budget"]

#: Octets of the header's two SHA-256 digest columns.
_DIGESTS = 2 * 32


@dataclass(frozen=True, slots=True)
class Budget:
    """What one state needs of each `Limits` bound."""

    sources: int
    supports: int
    export_bytes: int
    metadata_bytes: int

    def exceeded(self, limits: Limits) -> str | None:
        """Which bound of ``limits`` this state is over, said in words; None: it fits."""
        for what, name, found in (
            ("sources", "max_sources", self.sources),
            ("supports", "max_supports", self.supports),
            ("octets of the exchange document", "max_export_bytes", self.export_bytes),
            ("octets of metadata", "max_metadata_bytes", self.metadata_bytes),
        ):
            bound: int = getattr(limits, name)
            if found > bound:
                return f"{found} {what}, more than {name}={bound}"
        return None


def state_budget(state: PersistedState) -> Budget:
    """The budget of ``state`` as a read of it would count it (O(sources + records))."""
    supports = 0
    export = sum(len(chunk) for chunk in encode(state))
    metadata = len(state.store_id.encode()) + len(state.package_version.encode()) + _DIGESTS
    metadata += len(VERSIONS_JSON.encode()) + len((state.policy_json or "").encode())
    metadata += sum(len(group.name.encode()) for group in state.groups)
    for source in state.sources:
        supports += (
            len(source.v4_expires)
            + len(source.v6_expires)
            + len(source.router_keys)
            + len(source.aspas)
        )
        supports += len(source.vrp_duplicates) + len(source.router_key_duplicates)
        supports += len(source.aspa_duplicates)
        supports += sum(len(aspa.providers) for aspa, _ in source.aspas)
        supports += sum(len(aspa.providers) for aspa, _, _ in source.aspa_duplicates)
        metadata += sum(
            len(text.encode()) for text in (source.name, source.group, source.kind, source.location)
        )
        metadata += len((source.metadata_json or "").encode())
    return Budget(
        sources=len(state.sources),
        supports=supports,
        export_bytes=export,
        metadata_bytes=metadata,
    )
