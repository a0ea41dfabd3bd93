"""Deployment files and the manual: the systemd unit is hardened, parses (systemd-analyze
verify where installed) and runs valid rtr-serve command lines; the example configurations pass
check-config; ``--help`` reads like a manual page (defaults, signals, exit status, examples)."""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from rtr_server.cli_args import build_check_config_parser, build_parser
from rtr_server.cli_config import check_config
from tests.server.test_cli import RTR_SERVE, run_cli

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "contrib" / "systemd" / "rtr-serve.service"
CONFIG = ROOT / "contrib" / "rtr-serve.toml"
LAB_CONFIG = ROOT / "examples" / "rtr-serve.toml"
INSTALLED = "/opt/rtr-serve/bin/rtr-serve"

Unit = dict[str, dict[str, list[str]]]


def parse_unit(text: str) -> Unit:
    """Sections -> key -> every value given (systemd keys may repeat)."""
    unit: Unit = {}
    section: dict[str, list[str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = unit.setdefault(line[1:-1], {})
            continue
        assert section is not None, f"key outside a section: {line!r}"
        key, sep, value = line.partition("=")
        assert sep, f"not KEY=VALUE: {line!r}"
        section.setdefault(key.strip(), []).append(value.strip())
    return unit


@pytest.fixture(scope="module")
def service() -> dict[str, list[str]]:
    unit = parse_unit(UNIT.read_text())
    assert set(unit) == {"Unit", "Service", "Install"}
    return unit["Service"]


def one(service: dict[str, list[str]], key: str) -> str:
    (value,) = service[key]
    return value


def test_unit_is_hardened(service: dict[str, list[str]]) -> None:
    for key, value in {
        "DynamicUser": "yes",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "StateDirectory": "rtr-serve",
        # Port 323 and nothing else.
        "AmbientCapabilities": "CAP_NET_BIND_SERVICE",
        "CapabilityBoundingSet": "CAP_NET_BIND_SERVICE",
        "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
    }.items():
        assert one(service, key) == value, key
    assert "@system-service" in service["SystemCallFilter"]
    read_only = one(service, "ReadOnlyPaths").split()
    assert "-/var/db/rpki-client" in read_only
    assert "User" not in service  # DynamicUser makes one
    assert "ReadWritePaths" not in service  # only the state directory is writable


def test_unit_runs_valid_command_lines(service: dict[str, list[str]]) -> None:
    start = shlex.split(one(service, "ExecStart"))
    assert start[0] == INSTALLED
    args = build_parser().parse_args(start[1:])  # options rtr-serve knows (exit 2 otherwise)
    assert args.config == Path("/etc/rtr-serve/rtr-serve.toml")
    check, hup = (shlex.split(v) for v in service["ExecReload"])
    # `systemctl reload` validates the same file first, then sends SIGHUP.
    assert check[:2] == [INSTALLED, "check-config"]
    assert build_check_config_parser().parse_args(check[2:]).file == args.config
    assert hup == ["/bin/kill", "-HUP", "$MAINPID"]
    assert one(service, "RestartPreventExitStatus") == "2"  # a bad configuration
    assert one(service, "KillSignal") == "SIGTERM"


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (make test-deps installs it)")
    # verify also checks that the commands exist: point them at this installation.
    unit = tmp_path / "rtr-serve.service"
    unit.write_text(UNIT.read_text().replace(INSTALLED, RTR_SERVE))
    done = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    # Unknown keys and bad values are only warnings: any output is a failure.
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr
    assert done.stdout.strip() == "", done.stdout


def test_systemd_analyze_would_see_a_bad_key(tmp_path: Path) -> None:
    """The verify test can fail: a misspelt key is reported."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (make test-deps installs it)")
    unit = tmp_path / "rtr-serve.service"
    text = UNIT.read_text().replace(INSTALLED, RTR_SERVE)
    unit.write_text(text.replace("ProtectHome=yes", "ProtectHomes=yes"))
    done = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    assert "ProtectHomes" in done.stderr


@pytest.mark.parametrize("path", [CONFIG, LAB_CONFIG], ids=["contrib", "examples"])
def test_example_configurations_are_valid(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_config(path) == 0
    out = capsys.readouterr().out
    assert f"{path}: valid" in out
    if path == CONFIG:
        assert "listen: [::]:323, 0.0.0.0:323" in out
        assert "source rpki-client: /var/db/rpki-client/json" in out


def test_help_reads_like_a_manual_page() -> None:
    parser = build_parser()
    text = parser.format_help()
    for heading in (
        "sources:",
        "RTR service:",
        "limits:",
        "process:",
        "subcommands:",
        "signals:",
        "logging:",
        "exit status:",
        "examples:",
    ):
        assert f"\n{heading}\n" in text, heading
    assert "SIGHUP" in text
    assert "--log-format {text,json}" in text
    # Every option that has a default says which (and so its unit, where it has one).
    for action in parser.options.values():
        if action.default in (None, False, [], argparse.SUPPRESS) or not action.option_strings:
            continue
        assert action.help is not None
        assert "default" in action.help, action.option_strings
    check = build_check_config_parser().format_help()
    assert "\nexit status:\n" in check
    assert "\nexamples:\n" in check


def test_help_and_subcommand_help_exit_0() -> None:
    for args in (["--help"], ["check-config", "--help"]):
        done = run_cli(*args)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("usage: rtr-serve")
        assert "exit status:" in done.stdout
    done = run_cli("check-config")
    assert done.returncode == 2
    assert "FILE" in done.stderr
