"""`Budget`: what one state costs against `Limits`, and the check of lowered limits (P-58).

The same four quantities a read counts in SQL before it builds anything (`persistence.limits`),
computed from a `PersistedState` in memory: sources; supports (VRPs, Router Keys, ASPAs and
their providers); octets of the large fields (VRP networks, SKIs and SPKIs); octets of the
metadata (each source's name, group, kind and location, the header's store id, package
version and its two digests). A budget is immutable: a check keeps the one it observed.
"""

from __future__ import annotations

from dataclasses import dataclass

from persistence.limits import Limits
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
            ("octets of large fields", "max_export_bytes", self.export_bytes),
            ("octets of metadata", "max_metadata_bytes", self.metadata_bytes),
        ):
            bound: int = getattr(limits, name)
            if found > bound:
                return f"{found} {what}, more than {name}={bound}"
        return None


def state_budget(state: PersistedState) -> Budget:
    """The budget of ``state`` as a read of it would count it (O(sources + records))."""
    supports = export = 0
    metadata = len(state.store_id.encode()) + len(state.package_version.encode()) + _DIGESTS
    for source in state.sources:
        v4, v6 = len(source.v4_expires), len(source.v6_expires)
        supports += v4 + v6 + len(source.router_keys) + len(source.aspas)
        supports += sum(len(aspa.providers) for aspa, _ in source.aspas)
        export += 4 * v4 + 16 * v6
        export += sum(len(key.ski) + len(key.spki) for key, _ in source.router_keys)
        metadata += sum(
            len(text.encode()) for text in (source.name, source.group, source.kind, source.location)
        )
    return Budget(
        sources=len(state.sources),
        supports=supports,
        export_bytes=export,
        metadata_bytes=metadata,
    )
