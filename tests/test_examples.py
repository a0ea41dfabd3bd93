"""The runnable examples in ``examples/`` run to their end on their own and say what they did."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_shared_reader_example_follows_an_owner_in_another_process() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "shared_reader.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("reader: state ")
    assert lines[0].endswith(": 26 VRPs")
    assert lines[1] == "reader: 192.0.2.0/24 from AS64496 is valid"
    assert lines[2].startswith("reader: changed ")
    assert lines[2].endswith(": +0 -1")
    assert lines[3] == "reader: 192.0.2.0/24 from AS64496 is now not-found"
    assert lines[4] == "owner: exit status 0"


def test_embed_client_example_persists_and_recovers_without_its_source() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "embed_client.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "client: 26 VRPs; 192.0.2.0/24 AS64496 valid"
    assert lines[1] == "client: state 1.1 committed"
    assert lines[2] == "client: data change: +0 -1 VRPs; 192.0.2.0/24 AS64496 is now not-found"
    assert lines[3].startswith("client: shutdown: state 1.2 (serial 2, 25 VRPs) persisted in ")
    assert lines[4] == "recovered: 25 VRPs without the export; 192.0.2.0/24 AS64496 not-found"
