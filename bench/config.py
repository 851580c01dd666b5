"""Sizes of one benchmark run, from flags or ``BENCH_*`` environment variables.

One knob, ``scale``, shrinks every count together so that a smoke run (``--scale 0.02``: 200
objects) exercises exactly the code paths of the full run (10,000 objects) in a minute or two.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

NAMESPACES = 10  # the population is created in one round per namespace: batch = objects / NAMESPACES


@dataclass(frozen=True)
class Scale:
    objects: int = 10_000  # population; 1/NAMESPACES of it per namespace
    concurrency: int = 16  # clients of create, get, update
    gets: int = 3_000  # get-by-name requests per round
    rounds: int = 3  # rounds per target of every repeated workload (create has one per namespace)
    list_reps: int = 3  # requests per list variant per round
    watchers: int = 200
    watch_rate: float = 100.0  # writes per second during the fan-out
    watch_seconds: float = 5.0  # of writes per round
    watch_objects: int = 100  # written round robin: each gets 1 write/s, so writes never race each other
    settle_seconds: float = 5.0  # before reading RSS
    kubectl_timeout: float = 300.0

    @property
    def batch(self) -> int:
        """Objects per namespace, i.e. per create round."""
        return max(1, self.objects // NAMESPACES)

    @property
    def updates(self) -> int:
        """Objects updated (then status-updated) per round: writes wait on etcd's fsync, and 500 a
        round keeps the run within its time budget while giving stable percentiles."""
        return min(self.batch, 500)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "batch": self.batch, "namespaces": NAMESPACES}

    @classmethod
    def scaled(cls, factor: float) -> Scale:
        """Every count times ``factor``, with floors that keep percentiles meaningful."""
        base = cls()
        if factor == 1.0:
            return base
        return replace(base, objects=max(NAMESPACES * 2, round(base.objects * factor)),
                       gets=max(200, round(base.gets * factor)),
                       watchers=max(20, round(base.watchers * min(1.0, factor * 5))),
                       watch_seconds=base.watch_seconds if factor >= 0.5 else 3.0,
                       settle_seconds=base.settle_seconds if factor >= 0.5 else 2.0)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scale", type=float, default=float(os.environ.get("BENCH_SCALE", "1.0")),
                   help="multiply every size (env BENCH_SCALE; 0.02 = a 200-object smoke run)")
    for f in fields(Scale):
        env = "BENCH_" + f.name.upper()
        p.add_argument("--" + f.name.replace("_", "-"), dest=f.name, type=type(f.default),
                       default=type(f.default)(os.environ[env]) if env in os.environ else None,
                       help=f"override (env {env})")


def from_args(args: argparse.Namespace) -> Scale:
    scale = Scale.scaled(args.scale)
    overrides = {f.name: getattr(args, f.name) for f in fields(Scale) if getattr(args, f.name) is not None}
    return replace(scale, **overrides)
