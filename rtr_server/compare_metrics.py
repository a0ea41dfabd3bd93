"""Prometheus metrics of ``rtr-serve compare --watch`` (like StayRTR's rtrmon) and their HTTP page.

Families (``side`` is ``a`` or ``b``):

* ``rtr_compare_differences{kind,side}``: records of ``kind`` (vrps, aspas, router_keys) only
  on ``side``, as of the last round in which both sides were read;
* ``rtr_compare_same``: 1 when the last compared round found the same set, else 0;
* ``rtr_compare_records{kind,side}``: records each side held when last read;
* ``rtr_compare_serial{side}``: the cache's serial (absent for a JSON export);
* ``rtr_compare_last_success_timestamp_seconds{side}``: when the side was last read;
* ``rtr_compare_age_seconds{side}``: seconds since the side's data was made (the export's
  buildtime, or the last successful read of a cache), at scrape time;
* ``rtr_compare_read_errors_total{side}``, ``rtr_compare_rounds_total``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry

from rtr_server.compare_diff import KINDS, Differences
from rtr_server.compare_sides import SideState
from rtr_server.http.wire import Request, Response

__all__ = ["CompareMetrics"]

SIDES = ("a", "b")


class CompareMetrics:
    """The state of a watch, read by Prometheus on each scrape."""

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        """Nothing read yet; registered on an own registry."""
        self.wall = wall
        self.states: dict[str, SideState | None] = dict.fromkeys(SIDES)
        self.errors = dict.fromkeys(SIDES, 0)
        self.rounds = 0
        self.differences: Differences | None = None
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(self)

    def round_done(
        self, states: dict[str, SideState | None], differences: Differences | None
    ) -> None:
        """Record one round: each side's state (None: it failed) and the comparison."""
        self.rounds += 1
        for side, state in states.items():
            if state is None:
                self.errors[side] += 1
            else:
                self.states[side] = state
        if differences is not None:
            self.differences = differences

    def collect(self) -> Iterable[Metric]:
        """The families of the module docstring."""
        diff = GaugeMetricFamily(
            "rtr_compare_differences", "records only on this side", labels=["kind", "side"]
        )
        same = GaugeMetricFamily("rtr_compare_same", "1 when the last comparison found no diff")
        if self.differences is not None:
            for kind, (a, b) in self.differences.counts().items():
                diff.add_metric([kind, "a"], a)
                diff.add_metric([kind, "b"], b)
            same.add_metric([], 1.0 if self.differences.same else 0.0)
        records = GaugeMetricFamily(
            "rtr_compare_records", "records the side held when last read", labels=["kind", "side"]
        )
        serial = GaugeMetricFamily("rtr_compare_serial", "the cache's serial", labels=["side"])
        success = GaugeMetricFamily(
            "rtr_compare_last_success_timestamp_seconds",
            "when the side was last read",
            labels=["side"],
        )
        age = GaugeMetricFamily(
            "rtr_compare_age_seconds", "seconds since the side's data was made", labels=["side"]
        )
        now = self.wall()
        for side, state in self.states.items():
            if state is None:
                continue
            counts = state.snapshot.counts()
            for kind, value in _kind_counts(counts).items():
                records.add_metric([kind, side], value)
            if state.serial is not None:
                serial.add_metric([side], state.serial)
            success.add_metric([side], state.read_at)
            made = state.generated if state.generated is not None else state.read_at
            age.add_metric([side], max(0.0, now - made))
        errors = CounterMetricFamily(
            "rtr_compare_read_errors", "rounds in which the side could not be read", labels=["side"]
        )
        for side, count in self.errors.items():
            errors.add_metric([side], count)
        rounds = CounterMetricFamily("rtr_compare_rounds", "comparison rounds run")
        rounds.add_metric([], self.rounds)
        return [diff, same, records, serial, success, age, errors, rounds]

    async def handle(self, request: Request) -> Response:
        """``/metrics`` (also ``/``); anything else is 404."""
        if request.path not in ("/", "/metrics"):
            return Response(404, b"not found: try /metrics\n")
        return Response(200, generate_latest(self.registry), CONTENT_TYPE_LATEST)


def _kind_counts(counts: dict[str, int]) -> dict[str, int]:
    vrps = counts.get("vrp_v4", 0) + counts.get("vrp_v6", 0)
    out = {"vrps": vrps, "aspas": counts.get("aspa", 0), "router_keys": counts.get("router_key", 0)}
    return {k: out[k] for k in KINDS}
