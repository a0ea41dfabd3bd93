"""The exchange bytes and stored digests agree across real CPython 3.11-3.14 interpreters.

Each other CPython found on this machine (3.11 to 3.14, not the one running the tests) runs
a child that writes the documents of a few states (IPv4-mapped IPv6 prefixes among them:
CPython 3.13 changed `ipaddress`'s text of those) and commits one into a SQLite file; this
interpreter checks the bytes, reads that file and commits its own for the child to read.
The children get this environment's pure-Python dependencies on their path. Skipped when no
other interpreter is installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from persistence.backend import ThreadedBackend
from persistence.exchange import encode, state_digest
from persistence.sqlite_backend import SQLiteBackend
from tests.persistence.test_exchange_spec import example_states, storable_state

ROOT = Path(__file__).resolve().parents[2]
SITE = [p for p in sys.path if p.endswith("site-packages")]

CHILD = """
import hashlib, json, sys
import anyio
from persistence.exchange import encode, state_digest
from persistence.backend import ThreadedBackend
from persistence.sqlite_backend import SQLiteBackend
from tests.persistence.test_exchange_spec import example_states, storable_state

async def main(write, read):
    result = {"documents": [hashlib.sha256(b"".join(encode(s))).hexdigest()
                            for s in example_states()]}
    backend = ThreadedBackend(SQLiteBackend(write))
    await backend.open()
    receipt = await backend.commit(storable_state(backend.store_id), None)
    await backend.close()
    result["receipt"] = receipt.state_digest.hex()
    result["store_id"] = backend.store_id
    if read:
        reader = ThreadedBackend(SQLiteBackend(read, read_only=True))
        await reader.open()
        header, state = await reader.read_state()
        await reader.close()
        result["read"] = [header.state_digest.hex(), state_digest(state).hex(),
                          b"".join(encode(state)).hex()]
    print(json.dumps(result))

anyio.run(main, sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")
"""


def other_interpreters() -> list[str]:
    """Paths of CPython 3.11-3.14 interpreters other than the running one."""
    candidates = {shutil.which(f"python3.{minor}") for minor in range(11, 15)}
    candidates.update(
        map(str, Path("~/.pyenv/versions").expanduser().glob("3.1[1-4]*/bin/python3"))
    )
    found: dict[str, str] = {}
    for path in sorted(p for p in candidates if p):
        try:
            version = subprocess.run(
                [path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
        if version != "{}.{}".format(*sys.version_info[:2]) and version in {
            "3.11",
            "3.12",
            "3.13",
            "3.14",
        }:
            found.setdefault(version, path)
    return [found[v] for v in sorted(found)]


INTERPRETERS = other_interpreters()


async def commit_here(path: Path) -> bytes:
    backend = ThreadedBackend(SQLiteBackend(path))
    await backend.open()
    assert backend.store_id is not None
    receipt = await backend.commit(storable_state(backend.store_id), None)
    await backend.close()
    return receipt.state_digest


async def store_id_of(path: Path) -> str:
    reader = ThreadedBackend(SQLiteBackend(path, read_only=True))
    await reader.open()
    store_id = reader.store_id
    await reader.close()
    assert store_id is not None
    return store_id


async def read_here(path: Path) -> tuple[bytes, bytes, bytes]:
    reader = ThreadedBackend(SQLiteBackend(path, read_only=True))
    await reader.open()
    stored = await reader.read_state()
    await reader.close()
    assert stored is not None
    header, state = stored
    return header.state_digest, state_digest(state), b"".join(encode(state))


@pytest.mark.skipif(not INTERPRETERS, reason="no other CPython 3.11-3.14 is installed")
@pytest.mark.parametrize("python", INTERPRETERS)
def test_documents_and_stored_digests_agree_across_interpreters(
    python: str, tmp_path: Path
) -> None:
    ours = tmp_path / "ours.sqlite"
    our_receipt = anyio.run(commit_here, ours)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *SITE])}
    theirs = tmp_path / "theirs.sqlite"
    child = subprocess.run(
        [python, "-c", CHILD, str(theirs), str(ours)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=ROOT,
    )
    assert child.returncode == 0, child.stderr
    result = json.loads(child.stdout)
    assert result["documents"] == [
        hashlib.sha256(b"".join(encode(s))).hexdigest() for s in example_states()
    ]
    # The same state gives the same receipt digest there as here.
    assert result["receipt"] == state_digest(storable_state(result["store_id"])).hex()
    # It reads our file to the same digests and the same exchange bytes, and we read its file.
    ours_doc = b"".join(encode(storable_state(anyio.run(store_id_of, ours))))
    assert result["read"] == [our_receipt.hex(), our_receipt.hex(), ours_doc.hex()]
    assert b'"::ffff:192.0.2.0/120"' in ours_doc
    stored, computed, theirs_doc = anyio.run(read_here, theirs)
    assert stored.hex() == result["receipt"] == computed.hex()
    assert theirs_doc == b"".join(encode(storable_state(result["store_id"])))
