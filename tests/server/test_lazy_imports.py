"""Serving starts without the imports only some configurations need: asyncssh (SSH listeners
and SSH sources), cryptography (TLS listeners; about 9 MiB of RSS), prometheus_client and the
HTTP API (``--http``) and the subcommands' modules are loaded when asked for, not at every
start."""

from __future__ import annotations

import subprocess
import sys

LAZY = (
    "asyncssh",
    "cryptography",
    "prometheus_client",
    "rtr_server.http.api",
    "rtr_server.ssh",
    "rtr_server.compare_command",
    "rtr_server.dump_command",
    "rtr_server.gen_cert",
    "rtr_server.state_command",
)


def _loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True, timeout=60
    )
    return set(out.stdout.split())


def test_the_serving_path_imports_none_of_them() -> None:
    loaded = _loaded_after(
        "from rtr_server.cli import main\n"
        "from rtr_server.cli_config import load_process_config\n"
        "from rtr_server.app import App\n"
        "from upstream.router_fetch import fetch\n"
        "from upstream.rtr_source import RtrSource"
    )
    assert not loaded & set(LAZY), loaded & set(LAZY)
    assert "rtr_server.server" in loaded  # the probe did import the serving modules
