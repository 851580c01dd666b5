"""One benchmark run: start the servers, run every workload in order, collect the numbers.

The order matters and is fixed: memory is read empty, the population is created (workload 1),
memory is read again, then the read workloads run on an unchanged population, and the
workloads that modify objects (update, watch) come last.
"""

from __future__ import annotations

import base64
import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from .client import namespace_name
from .config import NAMESPACES, Scale
from .servers import Lab, Target, etcd_version, kube_version
from .stats import Results
from .watch import WATCH_NAMESPACE, fan_out_watch
from .workloads import Bench, create, get, kubectl, lists, log, memory, record_memory, update, warm_up

Step = tuple[str, Callable[[Bench], Any]]


def target_from_kubeconfig(name: str, kubeconfig: Path, workdir: Path, store_of: str) -> Target:
    """An extra target (e.g. ours through the host aggregator) from a kubeconfig with inline
    client-certificate data; it serves the objects of ``store_of`` and so creates none itself."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    files = {}
    for stem, data in (("ca.crt", cluster["certificate-authority-data"]), ("tls.crt", user["client-certificate-data"]),
                       ("tls.key", user["client-key-data"])):
        path = workdir / "targets" / name / stem
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        files[stem] = path
    return Target(name, f"{name} (from {kubeconfig})", cluster["server"], files["ca.crt"], files["tls.crt"],
                  files["tls.key"], kubeconfig, store_of=store_of)


async def run(scale: Scale, workdir: Path, extra: list[tuple[str, Path]] | None = None,
              only: set[str] | None = None) -> tuple[Results, dict[str, Any]]:
    started = time.monotonic()
    started_at = dt.datetime.now(dt.UTC)
    lab = Lab(workdir, [namespace_name(i) for i in range(NAMESPACES)] + [WATCH_NAMESPACE])
    try:
        targets = lab.start()
        log("servers up: " + ", ".join(f"{t.name} {t.url}" for t in targets))
        targets += [target_from_kubeconfig(name, path, workdir, "ours") for name, path in extra or []]
        b = Bench(scale, targets)
        b.open()
        try:
            await warm_up(b)
            empty = memory(b, "empty")
            await create(b)
            full = memory(b, "populated")
            steps: list[Step] = [("get", get), ("list", lists), ("kubectl", lambda b: kubectl(b, str(workdir / "kube-cache"))),
                                 ("update", update), ("watch", fan_out_watch)]
            for name, step in steps:
                if only and name not in only:
                    continue
                phase = time.monotonic()
                await step(b)
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
            "targets": [{"name": t.name, "description": t.description, "url": t.url} for t in targets]}
    return b.results, meta
