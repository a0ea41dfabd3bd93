"""`PayloadKind`: the three kinds of RPKI payload, each selected, timed and queried on its own."""

from __future__ import annotations

import enum

__all__ = ["ALL_KINDS", "PayloadKind"]


class PayloadKind(enum.Enum):
    """The payload kinds selected independently (one active group and one validity each)."""

    VRP = "vrp"
    ASPA = "aspa"
    ROUTER_KEY = "router_key"


#: Every kind.
ALL_KINDS = frozenset(PayloadKind)
