"""`Lifecycle`: the states every long-lived library object goes through (a `Client`, a reader).

created → open → running → closing → closed; pure data, shared by `upstream` and
`persistence.shared` so both report their life in the same terms.
"""

from __future__ import annotations

import enum

__all__ = ["Lifecycle"]


class Lifecycle(enum.Enum):
    """Where a client or a shared reader is in its life."""

    CREATED = "created"
    OPEN = "open"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"
