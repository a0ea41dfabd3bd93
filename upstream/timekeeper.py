"""`TimeKeeper` and its anchors, re-exported from `persistence.timekeeper`.

The rules are written there: the shared reader (persistence) keeps its time by the same keeper.
"""

from persistence.timekeeper import Anchor, Pinned, TimeKeeper, as_keeper

__all__ = ["Anchor", "Pinned", "TimeKeeper", "as_keeper"]
