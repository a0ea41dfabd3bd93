"""Shared fixtures: every async test runs on both asyncio and trio."""

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
