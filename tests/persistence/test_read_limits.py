"""P-32 on real files: a read counts sources, supports, large-field and metadata octets first."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from persistence import LimitExceededError, Limits, PersistenceError
from persistence.exchange import encode
from persistence.schema import VERSIONS_JSON
from persistence.state import PersistedState, StateId
from tests.persistence.helpers import KINDS, make, opened
from tests.persistence.states import assert_same_state, make_state

pytestmark = pytest.mark.anyio


def measures(state: PersistedState) -> dict[str, int]:
    """What the read counts, computed from the state itself (duplicate supports included)."""
    supports = octets = 0
    # Metadata in UTF-8 octets (not characters): the texts of each source, of the groups and of
    # the header (versions and the policy's JSON), and the header's two 32-octet digests.
    metadata = len(state.store_id.encode()) + len(state.package_version.encode()) + 2 * 32
    metadata += len(VERSIONS_JSON.encode()) + len((state.policy_json or "").encode())
    metadata += sum(len(g.name.encode()) for g in state.groups)
    for s in state.sources:
        metadata += sum(len(text.encode()) for text in (s.name, s.group, s.kind, s.location))
        metadata += len((s.metadata_json or "").encode())
        keys = (*s.router_keys, *s.router_key_duplicates)
        aspas = [aspa for aspa, _ in s.aspas] + [aspa for aspa, _, _ in s.aspa_duplicates]
        supports += s.vrp_count + len(s.vrp_duplicates) + len(keys) + len(aspas)
        supports += sum(len(aspa.providers) for aspa in aspas)
        octets += 4 * len(s.v4_expires) + 16 * len(s.v6_expires)
        octets += sum(4 if family == 4 else 16 for family, _, _ in s.vrp_duplicates)
        octets += sum(len(key.ski) + len(key.spki) for key, _ in keys)
    return {
        "max_sources": len(state.sources),
        "max_supports": supports,
        # The digest streams the exchange document under this bound; the SQL count of the
        # large fields (`octets`) is an earlier, never larger, check.
        "max_export_bytes": max(octets, len(b"".join(encode(state)))),
        "max_metadata_bytes": metadata,
    }


def limited_state(store_id: str) -> PersistedState:
    """The realistic state, one source's location and a group's name beyond ASCII."""
    state = make_state(store_id, StateId(1, 1))
    http, rtr, empty = state.sources
    http = replace(http, location="https://rpki.例え.jp/vrps.json", group="größe")
    return replace(
        state,
        sources=(http, replace(rtr, group="größe"), empty),
        groups=(replace(state.groups[0], name="größe"), *state.groups[1:]),
        active_groups=tuple((kind, "größe") for kind, _ in state.active_groups),
    )


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "bound", ["max_sources", "max_supports", "max_export_bytes", "max_metadata_bytes"]
)
async def test_a_read_over_a_bound_is_refused_and_at_the_bound_it_reads(
    tmp_path: Path, kind: str, bound: str
) -> None:
    path = tmp_path / f"state.{kind}"
    async with opened(kind, path) as backend:
        assert backend.store_id is not None
        state = limited_state(backend.store_id)
        await backend.commit(state, None)
    exact = measures(state)[bound]
    assert exact > 0
    at = replace(Limits(), **{bound: exact})
    reader = make(kind, path, limits=at)
    await reader.open()
    try:
        result = await reader.read_state()
        assert result is not None
        assert_same_state(result[1], state)
    finally:
        assert await reader.close()
    over = make(kind, path, limits=replace(Limits(), **{bound: exact - 1}))
    await over.open()
    try:
        with pytest.raises(LimitExceededError, match=bound) as caught:
            await over.read_state()
        assert isinstance(caught.value, PersistenceError)
        assert not caught.value.retryable
        assert await over.read_header() is not None  # the file is left as it is
    finally:
        assert await over.close()
