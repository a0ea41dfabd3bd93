"""Fixtures of the HTTP tests (the small export of the server tests)."""

from __future__ import annotations

from tests.server.conftest import export_path

__all__ = ["export_path"]
