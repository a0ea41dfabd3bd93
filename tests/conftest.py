"""Shared fixtures: every async test runs on asyncio and trio, no proxy in the environment."""

from __future__ import annotations

import importlib.util

import pytest

# Fail, don't skip: anyio's own fixture silently drops trio when it is not installed.
if importlib.util.find_spec("trio") is None:  # pragma: no cover - exercised only when broken
    raise RuntimeError("trio is not installed: the test suite must run on asyncio and trio")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run each ``@pytest.mark.anyio`` test once per backend."""
    return str(request.param)


#: The proxy variables httpx honours (also lower case); the HTTP sources follow them.
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture(autouse=True)
def _no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loopback tests never go through a proxy of the machine's environment (and its children)."""
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.lower(), raising=False)
