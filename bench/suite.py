"""One benchmark run: start the servers, run every workload in order, collect the numbers.

The order matters and is fixed: memory is read empty, the population is created (workload 1),
memory is read again, then the read workloads run on an unchanged population, and the
workloads that modify objects (update, watch) come last; server-side apply, which adds objects
of its own in a namespace apart, comes after them, so it changes nothing the others measure.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .aggregator import start_via_aggregator
from .client import namespace_name
from .config import NAMESPACES, Scale
from .servers import Lab, etcd_version, kube_version, target_from_kubeconfig
from .stats import Results
from .watch import WATCH_NAMESPACE, fan_out_watch
from .workloads import (
    APPLY_NAMESPACE,
    Bench,
    apply,
    create,
    get,
    kubectl,
    lists,
    log,
    memory,
    record_memory,
    update,
    warm_up,
)

Step = tuple[str, Callable[[Bench], Any]]
REPO = Path(__file__).resolve().parent.parent


def source_state() -> dict[str, Any]:
    """Which server code was measured: the commit, and the files under test that differed from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()
    return {"commit": git("rev-parse", "--short", "HEAD"),
            "modified": git("status", "--porcelain", "--", "apiserver", "hack/harness.py").splitlines()}


async def run(scale: Scale, workdir: Path, extra: list[tuple[str, Path]] | None = None,
              only: set[str] | None = None, via_aggregator: bool = False) -> tuple[Results, dict[str, Any]]:
    started = time.monotonic()
    started_at = dt.datetime.now(dt.UTC)
    namespaces = [namespace_name(i) for i in range(NAMESPACES)] + [WATCH_NAMESPACE, APPLY_NAMESPACE]
    lab = Lab(workdir, namespaces)
    failures: dict[str, str] = {}
    try:
        targets, floors = lab.start(), []
        if via_aggregator:
            via, floor = start_via_aggregator(lab, lab.etcd_urls["ours"], namespaces)
            targets.append(via)
            floors.append(floor)
        targets += [target_from_kubeconfig(name, path, workdir, "ours") for name, path in extra or []]
        log("servers up: " + ", ".join(f"{t.name} {t.url}{t.api}" for t in targets + floors))
        b = Bench(scale, targets, floors)
        b.open()
        try:
            await warm_up(b)
            empty = memory(b, "empty")
            await create(b)
            full = memory(b, "populated")
            steps: list[Step] = [("get", get), ("list", lists), ("kubectl", lambda b: kubectl(b, str(workdir / "kube-cache"))),
                                 ("update", update), ("watch", fan_out_watch), ("apply", apply)]
            for name, step in steps:
                if only and name not in only:
                    continue
                phase = time.monotonic()
                try:
                    await step(b)
                except Exception as e:  # keep the other workloads' numbers; the failure is reported
                    log(f"-- {name} FAILED: {e}")
                    failures[name] = str(e)
                    continue
                log(f"-- {name} done in {time.monotonic() - phase:.0f}s")
            end = memory(b, "end")
            record_memory(b, empty, full, end)
        finally:
            await b.close()
    finally:
        lab.stop()
    meta = {"started": started_at.isoformat(timespec="seconds"),
            "finished": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "duration_s": time.monotonic() - started, "scale": scale.as_dict(),
            "versions": {"kubernetes": kube_version(), "etcd": etcd_version()},
            "targets": [{"name": t.name, "description": t.description, "url": t.url + t.api} for t in targets + floors],
            "failures": failures, "source": source_state()}
    return b.results, meta
