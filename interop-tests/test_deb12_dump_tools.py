"""``rtr-serve dump`` and StayRTR's ``rtrdump`` read the same rtr-serve: the same answers.

Black box: rtr-serve runs as a process, ``rtr-serve dump`` is run as a command, and rtrdump
(stayrtr 0.5.1, Debian 12) is the independent router-side reading. Version 0 and 1 full
tables (router keys at v1 only), and one Serial Query from serial 0 after an update.
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rtrclients.rtrdump import dump
from rtrclients.vrps import RouterKey, Vrp, router_key, vrp_from_prefix
from rtrserve import RTR_SERVE, RtrServe, start_rtr_serve, write_export

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]

HOST = "127.0.0.1"
SKI = "0102030405060708090a0b0c0d0e0f1011121314"
SPKI = base64.b64encode(bytes(range(91))).decode()
ROAS = [(f"10.{i}.0.0/16", 24, 64496 + i % 7) for i in range(40)] + [
    (f"2001:db8:{i:x}::/48", 48, 65000 + i) for i in range(20)
]
UPDATED = [*ROAS[5:], ("192.0.2.0/24", 24, 64511), ("2001:db8:ffff::/48", 64, 64512)]


def ours(port: int, *args: str) -> dict[str, Any]:
    """Run ``rtr-serve dump`` against 127.0.0.1:port; its JSON output."""
    done = subprocess.run(
        [str(RTR_SERVE), "dump", f"rtr://{HOST}:{port}", *args],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def vrps_of(entries: list[dict[str, Any]]) -> set[Vrp]:
    return {vrp_from_prefix(r["prefix"], r["maxLength"], r["asn"]) for r in entries}


def keys_of(doc: dict[str, Any]) -> set[RouterKey]:
    return {
        router_key(k["asn"], k["ski"], base64.b64decode(k["pubkey"])) for k in doc["bgpsec_keys"]
    }


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, RtrServe]]:
    source = tmp_path / "export.json"
    write_export(source, ROAS, router_keys=[(64496, SKI, SPKI)], aspas=[(64500, [64501])])
    with start_rtr_serve(source, tmp_path / "run") as server:
        server.wait_log("published serial 0", 30)
        yield source, server


@pytest.mark.parametrize("version", [0, 1])
def test_full_tables_agree(served: tuple[Path, RtrServe], tmp_path: Path, version: int) -> None:
    port = served[1].port
    theirs = dump(tmp_path, HOST, port, version, timeout=60)
    mine = ours(port, "--version", str(version))
    meta = mine["metadata"]
    assert (meta["version"], meta["session_id"], meta["serial"]) == (
        theirs.version,
        theirs.session_id,
        theirs.serial,
    )
    assert vrps_of(mine["roas"]) == theirs.vrps
    assert len(theirs.vrps) == len(ROAS)
    assert keys_of(mine) == theirs.router_keys
    assert len(theirs.router_keys) == (1 if version else 0)
    assert mine["aspas"] == []  # ASPA needs v2


def test_serial_query_answers_agree(served: tuple[Path, RtrServe], tmp_path: Path) -> None:
    source, server = served
    port = server.port
    session = ours(port, "--version", "1")["metadata"]["session_id"]
    write_export(source, UPDATED, router_keys=[(64496, SKI, SPKI)], aspas=[(64500, [64501])])
    server.wait_log("published serial 1", 30)
    theirs = dump(tmp_path, HOST, port, 1, serial=(session, 0), timeout=60)
    mine = ours(port, "--version", "1", "--serial-query", f"{session}:0")
    assert mine["metadata"]["serial"] == theirs.serial == 1
    assert vrps_of(mine["announced"]["roas"]) == theirs.vrps
    assert vrps_of(mine["withdrawn"]["roas"]) == theirs.withdrawn
    assert len(theirs.vrps) == 2
    assert len(theirs.withdrawn) == 5
