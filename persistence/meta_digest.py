"""The header's digests: ``meta_digest`` (the contract's) and our ``publication_digest``.

``meta_digest`` is the SHA-256 of the canonical JSON array of the ``store_meta`` fields in
their order except itself (`persistence.schema.STORE_META_FIELDS`): separators ``,``/``:``,
``ensure_ascii=False``, NULL as ``null``, digests as lowercase hex. It covers ``written_at``,
the state digest and the whole header identity. ``publication_digest`` is the same over the
``meta_digest`` and then our ``publication`` row (serial, session ids, stored times, the state a
recovery started from, the policy's JSON), so the two rows are verified as one chain.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

from persistence.schema import SCHEMA_VERSION, VERSIONS_JSON
from persistence.state import PersistedState, StateHeader
from persistence.state_binary import evaluated_digest

__all__ = ["canonical_digest", "meta_digest", "meta_values", "publication_digest", "sealed"]


def canonical_digest(values: list[object]) -> bytes:
    """SHA-256 of ``values`` as a canonical JSON array (bytes as lowercase hex)."""
    plain = [v.hex() if isinstance(v, bytes) else v for v in values]
    text = json.dumps(plain, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode()).digest()


def meta_values(header: StateHeader) -> list[object]:
    """The ``store_meta`` fields of ``header`` in their order, ``meta_digest`` left out."""
    upstream = header.upstream
    return [
        header.schema_version,
        header.store_id,
        header.state_id.epoch,
        header.state_id.generation,
        header.config_store_id,
        header.config_epoch,
        header.config_revision,
        header.published_at,
        header.written_at,
        header.mode,
        header.reference_time,
        None if upstream is None else upstream.store_id,
        None if upstream is None else upstream.epoch,
        None if upstream is None else upstream.generation,
        header.policy_id,
        header.versions_json,
        header.package_version,
        header.config_identity,
        header.state_digest,
    ]


def meta_digest(header: StateHeader) -> bytes:
    """What ``header.meta_digest`` must equal."""
    return canonical_digest(meta_values(header))


def publication_values(header: StateHeader) -> list[object]:
    """The ``publication`` fields of ``header`` (without their digest), after ``meta_digest``."""
    recovered = header.recovered_from
    return [
        header.meta_digest,
        header.serial,
        *header.session_ids,
        header.observed_at,
        header.evaluated_digest,
        None if recovered is None else recovered.epoch,
        None if recovered is None else recovered.generation,
        header.policy_json,
    ]


def publication_digest(header: StateHeader) -> bytes:
    """What ``header.publication_digest`` must equal."""
    return canonical_digest(publication_values(header))


def sealed(state: PersistedState, digest: bytes, written_at: int) -> StateHeader:
    """The header of a commit of ``state`` at ``written_at``, both digests computed."""
    header = StateHeader(
        schema_version=SCHEMA_VERSION,
        store_id=state.store_id,
        state_id=state.state_id,
        config_revision=state.config_revision,
        serial=state.serial,
        session_ids=state.session_ids,
        published_at=state.published_at,
        written_at=written_at,
        state_digest=digest,
        meta_digest=b"",
        package_version=state.package_version,
        observed_at=state.observed_at,
        evaluated_digest=evaluated_digest(state.sources),
        recovered_from=state.recovered_from,
        config_store_id=state.config_store_id,
        config_epoch=state.config_epoch,
        mode=state.mode,
        reference_time=state.reference_time,
        upstream=state.upstream,
        policy_id=state.policy_id,
        versions_json=VERSIONS_JSON,
        config_identity=state.config_identity,
        policy_json=state.policy_json,
    )
    header = replace(header, meta_digest=meta_digest(header))
    return replace(header, publication_digest=publication_digest(header))
