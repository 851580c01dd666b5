"""``python -m bench``: run the side-by-side suite and write its reports.

    python -m bench                      # full run (10,000 objects), ~10 minutes on 2 cores
    python -m bench --scale 0.02         # smoke run (200 objects), ~1-2 minutes
    python -m bench --no-via-aggregator  # only ours direct vs kube-apiserver + CRD
    python -m bench --target NAME=KUBECONFIG   # one more target serving ours' objects

A smoke run writes only the JSON; ``docs/`` are rewritten by full-scale runs (or ``--docs``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import uvloop

from . import config, controlplane, density, hibernation, promotion, realnodes, report, shared, suite, upgrade
from .stats import Results
from .workloads import log

STEPS = ("get", "list", "kubectl", "update", "watch", "apply")
PRODUCT_STEPS = ("controlplane", "promotion", "hibernation", "upgrade", "realnodes", "shared", "density")  # the product's own work, against its floor


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    config.add_arguments(p)
    p.add_argument("--json", type=Path, default=report.DEFAULT_JSON, help="results file (default %(default)s)")
    p.add_argument("--docs", action=argparse.BooleanOptionalAction, default=None,
                   help="rewrite docs/benchmarks.md and docs/benchmarks.png (default: only at --scale >= 1)")
    p.add_argument("--only", default="", help=f"comma-separated subset of {','.join(STEPS + PRODUCT_STEPS)} (create and memory "
                   "always run: they build the population)")
    p.add_argument("--target", action="append", default=[], metavar="NAME=KUBECONFIG",
                   help="an extra target serving ours' objects, e.g. through the host aggregator")
    p.add_argument("--via-aggregator", action=argparse.BooleanOptionalAction,
                   default=os.environ.get("BENCH_VIA_AGGREGATOR", "1") not in ("0", "false", ""),
                   help="add the target 'ours through a host aggregator' (python -m apiservice install --mode "
                   "local); env BENCH_VIA_AGGREGATOR")
    p.add_argument("--workdir", type=Path, help="keep data and logs here (default: a temporary directory, removed)")
    p.add_argument("--controlplane-rounds", type=int, default=20,
                   help="create -> Ready rounds one at a time (ours, then the floor)")
    p.add_argument("--controlplane-concurrent", type=int, default=10,
                   help="VirtualClusters created at once, then as many floors started at once")
    p.add_argument("--hibernation-rounds", type=int, default=3, help="create, hibernate, wake rounds")
    p.add_argument("--upgrade-rounds", type=int, default=3, help="upgrades one minor up under load, ours and the floor")
    p.add_argument("--promotion-nodes", type=int, default=int(os.environ.get("BENCH_PROMOTION_NODES", "5000")),
                   help="kwok nodes in the promotion benchmark's host")
    p.add_argument("--promotion-wanted", type=int, default=int(os.environ.get("BENCH_PROMOTION_WANTED", "500")),
                   help="nodes the promotion benchmark's VirtualCluster asks for")
    p.add_argument("--realnodes-rounds", type=int, default=5,
                   help="rounds of the real-node family (root: kubelet + containerd nodes, hack/realnodes.py)")
    p.add_argument("--shared-pods", type=int,
                   default=int(os.environ["BENCH_SHARED_PODS"]) if "BENCH_SHARED_PODS" in os.environ else None,
                   help="pods of the shared-slice family's Deployment (default 500, times --scale below 1; "
                   "env BENCH_SHARED_PODS)")
    p.add_argument("--shared-rounds", type=int, default=3, help="0 -> N rounds of the shared-slice family")
    p.add_argument("--density-tenants", type=int, default=30,
                   help="tenants the density family creates one after another")
    p.add_argument("--density-idle", type=float, default=60.0,
                   help="seconds of idle CPU measured at each of the density family's tenant counts")
    return p.parse_args(argv)


def _stop_on_sigterm(signum: int, frame: object) -> None:
    """A killed run (``kill``, a CI timeout) stops its servers as Ctrl-C does: through the finally blocks."""
    raise KeyboardInterrupt(f"signal {signum}")


def _save(path: Path, results: Results, meta: dict[str, Any], product: dict[str, dict]) -> report.Document:
    """The run's document (the API suite's results, the machine, each product family's), written to ``path``."""
    document = report.to_document(results, {**meta, "machine": report.machine()})
    document.update(product)
    report.write_json(path, document)
    return document


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    args = parse_args(argv)
    scale = config.from_args(args)
    only = {s.strip() for s in args.only.split(",") if s.strip()} or None
    extra = [(name, Path(path)) for name, _, path in (t.partition("=") for t in args.target)]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="vc-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"bench: {scale.as_dict()} in {workdir}")
    api_only = None if only is None else (only - set(PRODUCT_STEPS)) or {"none"}
    measured: tuple[Results, dict[str, Any]] | None = None
    product: dict[str, dict] = {}
    try:
        results, meta = measured = uvloop.run(suite.run(scale, workdir, extra, api_only, args.via_aggregator))
        if only is None or "controlplane" in only:
            product["controlplane"] = uvloop.run(controlplane.run(workdir / "controlplane", args.controlplane_rounds,
                                                                  args.controlplane_concurrent))
        if only is None or "promotion" in only:
            nodes = max(int(args.promotion_nodes * min(args.scale, 1.0)), 50)
            wanted = max(int(args.promotion_wanted * min(args.scale, 1.0)), 5)
            product["promotion"] = uvloop.run(promotion.run(workdir / "promotion", nodes, wanted))
        if only is None or "hibernation" in only:
            product["hibernation"] = uvloop.run(hibernation.run(workdir / "hibernation",
                                                                rounds=args.hibernation_rounds))
        if only is None or "upgrade" in only:
            product["upgrade"] = uvloop.run(upgrade.run(workdir / "upgrade", rounds=args.upgrade_rounds))
        if only is None or "realnodes" in only:
            product["realnodes"] = realnodes.run(workdir / "realnodes", rounds=args.realnodes_rounds, log=log)
        if only is None or "shared" in only:
            pods = args.shared_pods or max(int(500 * min(args.scale, 1.0)), 10)
            product["shared"] = uvloop.run(shared.run(workdir / "shared", pods, args.shared_rounds, say=log))
        if only is None or "density" in only:
            product["density"] = uvloop.run(density.run(workdir / "density", args.density_tenants,
                                                        args.density_idle, say=log))
    except BaseException:
        log(f"bench failed; logs kept in {workdir / 'log'}")
        if measured is not None:  # a family that fails or is stopped takes nothing measured before it along
            _save(args.json, measured[0], {**measured[1], "incomplete": f"stopped after {', '.join(product) or 'the API suite'}"},
                  product)
            log(f"bench: what was measured before is in {args.json}")
        raise
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    families = {"controlplane": controlplane, "promotion": promotion, "hibernation": hibernation,
                "upgrade": upgrade, "realnodes": realnodes, "shared": shared, "density": density}
    for name, result in product.items():
        if (why := report.add_chart(result, families[name].ratios)) is not None:
            log(f"bench: no chart bars for {name}: {why}")
    document = _save(args.json, results, meta, product)
    print(report.render_text(document))
    for name, result in product.items():  # filled in PRODUCT_STEPS order
        print("\n" + families[name].render(result))
    print(f"\nresults: {args.json}")
    if args.docs if args.docs is not None else args.scale >= 1.0 and only is None:
        report.write_docs(document, blocks=[(family.BEGIN, family.END, family.render_markdown(product[name]))
                                            for name, family in (("controlplane", controlplane), ("shared", shared),
                                                                 ("density", density))
                                            if name in product])
        print(f"docs: {report.DOCS_MD}, {report.DOCS_PNG}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
