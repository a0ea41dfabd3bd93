"""`upstream.config`: checks before any I/O, and source options reach the sources."""

from __future__ import annotations

import pytest

from upstream.clock import SystemClock
from upstream.config import ClientConfig, GroupConfig, SourceConfig, make_source
from upstream.file_source import FileSource
from upstream.http_source import HttpSource
from upstream.rtr_source import RtrSource
from upstream.timekeeper import TimeKeeper


def test_negative_group_times_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        GroupConfig("g", 1, startup_timeout=-1)


def test_options_reach_each_kind_of_source() -> None:
    config = ClientConfig((SourceConfig("f", "/x.json"),))
    clock = TimeKeeper(SystemClock())
    http = make_source(
        SourceConfig("h", "https://h.example/x", connect_timeout=3, retry_max=9, max_bytes=5000),
        config,
        clock,
    )
    assert isinstance(http, HttpSource)
    assert (http.timeout.connect, http.retry_max, http.max_bytes) == (3, 9, 5000)
    rtr = make_source(
        SourceConfig("r", "rtr://h.example", max_version=1, retry_max=7), config, clock
    )
    assert isinstance(rtr, RtrSource)
    assert (rtr.session.version, rtr.retry_max) == (1, 7)
    file = make_source(SourceConfig("f", "/x.json", max_bytes=10, poll_interval=2), config, clock)
    assert isinstance(file, FileSource)
    assert (file.max_bytes, file.poll_interval) == (10, 2)


@pytest.mark.parametrize(
    ("sources", "groups", "message"),
    [
        ((), (), "at least one source"),
        ((SourceConfig("a", "x"), SourceConfig("a", "y")), (), r"sources\[1\].name"),
        ((SourceConfig("a", "x", "nope"),), (), r"sources\[0\].group: no group named 'nope'"),
        ((SourceConfig("a", "ftp://x"),), (), r"sources\[0\].url: .*unsupported scheme"),
        ((SourceConfig("a", "rtr://x:0"),), (), r"sources\[0\].url"),
    ],
)
def test_config_errors_before_any_io(
    sources: tuple[SourceConfig, ...], groups: tuple[GroupConfig, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ClientConfig(sources, groups)
