"""Fixtures shared by the server tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.server.helpers import base_export, write_export


@pytest.fixture
def export_path(tmp_path: Path) -> Path:
    """A small rpki-client export (`base_export`) in a temporary file."""
    path = tmp_path / "export.json"
    write_export(path, base_export())
    return path
