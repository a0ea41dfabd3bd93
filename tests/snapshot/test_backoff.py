"""`jittered_backoff`: doubles per failure, stays in the upper half of its ceiling, is capped."""

from __future__ import annotations

from snapshot.backoff import jittered_backoff


def test_the_delay_doubles_stays_in_the_upper_half_and_is_capped() -> None:
    for failures, ceiling in [(0, 1.0), (1, 2.0), (3, 8.0), (10, 60.0), (10_000, 60.0)]:
        delays = [jittered_backoff(failures, 1.0, 60.0) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert max(delays) - min(delays) > ceiling / 10  # jittered, not one fixed value
