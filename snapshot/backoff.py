"""Retry delays: exponential backoff with jitter, one rule for every retry (sources, the store)."""

from __future__ import annotations

import random

__all__ = ["jittered_backoff"]


def jittered_backoff(failures: int, initial: float, maximum: float) -> float:
    """The delay before retrying after ``failures`` failures in a row (0 for the first retry).

    ``initial`` · 2ⁿ capped at ``maximum``, then a uniformly random point of its upper half, so
    that many clients that failed together do not retry together.
    """
    ceiling = min(maximum, initial * 2.0 ** min(failures, 64))
    return random.uniform(ceiling / 2, ceiling)
