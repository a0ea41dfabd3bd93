"""Helpers for the operator-tool tests: run ``rtr-serve`` subcommands as real processes."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import anyio

#: Seconds a subcommand may take in a test.
COMMAND_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Ran:
    """A finished subcommand."""

    returncode: int
    stdout: str
    stderr: str


async def rtr_serve(*args: str) -> Ran:
    """Run ``rtr-serve ARGS`` (this checkout's code) and collect its exit status and output."""
    with anyio.fail_after(COMMAND_TIMEOUT):
        done = await anyio.run_process(
            [sys.executable, "-m", "rtr_server.cli", *args],
            check=False,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    return Ran(done.returncode, done.stdout.decode(), done.stderr.decode())


def stayrtr_export() -> dict[str, Any]:
    """rpki-client's 2022-23 JSON (ASPA per AFI), which StayRTR 0.5 reads."""
    far = 4_070_908_800
    return {
        "metadata": {"buildtime": "2025-07-20T09:31:35Z"},
        "roas": [
            {"asn": 64496, "prefix": "192.0.2.0/24", "maxLength": 24, "expires": far},
            {"asn": 64497, "prefix": "198.51.100.0/22", "maxLength": 24, "expires": far},
            {"asn": 64498, "prefix": "2001:db8::/32", "maxLength": 48, "expires": far},
        ],
        "provider_authorizations": {
            "ipv4": [{"customer_asid": 64500, "providers": [64501], "expires": far}],
            "ipv6": [{"customer_asid": 64500, "providers": [64503], "expires": far}],
        },
    }
