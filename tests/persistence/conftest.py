"""The ``kind`` fixture: a persistence test that asks for it runs once per store backend."""

from __future__ import annotations

import pytest

from tests.persistence.helpers import KINDS


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    """Each test asking for ``kind`` runs once per backend ("sqlite", "duckdb")."""
    return str(request.param)
