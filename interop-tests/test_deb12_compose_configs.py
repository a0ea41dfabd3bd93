"""The router configs of docker-compose.yml parse in the real daemons (bird -p, vtysh -C)."""

from __future__ import annotations

import pytest
from rtrclients import procs
from rtrserve import REPO

pytestmark = pytest.mark.interop

COMPOSE = REPO / "interop-tests" / "compose"


def test_bird_config_parses() -> None:
    """BIRD 2.0.12 accepts the compose config (a host name as the cache address)."""
    procs.run(["bird", "-p", "-c", str(COMPOSE / "bird.conf")])


def test_frr_config_parses() -> None:
    """vtysh's dry run knows the rpki node; `bgpd -C` would open a real RTR session (G5)."""
    procs.run(["vtysh", "-C", "-f", str(COMPOSE / "frr-bgpd.conf")])
