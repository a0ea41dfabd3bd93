"""Per-client results collected by the tests, rendered as one table at the end of the session."""

from __future__ import annotations

COLUMNS = [
    ("client", "client"),
    ("version", "RTR version (rtr-serve log)"),
    ("own_view", "client's own view"),
    ("full", "(a) held after full load"),
    ("load_s", "(a) start->held s"),
    ("update", "(b) held after update"),
    ("delta", "(b) delta answer"),
    ("sent_s", "(b) publish->delta sent s"),
    ("held_s", "(b) publish->held s"),
    ("edge", "(c) edge set"),
    ("sessions", "connections"),
]

ROWS: dict[str, dict[str, str]] = {}
NOTES: list[str] = []


def record(client: str, **values: object) -> None:
    """Set some cells of ``client``'s row."""
    row = ROWS.setdefault(client, {"client": client})
    for key, value in values.items():
        assert key in dict(COLUMNS), key
        row[key] = f"{value:.2f}" if isinstance(value, float) else str(value)


def note(text: str) -> None:
    """A line printed under the table."""
    NOTES.append(text)


def render() -> str:
    """The table as aligned text ("" when nothing was recorded)."""
    if not ROWS:
        return ""
    keys = [key for key, _ in COLUMNS if any(key in row for row in ROWS.values())]
    heads = dict(COLUMNS)
    table = [[heads[k] for k in keys]] + [[row.get(k, "-") for k in keys] for row in ROWS.values()]
    widths = [max(len(line[i]) for line in table) for i in range(len(keys))]
    lines = [
        " | ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) for line in table
    ]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines + NOTES)
