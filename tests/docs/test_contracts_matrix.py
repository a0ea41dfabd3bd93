"""`docs/contracts.md` stays true: its counts match its rows, and every pointer exists.

Every row's status symbol is counted per section and compared with the counts table; every code
pointer (`path:Name` or `path:Class.attribute`) names a file of the tree that defines the name,
and every test pointer (`tests/...::test_name`) a test function that exists.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MATRIX = ROOT / "docs" / "contracts.md"
STATUSES = ("✔", "◐", "✘", "○", "n/a")

CODE = re.compile(r"`([\w/]+\.py):([\w.]+)`")
TEST = re.compile(r"`(tests/[\w/]+\.py)::(\w+)")


def rows() -> list[tuple[str, str, list[str]]]:
    """(section title, row ID, cells) for every row of the matrix."""
    found: list[tuple[str, str, list[str]]] = []
    section = ""
    for line in MATRIX.read_text(encoding="utf-8").splitlines():
        if line.startswith("### ") and " — " in line:
            section = line.split(" — ", 1)[1].strip()
        elif re.match(r"\| [LP]-\d", line):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            found.append((section, cells[0], cells))
    return found


def status_of(cell: str) -> str:
    for status in STATUSES:
        if cell.startswith(status):
            return status
    raise AssertionError(f"unknown status: {cell[:40]!r}")


def test_the_counts_table_matches_the_rows() -> None:
    counted: dict[str, Counter[str]] = {}
    ids = [row_id for _, row_id, _ in rows()]
    assert len(ids) == len(set(ids)), "a row ID is used twice"
    for section, _, cells in rows():
        prefix = "L" if cells[0].startswith("L") else "P"
        counted.setdefault(f"{prefix}: {section}", Counter())[status_of(cells[2])] += 1
    table: dict[str, list[int]] = {}
    for line in MATRIX.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\| (\*\*all\*\*|[LP]: [^|]+?) \|((?: [*\d]+ \|){6})", line)
        if m:
            numbers = [int(x.strip(" *")) for x in m.group(2).strip(" |").split("|")]
            table[m.group(1)] = numbers
    total = Counter[str]()
    for section, counter in counted.items():
        expected = [counter[s] for s in STATUSES] + [sum(counter.values())]
        assert table.get(section) == expected, f"counts of {section}: {expected}"
        total.update(counter)
    assert table["**all**"] == [total[s] for s in STATUSES] + [sum(total.values())]


def defines(path: Path, dotted: str) -> bool:
    text = path.read_text(encoding="utf-8")
    for name in dotted.split("."):
        pattern = rf"^\s*(?:async\s+def|def|class)\s+{name}\b|^\s*{name}\s*[:=]|self\.{name}\s*[:=]"
        if not re.search(pattern, text, re.MULTILINE):
            return False
    return True


def test_every_code_and_test_pointer_exists() -> None:
    missing: list[str] = []
    for _, row_id, cells in rows():
        for path, name in CODE.findall(cells[3]):
            file = ROOT / path
            if not file.is_file() or not defines(file, name):
                missing.append(f"{row_id}: {path}:{name}")
        for path, name in TEST.findall(cells[4]):
            file = ROOT / path
            if not file.is_file() or not re.search(
                rf"^(?:async )?def {name}\(", file.read_text(encoding="utf-8"), re.MULTILINE
            ):
                missing.append(f"{row_id}: {path}::{name}")
    assert not missing, "\n".join(missing)
