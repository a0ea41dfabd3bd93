"""The library's public surfaces: `upstream` and `persistence` export what an application uses."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

EXPECTED = {
    "upstream": {
        "Client",
        "ClientConfig",
        "SourceConfig",
        "GroupConfig",
        "SnapshotEvent",
        "StatusEvent",
        "ResyncRequiredError",
        "ClientSnapshot",
        "PayloadKind",
        "SourceSetupError",
        "Publication",
        "ShutdownReport",
    },
    "persistence": {
        "PersistenceBackend",
        "SQLiteBackend",
        "DuckDBBackend",
        "PersistenceError",
        "MissingExtraError",
        "PersistReceipt",
        "BackendCapabilities",
        "Limits",
        "LimitExceededError",
    },
}


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_every_exported_name_exists_and_the_core_ones_are_exported(package: str) -> None:
    module = importlib.import_module(package)
    exported = set(module.__all__)
    assert EXPECTED[package] <= exported
    for name in exported:
        assert getattr(module, name) is not None, name


def test_importing_the_library_halves_pulls_in_neither_the_server_nor_duckdb() -> None:
    script = (
        "import sys\n"
        "sys.modules['duckdb'] = None\n"
        "import upstream, persistence\n"
        "assert not [m for m in sys.modules if m == 'rtr_server' or m.startswith('rtr_server.')]\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, check=False, timeout=60
    )
    assert done.stdout.decode().strip() == "ok", done.stderr.decode()
