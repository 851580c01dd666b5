"""What a measurement is, and how its samples are summarized and compared.

A :class:`Metric` collects samples per target: one value per round (wall time, throughput,
RSS) or one per request, pooled over rounds (latencies). The ratio is always oriented so that
``> 1`` means vc-apiserver is better: baseline/ours for times and bytes, ours/baseline for rates.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

OURS, BASELINE = "ours", "baseline"

Ratio = tuple[str, float, float | None]
"""A product family's bar on the chart: its label, the ratio turned like every other (``> 1``: ours is
faster or smaller than what it is set against) and the family's goal turned the same way, if it has one."""


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), ``q`` in [0, 100]."""
    if not values:
        return math.nan
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (pos - low)


@dataclass
class Metric:
    key: str  # stable id, e.g. "get.latency"
    title: str  # row label
    unit: str  # s, ms, req/s, MiB, KiB
    higher_is_better: bool = False
    chart: bool = True  # drawn in docs/benchmarks.png and listed in docs/benchmarks.md
    chart_p99: bool = False  # the tail matters as much as the median (watch delivery)
    samples: dict[str, list[float]] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)

    def add(self, target: str, *values: float) -> None:
        self.samples.setdefault(target, []).extend(values)

    def p50(self, target: str) -> float:
        return percentile(self.samples.get(target, []), 50)

    def p99(self, target: str) -> float:
        return percentile(self.samples.get(target, []), 99)

    def ratio(self, target: str = OURS, quantile: float = 50) -> float:
        """Baseline over ``target``, oriented so that > 1 means ``target`` is better."""
        ours = percentile(self.samples.get(target, []), quantile)
        base = percentile(self.samples.get(BASELINE, []), quantile)
        if math.isnan(ours) or math.isnan(base) or ours <= 0 or base <= 0:
            return math.nan  # a ratio of non-positive values (a delay that beat its ack) means nothing
        return ours / base if self.higher_is_better else base / ours

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "title": self.title, "unit": self.unit,
                               "higher_is_better": self.higher_is_better, "chart": self.chart,
                               "chart_p99": self.chart_p99, "targets": {}}
        for target, values in self.samples.items():
            out["targets"][target] = {"p50": self.p50(target), "p99": self.p99(target), "n": len(values),
                                      "min": min(values), "max": max(values)}
            if target != BASELINE:
                out["targets"][target]["ratio_p50"] = self.ratio(target, 50)
                out["targets"][target]["ratio_p99"] = self.ratio(target, 99)
        if self.notes:
            out["notes"] = self.notes
        return out


class Results:
    """Metrics in the order they were first recorded, which is the order of the report."""

    def __init__(self) -> None:
        self.metrics: dict[str, Metric] = {}
        # workload -> target -> cores busy per round: {"client": .., "server": .., "etcd": ..}
        self.usage: dict[str, dict[str, list[dict[str, float]]]] = {}

    def record_usage(self, workload: str, target: str, cores: dict[str, float]) -> None:
        self.usage.setdefault(workload, {}).setdefault(target, []).append(cores)

    def usage_summary(self) -> dict[str, dict[str, dict[str, float]]]:
        """Median cores busy per side, per workload and target."""
        return {w: {t: {side: percentile([r[side] for r in rounds], 50) for side in rounds[0]}
                    for t, rounds in per_target.items()} for w, per_target in self.usage.items()}

    def metric(self, key: str, title: str, unit: str, *, higher_is_better: bool = False,
               chart: bool = True) -> Metric:
        if key not in self.metrics:
            self.metrics[key] = Metric(key, title, unit, higher_is_better, chart)
        return self.metrics[key]

    def __iter__(self) -> Iterator[Metric]:
        return iter(self.metrics.values())
