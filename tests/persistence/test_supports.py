"""P-27: a duplicate support is one of its source's entries and ends no later than it.

Checked by the common rule (`persistence.supports`) on every commit (refused before anything is
written), every read (a file whose rows break it is damaged) and every import of an exchange
document, on both backends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from persistence.errors import DamagedStateError
from persistence.exchange import encode
from persistence.exchange_import import decode
from persistence.exchange_values import ExchangeFormatError
from persistence.state import NEVER, SourceRecord, StateId
from persistence.supports import check_supports
from snapshot.model import Aspa, RouterKey, pack_v4
from tests.persistence.helpers import first_commit, opened, raw
from tests.persistence.states import T0, make_state, realistic_sources

pytestmark = pytest.mark.anyio

Change = Callable[[SourceRecord], SourceRecord]


def _key(source: SourceRecord, index: int) -> tuple[RouterKey, int]:
    return source.router_keys[index]


BAD: dict[str, Change] = {
    "vrp-of-another-size": lambda s: replace(s, vrp_duplicates=((6, s.v4[:10], 0),)),
    "vrp-of-no-entry": lambda s: replace(
        s, vrp_duplicates=((4, pack_v4(0xC6336400, 24, 24, 1), T0),)
    ),
    "vrp-outliving-its-entry": lambda s: replace(
        s, vrp_duplicates=((4, s.v4[:10], s.v4_expires[0] + 1),)
    ),
    "router-key-of-no-entry": lambda s: replace(
        s, router_key_duplicates=((RouterKey(b"\x01" * 20, 7, b"\x30"), T0),)
    ),
    "router-key-outliving-its-entry": lambda s: replace(
        s, router_key_duplicates=((_key(s, 0)[0], _key(s, 0)[1] + 1),)
    ),
    "aspa-of-another-afi": lambda s: replace(s, aspa_duplicates=((s.aspas[0][0], 2, T0),)),
    "aspa-of-other-providers": lambda s: replace(
        s, aspa_duplicates=((Aspa(s.aspas[0][0].customer, (1,)), 0, T0),)
    ),
    "aspa-outliving-its-entry": lambda s: replace(
        s, aspa_duplicates=((s.aspas[0][0], 0, s.aspas[0][1] + 1),)
    ),
}


def test_the_fixture_holds_valid_duplicates_of_every_family() -> None:
    http = realistic_sources()[0]
    assert http.vrp_duplicates
    assert http.router_key_duplicates
    assert http.aspa_duplicates
    check_supports(http)  # the rule holds for them: only the changes below break it


@pytest.mark.parametrize("change", sorted(BAD))
def test_a_duplicate_that_is_no_entry_or_outlives_it_is_refused(change: str) -> None:
    http = BAD[change](realistic_sources()[0])  # the record itself can be built
    with pytest.raises(ValueError, match=f"source {http.name}: a duplicate"):
        check_supports(http)


def test_a_duplicate_ending_with_its_entry_is_one() -> None:
    http = realistic_sources()[0]
    same = replace(
        http,
        vrp_duplicates=((4, http.v4[:10], http.v4_expires[0]),),
        aspa_duplicates=((http.aspas[1][0], 0, NEVER),),
    )
    check_supports(same)


@pytest.mark.parametrize("change", ["vrp-outliving-its-entry", "aspa-of-another-afi"])
async def test_a_commit_of_a_bad_duplicate_is_refused_and_writes_nothing(
    kind: str, tmp_path: Path, change: str
) -> None:
    path = tmp_path / "state.db"
    good = await first_commit(kind, path)
    async with opened(kind, path) as backend:
        bad = make_state(good.store_id, StateId(1, 2))
        bad = replace(bad, sources=(BAD[change](bad.sources[0]), *bad.sources[1:]))
        with pytest.raises(ValueError, match="a duplicate"):
            await backend.commit(bad, good.state_id)
        result = await backend.read_state()
    assert result is not None
    assert result[0].state_id == good.state_id


async def test_a_file_whose_duplicate_outlives_its_entry_is_damaged(
    kind: str, tmp_path: Path
) -> None:
    path = tmp_path / "state.db"
    await first_commit(kind, path)
    with raw(kind, path) as db:
        # The VRP supports after the entries are the duplicates: make them never end (one's
        # entry does end).
        (sid,) = db.execute("SELECT source_id FROM sources WHERE name = 'ripe-http'").fetchone()
        db.execute(
            "UPDATE vrps SET expires_at = ? WHERE source_id = ? AND support_id >= ?",
            (NEVER, sid, realistic_sources()[0].vrp_count),
        )
    async with opened(kind, path) as backend:
        with pytest.raises(DamagedStateError, match="a duplicate VRP support ending at"):
            await backend.read_state()


def test_an_exchange_document_with_a_bad_duplicate_is_refused_at_its_source() -> None:
    state = make_state("6f1e2d3c4b5a69788796a5b4c3d2e1f0", StateId(1, 1))
    bad = replace(
        state, sources=(BAD["router-key-of-no-entry"](state.sources[0]), *state.sources[1:])
    )
    with pytest.raises(
        ExchangeFormatError, match=r"\$\.sources\[\d\]: source ripe-http: a duplicate router key"
    ):
        decode(b"".join(encode(bad)))
    back = {s.name: s for s in decode(b"".join(encode(state))).sources}
    assert back["ripe-http"].router_key_duplicates
