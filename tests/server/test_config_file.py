"""The TOML configuration file, `rtr-serve --config` merging and `rtr-serve check-config`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rtr_server.cli_args import build_parser
from rtr_server.cli_config import apply_config_file, config_from_args
from rtr_server.config_file import ConfigError, parse_config
from tests.server.test_cli import PYTHON_M, run_cli
from upstream.config import ClientConfig, GroupConfig, SourceConfig, make_source
from upstream.timekeeper import as_keeper

GOOD = """
[server]
listen = ["127.0.0.1:8323", "[::1]:8323"]
notify_interval = 5
refresh = 900
[[groups]]
name = "primary"
priority = 10
startup_timeout = 30
failback_delay = 300
[[groups]]
name = "backup"
priority = 20
[[sources]]
name = "validator-a"
url = "rtr://192.0.2.10:3323"
group = "primary"
[[sources]]
url = "/var/lib/rpki-client/json"
group = "backup"
poll_interval = 5
[[sources]]
name = "web"
url = "https://validator.example/json"
group = "backup"
headers = { Authorization = "Bearer secret" }
connect_timeout = 5
retry_max = 60
"""


def test_good_file_parses() -> None:
    cfg = parse_config(GOOD)
    assert cfg.server == {
        "listen": ["127.0.0.1:8323", "[::1]:8323"],
        "notify_interval": 5,
        "refresh": 900,
    }
    assert cfg.groups == (
        GroupConfig("primary", 10, 30, 300),
        GroupConfig("backup", 20),
    )
    assert cfg.sources[:2] == (
        SourceConfig("validator-a", "rtr://192.0.2.10:3323", "primary"),
        SourceConfig("/var/lib/rpki-client/json", "/var/lib/rpki-client/json", "backup", 5),
    )
    web = cfg.sources[2]
    assert web.headers == (("Authorization", "Bearer secret"),)
    assert (web.connect_timeout, web.retry_max) == (5, 60)
    assert "secret" not in repr(web)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[server]\nrefreshx = 1", "server.refreshx: unknown key"),
        ("[server]\nrefresh = '1'", "server.refresh: must be int"),
        ("[server]\nnotify_interval = true", "server.notify_interval: must be int or float"),
        ("[server]\nlisten = [1]", "server.listen: must be a list of HOST:PORT strings"),
        ("[serverx]", "serverx: unknown section"),
        ("[[groups]]\npriority = 1", "groups[0].name: missing"),
        ("[[groups]]\nname = 'a'", "groups[0].priority: missing"),
        (
            "[[groups]]\nname='a'\npriority=1\n[[groups]]\nname='a'\npriority=2",
            "groups[1].name: 'a' already used by groups[0]",
        ),
        (
            "[[groups]]\nname='a'\npriority=1\n[[groups]]\nname='b'\npriority=1",
            "groups[1].priority: 1 already used by groups[0]",
        ),
        ("[[groups]]\nname='a'\npriority=1\nfailback_delay=-1", "groups[0]: "),
        ("[[sources]]\nname = 'x'", "sources[0].url: missing"),
        (
            "[[groups]]\nname='a'\npriority=1\n[[sources]]\nurl='x'\ngroup='b'",
            "sources[0].group: no group named 'b'",
        ),
        (
            (
                "[[groups]]\nname='a'\npriority=1\n[[groups]]\nname='b'\npriority=2\n"
                "[[sources]]\nurl='x'\ngroup='a'"
            ),
            "groups[1]: group 'b' has no sources",
        ),
        ("[[sources]]\nurl='x'\n[[sources]]\nurl='x'", "sources[1].name: 'x' already used"),
        ("[[sources]]\nurl='x'\npoll_interval=0", "sources[0].poll_interval: must be positive"),
        ("not toml ]", "not valid TOML"),
        ("[[sources]]\nurl='x'\nheaders={a='b'}", "sources[0].headers: not an option of file"),
        ("[[sources]]\nurl='rtr://h'\nread_timeout=1", "sources[0].read_timeout: not an option"),
        ("[[sources]]\nurl='https://h/x'\nmax_version=1", "sources[0].max_version: not an"),
        ("[[sources]]\nurl='rtr://h'\nretry_max=0", "sources[0].retry_max: must be positive"),
        ("[[sources]]\nurl='https://h/x'\nwatch=false", "sources[0].watch: not an option of http"),
        ("[[sources]]\nurl='x'\nwatch='no'", "sources[0].watch: "),
    ],
)
def test_errors_name_the_key_path(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_config(text)


def test_a_file_source_can_leave_watching_off() -> None:
    config = parse_config("[[sources]]\nurl='a.json'\nwatch=false\n[[sources]]\nurl='b.json'")
    assert [s.watch for s in config.sources] == [False, None]
    client = ClientConfig(sources=config.sources)
    sources = [make_source(s, client, as_keeper(None)) for s in config.sources]
    assert [getattr(s, "watch", None) for s in sources] == [False, True]


def test_command_line_overrides_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(GOOD)
    parser = build_parser()
    argv = ["--config", str(path), "--notify-interval", "60"]
    args = parser.parse_args(argv)
    apply_config_file(parser, args, argv)
    config = config_from_args(args)
    assert config.server.notify_interval == 60  # the command line wins, even at the default
    assert config.server.timers.refresh == 900  # from the file
    assert [str(a) for a in config.server.listen] == ["127.0.0.1:8323", "[::1]:8323"]
    assert [s.name for s in config.group_sources] == [
        "validator-a",
        "/var/lib/rpki-client/json",
        "web",
    ]
    # --source replaces the file's sources with one implicit group.
    argv = ["--config", str(path), "--source", "x.json"]
    args = parser.parse_args(argv)
    apply_config_file(parser, args, argv)
    config = config_from_args(args)
    assert config.sources == ("x.json",)
    assert config.group_sources == ()


def run_check(path: Path) -> subprocess.CompletedProcess[str]:
    return run_cli("check-config", str(path), command=PYTHON_M)


def test_check_config_valid_and_invalid(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(GOOD)
    done = run_check(path)
    assert done.returncode == 0, done.stderr
    assert "valid" in done.stdout
    assert "group primary (priority 10" in done.stdout
    assert "source validator-a: rtr://192.0.2.10:3323" in done.stdout
    assert "arrival hold: queries before the first data wait up to 50 s" in done.stdout
    path.write_text(GOOD.replace("[server]", "[server]\narrival_hold = 0", 1))
    done = run_check(path)
    assert "arrival hold: off (No Data Available before the first data)" in done.stdout
    path.write_text(GOOD.replace("refresh = 900", "refresh = 0"))
    done = run_check(path)
    assert done.returncode == 2
    assert "server.refresh/retry/expire" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    path.write_text(GOOD.replace("3323", "99999"))
    done = run_check(path)
    assert done.returncode == 2
    assert "sources[0].url" in done.stderr
    done = run_check(tmp_path / "missing.toml")
    assert done.returncode == 2
    assert "cannot read" in done.stderr


def test_state_keys_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(GOOD.replace("refresh = 900", 'refresh = 900\nstate = "sqlite:/var/lib/x.db"'))
    done = run_check(path)
    assert done.returncode == 0, done.stderr
    assert "state: sqlite:/var/lib/x.db (persisted; recovered at start)" in done.stdout
    path.write_text(GOOD.replace("refresh = 900", 'refresh = 900\nstate = "postgres:/x"'))
    done = run_check(path)
    assert done.returncode == 2
    assert "server.state" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("file_value", "argv", "expected"),
    [(None, [], 50.0), ("5", [], 5.0), ("0", [], 0.0), ("5", ["--arrival-hold", "7.5"], 7.5)],
)
def test_arrival_hold_from_file_and_command_line(
    tmp_path: Path, file_value: str | None, argv: list[str], expected: float
) -> None:
    path = tmp_path / "c.toml"
    hold = "" if file_value is None else f"arrival_hold = {file_value}\n"
    path.write_text(f"[server]\n{hold}[[sources]]\nurl = 'x.json'\n")
    parser = build_parser()
    argv = ["--config", str(path), *argv]
    args = parser.parse_args(argv)
    apply_config_file(parser, args, argv)
    assert config_from_args(args).server.arrival_hold == expected


def test_negative_arrival_hold_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[server]\narrival_hold = -1\n[[sources]]\nurl = 'x.json'\n")
    parser = build_parser()
    argv = ["--config", str(path)]
    args = parser.parse_args(argv)
    with pytest.raises(ConfigError, match=r"server\.arrival_hold: must be zero or more"):
        apply_config_file(parser, args, argv)
