"""Every product module stays small (at most 500 lines) and opens with its contract docstring."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rtr_server", "rtr_protocol", "upstream", "snapshot", "persistence")
MAX_LINES = 500

MODULES = sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def test_the_packages_are_found() -> None:
    assert len(MODULES) > 50


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_module_is_small_and_says_what_it_owns(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    lines = text.count("\n") + (not text.endswith("\n") and bool(text))
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines (> {MAX_LINES})"
    docstring = ast.get_docstring(ast.parse(text))
    assert docstring, f"{path.relative_to(ROOT)} has no module docstring"
