"""Per-client results collected by the tests, rendered as tables at the end of the session."""

from __future__ import annotations

TABLES = [
    (
        "Real table: (a) full load, (b) update",
        [
            ("client", "client"),
            ("version", "RTR version"),
            ("own_view", "client's own view at (a)"),
            ("full", "(a) held"),
            ("load_s", "(a) start->held s"),
            ("update", "(b) held"),
            ("delta", "(b) delta answer"),
            ("sent_s", "(b) publish->delta s"),
            ("held_s", "(b) publish->held s"),
            ("sessions", "real-table connection (rtr-serve's close line)"),
        ],
    ),
    (
        "Edge-case set (c) and rtr-serve restart",
        [
            ("client", "client"),
            ("edge", "(c) edge set A, then B by delta"),
            ("edge_sessions", "edge connection (rtr-serve's close line)"),
            ("restart", "rtr-serve restart"),
        ],
    ),
    (
        "Arrival before data (test_arrival.py; seconds from the first publish or the restart)",
        [
            ("client", "client"),
            ("arrival", "(a) started while rtr-serve loads"),
            ("arrival_before", "(b) started before rtr-serve"),
            ("arrival_restart", "(c) stop+start without --state"),
            ("arrival_usr2", "(c) kill -USR2 without --state, other content"),
            ("arrival_usr2_same", "(c) kill -USR2 without --state, same content"),
            ("arrival_state", "(c) stop+start with --state"),
            ("arrival_usr2_state", "(c) kill -USR2 with --state, same content"),
        ],
    ),
]
ALL_COLUMNS = {key for _, columns in TABLES for key, _ in columns}

ROWS: dict[str, dict[str, str]] = {}
NOTES: list[str] = []


def record(client: str, **values: object) -> None:
    """Set some cells of ``client``'s row."""
    row = ROWS.setdefault(client, {"client": client})
    for key, value in values.items():
        assert key in ALL_COLUMNS, key
        row[key] = f"{value:.2f}" if isinstance(value, float) else str(value)


def note(text: str) -> None:
    """A line printed under the tables."""
    NOTES.append(text)


def _table(title: str, columns: list[tuple[str, str]]) -> list[str]:
    keys = [key for key, _ in columns if key == "client" or any(key in r for r in ROWS.values())]
    rows = [r for r in ROWS.values() if any(k in r for k in keys if k != "client")]
    if len(keys) < 2 or not rows:
        return []
    heads = dict(columns)
    table = [[heads[k] for k in keys]] + [[row.get(k, "-") for k in keys] for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(keys))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in table]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return [title, *lines, ""]


def render() -> str:
    """The tables as aligned text ("" when nothing was recorded)."""
    lines: list[str] = []
    for title, columns in TABLES:
        lines += _table(title, columns)
    return "\n".join(lines + NOTES).rstrip()
