"""The rule of duplicate supports (P-27), checked on every commit, read and import of a state.

A source record holds each payload once (a VRP or router key with the latest expiry of its
supports, an ASPA record per afi) and its further supports as duplicates. A duplicate support
is one of its own source's entries — same family and key (VRPs), same key (router keys), same
customer, providers and afi (ASPAs) — and ends no later than that entry: the entry's expiry is
the latest of its supports. A state breaking this is refused (`ValueError`).

Only the records that hold duplicates are looked at, so a state without any (the real table:
rpki-client removes them) costs nothing here.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TypeVar

from persistence.state import PersistedState, SourceRecord
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE, split_keys

__all__ = ["check_state_supports", "check_supports", "supported"]

_WIDTH = {4: V4_KEY_SIZE, 6: V6_KEY_SIZE}
K = TypeVar("K", bound=Hashable)


def check_state_supports(state: PersistedState) -> None:
    """`check_supports` for every source of ``state``."""
    for source in state.sources:
        check_supports(source)


def supported(source: SourceRecord) -> SourceRecord:
    """``source`` itself once `check_supports` passed."""
    check_supports(source)
    return source


def check_supports(source: SourceRecord) -> None:
    """``ValueError`` unless every duplicate support of ``source`` is one of its entries' own."""
    name = source.name
    if source.vrp_duplicates:
        entries: dict[int, dict[bytes, int]] = {}
        for family, key, expires in source.vrp_duplicates:
            width = _WIDTH.get(family)
            if width is None or len(key) != width:
                raise ValueError(f"source {name}: a duplicate VRP of another family or size")
            if family not in entries:
                packed, ends = (
                    (source.v4, source.v4_expires)
                    if family == 4
                    else (source.v6, source.v6_expires)
                )
                entries[family] = dict(zip(split_keys(packed, width), ends, strict=True))
            _check(name, "VRP", entries[family].get(key), expires)
    if source.router_key_duplicates:
        keys = _latest((k, e) for k, e in source.router_keys)
        for router_key, expires in source.router_key_duplicates:
            _check(name, "router key", keys.get(router_key), expires)
    if source.aspa_duplicates:
        aspas = _latest(
            ((aspa, source.afi_of(i)), expires) for i, (aspa, expires) in enumerate(source.aspas)
        )
        for aspa, afi, expires in source.aspa_duplicates:
            _check(name, f"ASPA (afi {afi})", aspas.get((aspa, afi)), expires)


def _latest(pairs: Iterable[tuple[K, int]]) -> dict[K, int]:
    out: dict[K, int] = {}
    for key, expires in pairs:
        if expires > out.get(key, expires - 1):
            out[key] = expires
    return out


def _check(name: str, what: str, entry_expires: int | None, expires: int) -> None:
    if entry_expires is None:
        raise ValueError(f"source {name}: a duplicate {what} support of no entry of the source")
    if expires > entry_expires:
        raise ValueError(
            f"source {name}: a duplicate {what} support ending at {expires}, after its entry "
            f"({entry_expires}): the entry holds the latest end of its supports"
        )
