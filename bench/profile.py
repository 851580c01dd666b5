"""``python -m bench.profile WORKLOAD``: where vc-apiserver spends its CPU during one workload.

Starts vc-apiserver alone (no baseline: nothing else competes for the 2 cores), builds the
population, then samples the server with py-spy while the workload runs, and prints the
functions with the most samples, self and inclusive, as a share of all on-CPU samples. The raw
collapsed stacks are kept (``bench/results/profile-WORKLOAD.txt``) for flame-graph tools.
Profiling slows the server (py-spy stops it to sample), so read shares, not timings.

    python -m bench.profile create,get,list.selector,update
    python -m bench.profile watch --scale 0.1 --watchers 200
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import uvloop

from . import config
from .client import namespace_name
from .config import NAMESPACES
from .servers import Lab
from .watch import WATCH_NAMESPACE, fan_out_watch
from .workloads import APPLY_NAMESPACE, Bench, apply, create, get, kubectl, lists, log, update, warm_up

RESULTS = Path(__file__).resolve().parent / "results"
WORKLOADS: dict[str, Callable[[Bench], Awaitable[None]]] = {
    "create": create, "get": get, "list": lists, "update": update, "watch": fan_out_watch, "apply": apply,
}
_LINE = re.compile(r":\d+\)$")


def _function(frame: str) -> str:
    """``handle (aiohttp/web_protocol.py:512)`` -> ``aiohttp/web_protocol.py:handle``."""
    name, _, where = frame.partition(" (")
    path = _LINE.sub("", where).rstrip(")")
    for marker in ("site-packages/", "/work/main/", "lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{path}:{name}"


def summarize(raw: Path, top: int = 25) -> str:
    """Self and inclusive sample shares per function from py-spy's collapsed stacks."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = [_function(f) for f in stack.split(";")]
        total += count
        own[frames[-1]] += count
        for fn in set(frames):
            inclusive[fn] += count
    if not total:
        return "no samples"
    out = [f"{total} samples on CPU", "", "self %   function"]
    out += [f"{100 * n / total:6.1f}   {fn}" for fn, n in own.most_common(top)]
    out += ["", "incl %   function (project code and the libraries it calls)"]
    shown = [(fn, n) for fn, n in inclusive.most_common() if not fn.startswith(("<", "asyncio/", "uvloop/"))
             and "__main__" not in fn and not fn.endswith((":run", ":_run_once", ":run_forever", ":main"))]
    out += [f"{100 * n / total:6.1f}   {fn}" for fn, n in shown[:top]]
    return "\n".join(out)


async def _record(pid: int, raw: Path, rate: int, work: Awaitable[None]) -> None:
    """py-spy on ``pid`` for exactly the duration of ``work``."""
    spy = await asyncio.create_subprocess_exec(
        shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid),
        "--rate", str(rate), "--format", "raw", "--output", str(raw),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    await asyncio.sleep(1.0)  # let py-spy attach
    try:
        await work
    finally:
        spy.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(spy.communicate(), 60)
        if spy.returncode not in (0, -signal.SIGINT):
            log(f"py-spy exited {spy.returncode}: {err.decode(errors='replace')}")


def _work(b: Bench, workload: str, workdir: Path) -> Awaitable[None]:
    if workload == "kubectl":
        return kubectl(b, str(workdir / "kube-cache"))
    if workload.startswith("list."):  # one list variant alone, e.g. list.selector
        return lists(b, {workload})
    return WORKLOADS[workload](b)


async def profile(scale: config.Scale, workloads: list[str], workdir: Path, rate: int) -> dict[str, Path]:
    """Each workload in turn on one populated server; the raw stacks file of each."""
    lab = Lab(workdir, [namespace_name(i) for i in range(NAMESPACES)] + [WATCH_NAMESPACE, APPLY_NAMESPACE])
    out: dict[str, Path] = {}
    try:
        targets = lab.start(baseline=False)
        pid = targets[0].pids["server"]
        b = Bench(scale, targets)
        b.open()
        try:
            await warm_up(b)
            for workload in workloads:
                raw = RESULTS / f"profile-{workload}.txt"
                if workload == "create":
                    await _record(pid, raw, rate, create(b))
                else:
                    if not b.results.metrics.get("create.wall"):
                        await create(b)
                    await _record(pid, raw, rate, _work(b, workload, workdir))
                out[workload] = raw
        finally:
            await b.close()
    finally:
        lab.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workloads", help=f"comma-separated: {', '.join([*WORKLOADS, 'kubectl'])} or one list variant "
                   "(list.ns, list.ns.paged, list.all, list.all.paged, list.selector); create first if wanted")
    p.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    p.add_argument("--top", type=int, default=25)
    config.add_arguments(p)
    args = p.parse_args(argv)
    scale = config.from_args(args)
    RESULTS.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="vc-bench-profile-"))
    try:
        raws = uvloop.run(profile(scale, [w.strip() for w in args.workloads.split(",") if w.strip()], workdir,
                                  args.rate))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for workload, raw in raws.items():
        print(f"== {workload} (raw stacks: {raw})")
        print(summarize(raw, args.top))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
