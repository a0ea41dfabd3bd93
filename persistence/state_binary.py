"""The binary SHA-256 digests of a persisted state, its sources and their evaluation times.

A deterministic length-prefixed serialisation (integers as 9-byte signed big-endian). The state
digest becomes the exchange payload's SHA-256 (persistence.exchange); the names stay.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Iterable
from typing import TYPE_CHECKING

from persistence.kinds import kinds_to_mask

if TYPE_CHECKING:
    from persistence.state import PersistedState, SourceRecord

__all__ = ["evaluated_digest", "source_digest", "state_digest"]


def state_digest(state: PersistedState) -> bytes:
    """SHA-256 over the canonical serialisation of the state (the state digest)."""
    h = hashlib.sha256(b"rtr-serve state v2\x00")
    _put_str(h, state.store_id)
    for value in (
        state.state_id.epoch,
        state.state_id.generation,
        state.config_revision,
        state.serial,
        *state.session_ids,
        state.published_at,
        len(state.sources),
    ):
        _put_int(h, value)
    _put_str(h, state.package_version)
    for source in sorted(state.sources, key=lambda s: s.name):
        h.update(source_digest(source))
    _state_fields_digest(h, state)
    return h.digest()


def evaluated_digest(sources: Iterable[SourceRecord]) -> bytes:
    """SHA-256 over each source's name and ``evaluated_at``, in the order given (stored order)."""
    h = hashlib.sha256(b"rtr-serve evaluated v1\x00")
    for source in sources:
        _put_str(h, source.name)
        _put_int(h, source.evaluated_at)
    return h.digest()


def _put_int(h: hashlib._Hash, value: int) -> None:
    h.update(value.to_bytes(9, "big", signed=True))


def _put_str(h: hashlib._Hash, value: str) -> None:
    data = value.encode()
    _put_int(h, len(data))
    h.update(data)


def _big_endian(values: array[int]) -> bytes:
    if sys.byteorder == "big":
        return values.tobytes()
    copy = array("q", values)
    copy.byteswap()
    return copy.tobytes()


def _put_opt_str(h: hashlib._Hash, value: str | None) -> None:
    if value is None:
        _put_int(h, -1)
    else:
        _put_str(h, value)


def _put_opt_int(h: hashlib._Hash, value: int | None) -> None:
    h.update(b"\x00" if value is None else b"\x01")
    _put_int(h, 0 if value is None else value)


def _state_fields_digest(h: hashlib._Hash, state: PersistedState) -> None:
    """The schema-2 state fields: groups, active groups, policy, mode, references."""
    h.update(b"state fields\x00")
    _put_int(h, len(state.groups))
    for group in state.groups:
        _put_int(h, group.group_id)
        _put_str(h, group.name)
        _put_int(h, kinds_to_mask(group.kinds))
        _put_int(h, len(group.source_names))
        for name in group.source_names:
            _put_str(h, name)
    _put_int(h, len(state.active_groups))
    for kind, name in sorted(state.active_groups):
        _put_str(h, kind)
        _put_str(h, name)
    for text in (state.policy_id, state.policy_json, state.mode, state.config_store_id):
        _put_opt_str(h, text)
    _put_opt_str(h, state.config_identity)
    _put_opt_int(h, state.reference_time)
    _put_opt_int(h, state.config_epoch)
    upstream = state.upstream
    _put_opt_str(h, None if upstream is None else upstream.store_id)
    _put_opt_int(h, None if upstream is None else upstream.epoch)
    _put_opt_int(h, None if upstream is None else upstream.generation)


def _source_fields_digest(h: hashlib._Hash, source: SourceRecord) -> None:
    """The schema-2 source fields: group, protocol, present, flags, afis, duplicates."""
    h.update(b"source fields\x00")
    for value in (
        source.group_id,
        -1 if source.protocol is None else source.protocol,
        kinds_to_mask(source.present),
        int(source.invalidated),
        source.aspa_families,
    ):
        _put_int(h, value)
    afis = source.aspa_afis or bytes(len(source.aspas))
    _put_int(h, len(afis))
    h.update(afis)
    _put_opt_str(h, source.metadata_json)
    _put_int(h, len(source.vrp_duplicates))
    for family, key, expires in source.vrp_duplicates:
        _put_int(h, family)
        _put_int(h, len(key))
        h.update(key)
        _put_int(h, expires)
    _put_int(h, len(source.router_key_duplicates))
    for router_key, expires in source.router_key_duplicates:
        h.update(router_key.sort_key())
        _put_int(h, len(router_key.spki))
        _put_int(h, expires)
    _put_int(h, len(source.aspa_duplicates))
    for aspa, afi, expires in source.aspa_duplicates:
        _put_int(h, aspa.customer)
        _put_int(h, afi)
        _put_int(h, expires)
        _put_int(h, len(aspa.providers))
        h.update(b"".join(p.to_bytes(4, "big") for p in aspa.providers))


def source_digest(source: SourceRecord) -> bytes:
    h = hashlib.sha256(b"source\x00")
    for text in (source.name, source.group, source.kind, source.location):
        _put_str(h, text)
    if source.identity is not None:  # absent in files of before: their digests stay
        h.update(b"identity\x00")
        _put_str(h, source.identity)
    for value in (
        int(source.complete),
        kinds_to_mask(source.capabilities),
        kinds_to_mask(source.selected),
        source.accepted_at,
        source.expires_at,
        -1 if source.rtr_session is None else source.rtr_session,
        -1 if source.rtr_serial is None else source.rtr_serial,
        -1 if source.generated_at is None else source.generated_at,
    ):
        _put_int(h, value)
    for packed, expiries in ((source.v4, source.v4_expires), (source.v6, source.v6_expires)):
        _put_int(h, len(packed))
        h.update(packed)
        h.update(_big_endian(expiries))
    _put_int(h, len(source.router_keys))
    for key, expires in source.router_keys:
        h.update(key.sort_key())
        _put_int(h, len(key.spki))
        _put_int(h, expires)
    _put_int(h, len(source.aspas))
    for aspa, expires in source.aspas:
        _put_int(h, aspa.customer)
        _put_int(h, expires)
        _put_int(h, len(aspa.providers))
        h.update(b"".join(p.to_bytes(4, "big") for p in aspa.providers))
    _source_fields_digest(h, source)
    return h.digest()
