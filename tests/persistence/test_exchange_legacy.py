"""A state file whose digest used the hexadecimal spelling of IPv4-mapped prefixes is corrupt.

Contract P-39: a development database whose state digest was computed over the legacy spelling
(``::ffff:c000:200/120``) keeps being refused as corrupt, with every other check intact; its
receipt is not rewritten and the file stays as it was. Such a digest is forged here: the state's
version-2 document with the mapped prefixes spelled the old way, hashed, stored as the state
digest and sealed with correct header digests, so only the state digest can tell.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from persistence.errors import CorruptStateError
from persistence.exchange import encode, state_digest
from persistence.meta_digest import meta_digest, publication_digest
from tests.persistence.helpers import make, opened, raw
from tests.persistence.test_exchange_spec import storable_state

pytestmark = pytest.mark.anyio

#: The mapped prefixes of `storable_state`, in our spelling and in the legacy one.
SPELLINGS = {
    b'"::ffff:192.0.2.0/120"': b'"::ffff:c000:200/120"',
    b'"::ffff:0.0.0.0/96"': b'"::ffff:0:0/96"',
}


def legacy_digest(document: bytes) -> bytes:
    for ours, legacy in SPELLINGS.items():
        assert ours in document
        document = document.replace(ours, legacy)
    return hashlib.sha256(document).digest()


async def test_a_digest_over_the_legacy_spelling_is_corrupt(kind: str, tmp_path: Path) -> None:
    path = tmp_path / f"state.{kind}"
    async with opened(kind, path) as backend:
        assert backend.store_id is not None
        state = storable_state(backend.store_id)
        receipt = await backend.commit(state, None)
        header = await backend.read_header()
    assert header is not None
    old = legacy_digest(b"".join(encode(state)))
    assert old != receipt.state_digest == state_digest(state)
    forged = replace(header, state_digest=old)
    forged = replace(forged, meta_digest=meta_digest(forged))
    forged = replace(forged, publication_digest=publication_digest(forged))
    with raw(kind, path) as db:
        db.execute(
            "UPDATE store_meta SET state_digest = ?, meta_digest = ?",
            (forged.state_digest, forged.meta_digest),
        )
        db.execute("UPDATE publication SET publication_digest = ?", (forged.publication_digest,))
    before = await anyio.Path(path).read_bytes()
    # The header itself is well formed: only the state digest can tell.
    async with opened(kind, path) as backend:
        assert await backend.read_header() == forged
        with pytest.raises(CorruptStateError, match="state digest") as caught:
            await backend.read_state()
        assert caught.value.code == "persistence_corrupt"
    # Reading rewrote nothing (no receipt or digest made to fit), and a new open refuses it too.
    assert await anyio.Path(path).read_bytes() == before
    backend = make(kind, path)
    await backend.open()
    try:
        with pytest.raises(CorruptStateError):
            await backend.read_state()
    finally:
        assert await backend.close()
