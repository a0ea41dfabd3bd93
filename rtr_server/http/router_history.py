"""`RouterHistory`: a bounded ring of samples of the connected routers (count, versions, lag).

The dashboard charts it next to the publish history. `sample_routers` takes one sample every
``interval`` seconds (5 by default) for as long as the HTTP API serves; the ring keeps the
last ``keep`` (240: 20 minutes at 5 s), so its memory is fixed whatever the number of routers.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import anyio

from rtr_server.http import observe
from rtr_server.http.view import AppView

__all__ = ["DEFAULT_INTERVAL", "DEFAULT_KEEP", "RouterHistory", "RouterSample", "sample_routers"]

#: Seconds between samples.
DEFAULT_INTERVAL = 5.0
#: Samples kept.
DEFAULT_KEEP = 240
#: The sampling loop looks at the clock at least this often (so a changed interval applies).
CHECK_EVERY = 0.5


@dataclass(frozen=True, slots=True)
class RouterSample:
    """The connected routers at one moment."""

    #: Wall time (Unix seconds).
    wall: float
    connected: int
    #: Routers by negotiated version ("0", "1", "2", "none").
    by_version: dict[str, int]
    #: The largest serial lag of a router with data (None: no router has data yet).
    max_lag: int | None
    #: Routers behind the current serial.
    lagging: int


class RouterHistory:
    """The last ``keep`` samples, oldest first."""

    def __init__(self, keep: int = DEFAULT_KEEP, interval: float = DEFAULT_INTERVAL) -> None:
        """Start empty."""
        if keep < 1 or interval <= 0:
            raise ValueError("a router history keeps at least one sample, interval > 0")
        self.interval = interval
        self._samples: deque[RouterSample] = deque(maxlen=keep)

    def sample(self, app: AppView) -> RouterSample:
        """Record the routers of ``app`` now."""
        sessions = observe.sessions(app)
        lags = [r.lag for r in sessions.routers if r.lag is not None]
        entry = RouterSample(
            wall=app.clock.wall(),
            connected=len(sessions.routers),
            by_version=dict(sessions.by_version),
            max_lag=max(lags) if lags else None,
            lagging=sum(1 for lag in lags if lag > 0),
        )
        self._samples.append(entry)
        return entry

    def __iter__(self) -> Iterator[RouterSample]:
        return iter(tuple(self._samples))

    def __len__(self) -> int:
        return len(self._samples)


async def sample_routers(
    app: AppView, history: RouterHistory, monotonic: Callable[[], float] = time.monotonic
) -> None:
    """Sample at once, then every ``history.interval`` seconds, until cancelled."""
    last = -float("inf")
    while True:
        now = monotonic()
        if now - last >= history.interval:
            history.sample(app)
            last = now
        await anyio.sleep(min(CHECK_EVERY, history.interval))
