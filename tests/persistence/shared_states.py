"""States for the shared reader tests: one source whose VRPs and ASPAs expire when told."""

from __future__ import annotations

from array import array

from persistence.state import NEVER, PersistedState, SourceRecord, StateId
from snapshot.model import Aspa, pack_v4

US = 1_000_000


def source(
    now: float, *, asn: int = 64496, vrp_ends: tuple[float, ...] = (), aspa_end: float | None = None
) -> SourceRecord:
    """VRPs 10.n.0.0/16 for ``asn``: one never expiring plus one per ``vrp_ends`` (seconds)."""
    rows = [(pack_v4(0x0A000000, 16, 24, asn), NEVER)]
    rows += [
        (pack_v4(0x0A000000 + ((i + 1) << 16), 16, 16, asn), round(end * US))
        for i, end in enumerate(vrp_ends)
    ]
    rows.sort(reverse=True)
    at = round(now * US)
    return SourceRecord(
        name="main",
        group="primary",
        kind="file",
        location="/tmp/vrps.json",
        complete=True,
        capabilities=frozenset({"vrp", "aspa", "router_key"}),
        selected=frozenset({"vrp", "aspa"}),
        accepted_at=at,
        evaluated_at=at,
        v4=b"".join(k for k, _ in rows),
        v4_expires=array("q", [e for _, e in rows]),
        aspas=((Aspa(asn, (64511,)), NEVER if aspa_end is None else round(aspa_end * US)),),
    )


def state(
    store_id: str,
    state_id: StateId,
    now: float,
    *,
    revision: int = 1,
    asn: int = 64496,
    vrp_ends: tuple[float, ...] = (),
    aspa_end: float | None = None,
) -> PersistedState:
    """A state of one `source` (options as there)."""
    return PersistedState(
        store_id=store_id,
        state_id=state_id,
        config_revision=revision,
        serial=state_id.generation,
        session_ids=(1, 2, 3),
        published_at=round(now * US),
        package_version="0.0.0-test",
        sources=(source(now, asn=asn, vrp_ends=vrp_ends, aspa_end=aspa_end),),
        observed_at=round(now * US),
    )
