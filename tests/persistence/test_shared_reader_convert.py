"""Property test of the shared reader's pure judgement of a persisted state at a time."""

from __future__ import annotations

from array import array

from hypothesis import given
from hypothesis import strategies as st

from persistence.shared.convert import judge_state
from persistence.state import NEVER, PersistedState, SourceRecord, StateId
from snapshot.kinds import PayloadKind
from snapshot.model import Aspa, pack_v4
from snapshot.packed import V4_KEY_SIZE, split_keys

US = 1_000_000
#: Expiries and times within a few seconds of each other, plus "never".
TIMES = st.one_of(st.integers(0, 10).map(lambda s: s * US), st.just(NEVER))


def _source(
    name: str, rows: list[tuple[int, int]], aspa: int, cap: int, kinds: set[str]
) -> SourceRecord:
    keyed = sorted(
        {pack_v4(0x0A000000 + (n << 8), 24, 24, 64496): e for n, e in rows}.items(), reverse=True
    )
    return SourceRecord(
        name=name,
        group="g",
        kind="file",
        location=name,
        complete=True,
        capabilities=frozenset({"vrp", "aspa"}),
        selected=frozenset(kinds),
        accepted_at=0,
        expires_at=cap,
        v4=b"".join(k for k, _ in keyed),
        v4_expires=array("q", [e for _, e in keyed]),
        aspas=((Aspa(64500 + int(name[1:]), (1,)), aspa),),
    )


SOURCES = st.lists(
    st.tuples(
        st.lists(st.tuples(st.integers(0, 20), TIMES), max_size=6),
        TIMES,
        TIMES,
        st.sets(st.sampled_from(["vrp", "aspa"])),
    ),
    max_size=3,
)


@given(SOURCES, st.integers(0, 11))
def test_judge_keeps_exactly_the_live_entries(
    sources: list[tuple[list[tuple[int, int]], int, int, set[str]]], now: int
) -> None:
    records = tuple(_source(f"s{i}", *spec) for i, spec in enumerate(sources))
    state = PersistedState("store", StateId(1, 1), 1, 1, (1, 2, 3), 0, "t", records)
    snapshot, until = judge_state(state, now)
    live_vrps: dict[bytes, int] = {}
    live_aspas: list[int] = []
    for record in records:
        for i, expiry in enumerate(record.v4_expires):
            end = min(expiry, record.expires_at)
            if "vrp" in record.selected and end > now * US:
                key = record.v4[i * V4_KEY_SIZE : (i + 1) * V4_KEY_SIZE]
                live_vrps[key] = min(live_vrps.get(key, NEVER), end)
        for _, expiry in record.aspas:
            end = min(expiry, record.expires_at)
            if "aspa" in record.selected and end > now * US:
                live_aspas.append(end)
    assert set(split_keys(snapshot.v4, V4_KEY_SIZE)) == set(live_vrps)
    assert len(snapshot.aspas) == len(live_aspas)
    want_vrp = min(live_vrps.values(), default=NEVER)
    want_aspa = min(live_aspas, default=NEVER)
    assert until[PayloadKind.VRP] == (None if want_vrp >= NEVER else want_vrp / US)
    assert until[PayloadKind.ASPA] == (None if want_aspa >= NEVER else want_aspa / US)
    assert until[PayloadKind.ROUTER_KEY] is None
    for limit in until.values():  # nothing kept is past its kind's limit at ``now``
        assert limit is None or limit > now
