"""``--http`` and its config keys, and a real ``rtr-serve`` run scraped over HTTP."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from rtr_server.app_config import AppConfig
from rtr_server.cli_args import build_parser
from rtr_server.cli_config import apply_config_file, config_from_args
from rtr_server.http.settings import DEFAULT_STALE_AFTER, HttpSettings
from tests.server.helpers import base_export, write_export
from tests.server.test_cli import DEADLINE, RTR_SERVE, run_cli

CONFIG = """
[server]
listen = ["127.0.0.1:8323"]
http = "127.0.0.1:8080"
metrics_router_lag = true
health_stale_after = 120
[[sources]]
url = "/var/lib/rpki-client/json"
"""


def parse(*argv: str) -> AppConfig:
    parser = build_parser()
    args = parser.parse_args(list(argv))
    apply_config_file(parser, args, list(argv))
    return config_from_args(args)


def http_of(*argv: str) -> HttpSettings:
    http = parse(*argv).http
    assert http is not None
    return http


def test_http_is_off_by_default() -> None:
    assert parse("--source", "x.json").http is None


def test_http_flags() -> None:
    http = http_of(
        "--source", "x.json", "--http", "[::1]:8080", "--metrics-router-lag",
        "--health-stale-after", "90",
    )  # fmt: skip
    assert (http.listen.host, http.listen.port) == ("::1", 8080)
    assert http.router_lag is True
    assert http.stale_after == 90
    default = http_of("--source", "x.json", "--http", "127.0.0.1:8080")
    assert default.router_lag is False
    assert default.stale_after == DEFAULT_STALE_AFTER


def test_config_file_keys(tmp_path: Path) -> None:
    path = tmp_path / "rtr.toml"
    path.write_text(CONFIG)
    http = http_of("--config", str(path))
    assert (http.listen.host, http.listen.port) == ("127.0.0.1", 8080)
    assert http.router_lag is True
    assert http.stale_after == 120
    # The command line overrides the file.
    http = http_of("--config", str(path), "--http", "127.0.0.1:9090")
    assert http.listen.port == 9090
    result = run_cli("check-config", str(path))
    assert result.returncode == 0, result.stderr
    assert "  http: 127.0.0.1:8080\n" in result.stdout


@pytest.mark.parametrize(
    ("args", "mentions"),
    [
        (["--http", ":8080"], "no host"),
        (["--http", "localhost"], "HOST:PORT"),
        (["--metrics-router-lag"], "needs --http"),
        (["--http", "127.0.0.1:8080", "--health-stale-after", "0"], "health-stale-after"),
    ],
)
def test_bad_http_arguments_exit_2(args: list[str], mentions: str, tmp_path: Path) -> None:
    result = run_cli("--source", str(tmp_path / "x.json"), *args)
    assert result.returncode == 2, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert mentions in lines[0]


@pytest.mark.parametrize(
    ("line", "mentions"),
    [
        ('metrics_router_lag = "yes"', "server.metrics_router_lag: must be bool"),
        ("http = 8080", "server.http: must be str"),
        ('http = ":8080"', "no host"),
    ],
)
def test_bad_config_keys(tmp_path: Path, line: str, mentions: str) -> None:
    path = tmp_path / "rtr.toml"
    path.write_text(f'[server]\n{line}\n[[sources]]\nurl = "x.json"\n')
    result = run_cli("check-config", str(path))
    assert result.returncode == 2, result
    assert mentions in result.stderr
    assert result.stderr.startswith(f"rtr-serve: {path}")


def test_real_run_serves_http_and_stops(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    write_export(path, base_export())
    proc = subprocess.Popen(
        [
            RTR_SERVE, "--source", str(path), "--listen", "127.0.0.1:0",
            "--http", "127.0.0.1:0", "--poll-interval", "0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + DEADLINE
        base = None
        while base is None and time.monotonic() < deadline:
            line = proc.stderr.readline().decode()
            assert line, "rtr-serve exited before it listened"
            match = re.search(r"HTTP API .* on (http://127\.0\.0\.1:\d+)/", line)
            if match:
                base = match.group(1)
        assert base is not None
        with httpx.Client(base_url=base, timeout=5.0) as client:
            while True:
                health = client.get("/healthz")
                if health.status_code == 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert health.status_code == 200, health.text
            assert "rtr_serial 0.0" in client.get("/metrics").text
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=DEADLINE)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0
    assert b"Traceback" not in rest
