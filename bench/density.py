"""Tenant density benchmark: what each tenant control plane costs the machine, as tenants add up.

One vc-apiserver (process runtime) creates VirtualClusters without nodes one after another, each
waited until Ready before the next, up to N. At each reported tenant count (every count up to 10,
then 20, 30, ... and N) it records, with every tenant Ready and nothing else happening:

- create -> Ready of the tenants created so far (p50, p99);
- the resident memory (VmRSS) of each tenant's processes, by component (etcd, kube-apiserver,
  kube-controller-manager, kube-scheduler), found by their command line pointing into the tenant's
  directory; reported as the mean per tenant and the largest tenant's total;
- idle CPU: utime + stime of every tenant process over an idle window, as % of one core, per tenant
  (mean and largest) and for all tenants together;
- vc-apiserver's own RSS and CPU over the same window.

Nothing here tunes the tenants: it measures them as the reconciler starts them (its ``lean`` tuning,
reconciler/runtime/tuning.py), and then (unless ``--tuned-only``) again with ``--tenant-tuning=stock``:
kube's and Go's defaults, what the tuning buys beside what it costs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from reconciler.runtime.process import COMPONENTS
from reconciler.runtime.process.supervisor import processes_under
from reconciler.runtime.tuning import LEAN, STOCK, TenantTuning

from .controlplane import Ours, admin_session, proc_kib, rss_kib, start_standalone
from .stats import Ratio, percentile

BEGIN, END = "<!-- bench:density:begin -->", "<!-- bench:density:end -->"
TICK = os.sysconf("SC_CLK_TCK")
GO_DEFAULT_GOGC = 100  # what a run from before the tuning profiles measured its second pass with


def checkpoints(n: int) -> list[int]:
    """Every count up to 10 (for small N that is every step), then every 10, and N itself."""
    points = [c for c in range(1, min(n, 10) + 1) if n <= 10 or c in (1, 5, 10)]
    return sorted(set(points + list(range(20, n + 1, 10)) + [n]))


def component(pid: int) -> str:
    """The component a tenant process runs, from the program name in its command line."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    for arg in argv[:2]:  # the binary, or the one a wrapper (kube-log-runner) runs
        name = os.path.basename(arg.decode(errors="replace"))
        if name in COMPONENTS:
            return name
    return "other"


def cpu_ticks(pid: int) -> int:
    """utime + stime of a process, in clock ticks (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5), counted after the name


def _tenant_pids(tenants: Path, names: list[str]) -> dict[str, set[int]]:
    return {name: processes_under(tenants / "bench" / name) for name in names}


def pss_kib(pid: int) -> int:
    """Proportional set size: the process's private pages plus its share of pages others map too
    (the same binaries' text, run by every tenant)."""
    return proc_kib(pid, "smaps_rollup", "Pss")


def _memory(pids: set[int], read: Callable[[int], int] = rss_kib) -> dict[str, float]:
    by = dict.fromkeys(COMPONENTS, 0.0)
    for pid in pids:
        kind = component(pid)
        by[kind] = by.get(kind, 0.0) + read(pid) / 1024
    by["total"] = sum(by.values())
    return by


async def _idle(tenants: Path, names: list[str], api_pid: int, seconds: float) -> dict[str, Any]:
    """CPU of every tenant process and of vc-apiserver over ``seconds`` of nothing happening."""
    pids = _tenant_pids(tenants, names)
    before = {name: {pid: cpu_ticks(pid) for pid in ps} for name, ps in pids.items()}
    api_before = cpu_ticks(api_pid)
    started = time.monotonic()
    await asyncio.sleep(seconds)
    elapsed = time.monotonic() - started
    api_after = cpu_ticks(api_pid)
    per_tenant = {}
    by_component = dict.fromkeys(COMPONENTS, 0.0)
    for name in pids:
        # a process that exited during the window counts what it had used before it (0 after)
        used = {pid: 100.0 * max(cpu_ticks(pid) - t, 0) / TICK / elapsed for pid, t in before[name].items()}
        per_tenant[name] = sum(used.values())
        for pid, pct in used.items():
            kind = component(pid)
            by_component[kind] = by_component.get(kind, 0.0) + pct / len(pids)
    return {"window_s": elapsed, "per_tenant_pct": per_tenant, "per_tenant_pct_by_component": by_component,
            "vc_apiserver_pct": 100.0 * (api_after - api_before) / TICK / elapsed}


async def _stop_tenants(tenants: Path, grace: float = 10.0) -> None:
    """The tenant processes outlive vc-apiserver (they are its children only by start): SIGTERM
    them all, then SIGKILL what is left after ``grace`` seconds."""
    pids = processes_under(tenants)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while pids and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            pids = {pid for pid in pids if Path(f"/proc/{pid}").exists() and not _zombie(pid)}
        if not pids:
            return


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


async def run(workdir: Path, tenants_wanted: int = 30, idle_s: float = 60.0,
              say: Callable[[str], None] = print, untuned: bool = True) -> dict[str, Any]:
    """The tenants as vc-apiserver tunes them, then (``untuned``) again with kube's and Go's defaults, in the
    same run: what the tuning buys, side by side."""
    passes = [await _pass(workdir, tenants_wanted, idle_s, say, LEAN)]
    if untuned:
        passes.append(await _pass(workdir, tenants_wanted, idle_s, say, STOCK))
    return {
        "measured": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "tenants": tenants_wanted, "idle_s": idle_s, "cpus": os.cpu_count(),
        "create_to_ready_s": passes[0]["create_to_ready_s"], "steps": passes[0]["steps"], "passes": passes,
    }


async def _pass(workdir: Path, tenants_wanted: int, idle_s: float, say: Callable[[str], None],
                tuning: TenantTuning) -> dict[str, Any]:
    say(f"density: tenants with the {tuning.name} tuning")
    pki_files, etcd, api = start_standalone(workdir / tuning.name, "--tenant-tuning", tuning.name)
    tenants = workdir / tuning.name / "tenants"
    points = checkpoints(tenants_wanted)
    ready_s: list[float] = []
    steps: list[dict[str, Any]] = []
    names: list[str] = []
    try:
        api_pid = api.proc.pid
        assert api_pid, "vc-apiserver has a pid"
        async with admin_session(pki_files, api) as session:
            ours = Ours(api, session)
            for i in range(tenants_wanted):
                name = f"density-{i}"
                ready_s.append(await ours.create_until_ready(name))
                names.append(name)
                say(f"density: {name} Ready in {ready_s[-1]:.2f}s")
                if len(names) not in points:
                    continue
                idle = await _idle(tenants, names, api_pid, idle_s)
                pids = _tenant_pids(tenants, names)
                memory = {name: _memory(ps) for name, ps in pids.items()}
                pss = {name: _memory(ps, pss_kib) for name, ps in pids.items()}
                totals = [m["total"] for m in memory.values()]
                cpu = list(idle["per_tenant_pct"].values())
                steps.append({
                    "tenants": len(names),
                    "create_to_ready_p50_s": statistics.median(ready_s),
                    "create_to_ready_p99_s": percentile(ready_s, 99),
                    "rss_mib_mean_by_component": {
                        c: statistics.fmean(m.get(c, 0.0) for m in memory.values()) for c in (*COMPONENTS, "other")},
                    "rss_mib_per_tenant_mean": statistics.fmean(totals),
                    "rss_mib_per_tenant_max": max(totals),
                    "rss_mib_all_tenants": sum(totals),
                    "pss_mib_per_tenant_mean": statistics.fmean(m["total"] for m in pss.values()),
                    "pss_mib_all_tenants": sum(m["total"] for m in pss.values()),
                    "idle_cpu_pct_per_tenant_mean": statistics.fmean(cpu),
                    "idle_cpu_pct_mean_by_component": idle["per_tenant_pct_by_component"],
                    "idle_cpu_pct_per_tenant_max": max(cpu),
                    "idle_cpu_pct_all_tenants": sum(cpu),
                    "idle_window_s": idle["window_s"],
                    "vc_apiserver_rss_mib": rss_kib(api_pid) / 1024,
                    "vc_apiserver_idle_cpu_pct": idle["vc_apiserver_pct"],
                    "per_tenant": {n: {"rss_mib": memory[n], "pss_mib": pss[n], "idle_cpu_pct": idle["per_tenant_pct"][n]}
                                   for n in names},
                })
                s = steps[-1]
                say(f"density: {len(names)} tenants: {s['rss_mib_per_tenant_mean']:.0f} MiB/tenant, "
                    f"{s['idle_cpu_pct_per_tenant_mean']:.2f}% idle CPU/tenant, vc-apiserver "
                    f"{s['vc_apiserver_rss_mib']:.0f} MiB {s['vc_apiserver_idle_cpu_pct']:.2f}%")
    finally:
        api.stop()
        etcd.stop()
        await _stop_tenants(tenants)
        shutil.rmtree(tenants, ignore_errors=True)
    return {"tuning": tuning.name, "gogc": tuning.gogc, "create_to_ready_s": ready_s, "steps": steps}


def _component_cells(s: dict[str, Any]) -> list[str]:
    return [f"{s['rss_mib_mean_by_component'][c]:.0f}" for c in COMPONENTS]


def _slacks() -> str:
    """The lean profile's timer slack in words: "50 ms for etcd, kube-controller-manager and kube-scheduler, 20 ms
    for kube-apiserver"."""
    by_slack: dict[int, list[str]] = {}
    for binary, ns in LEAN.timer_slack_ns.items():
        by_slack.setdefault(ns, []).append(binary)
    def listed(names: list[str]) -> str:
        return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return ", ".join(f"{ns / 1e6:g} ms for {listed(sorted(binaries))}"
                     for ns, binaries in sorted(by_slack.items(), reverse=True))


def _passes(r: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's passes (a run from before the untuned pass has one, with the GC it had then)."""
    return r.get("passes") or [{"gogc": GO_DEFAULT_GOGC, "steps": r["steps"]}]


def _label(one: dict[str, Any]) -> str:
    """A pass's tuning: its profile's name, or the GC target alone for a run from before the profiles."""
    return f"{one['tuning']} (GOGC={one['gogc']})" if "tuning" in one else f"GOGC={one['gogc']}"


GOAL_PSS_MIB, GOAL_IDLE_CPU_PCT = 200.0, 1.0


def ratios(r: dict[str, Any]) -> list[Ratio]:
    """The chart's bars at the run's largest tenant count: each tuning's PSS and idle CPU per tenant against
    the goals (goal / ours, > 1: under the goal), and the tuning's own gain (stock / lean)."""
    last = {one.get("tuning", ""): one["steps"][-1] for one in _passes(r) if one["steps"]}
    out: list[Ratio] = []
    for tuning, s in last.items():
        n = s["tenants"]
        if "pss_mib_per_tenant_mean" in s:
            out.append((f"density, {n} tenants {tuning}: PSS per tenant against {GOAL_PSS_MIB:.0f} MiB",
                        GOAL_PSS_MIB / s["pss_mib_per_tenant_mean"], 1.0))
        out.append((f"density, {n} tenants {tuning}: idle CPU per tenant against {GOAL_IDLE_CPU_PCT:g} %",
                    GOAL_IDLE_CPU_PCT / s["idle_cpu_pct_per_tenant_mean"], 1.0))
    lean, stock = last.get(LEAN.name), last.get(STOCK.name)
    if lean and stock:
        out.append((f"density, {lean['tenants']} tenants: idle CPU, {STOCK.name} / {LEAN.name} tuning",
                     stock["idle_cpu_pct_per_tenant_mean"] / lean["idle_cpu_pct_per_tenant_mean"], None))
        if "pss_mib_per_tenant_mean" in lean and "pss_mib_per_tenant_mean" in stock:
            out.append((f"density, {lean['tenants']} tenants: PSS, {STOCK.name} / {LEAN.name} tuning",
                         stock["pss_mib_per_tenant_mean"] / lean["pss_mib_per_tenant_mean"], None))
    return out


def render(r: dict[str, Any]) -> str:
    head = (f"{'tenants':>7} {'ready p50':>9} {'p99':>6} {'etcd':>6} {'apisrv':>6} {'kcm':>6} {'sched':>6} "
            f"{'MiB/tn':>7} {'max':>6} {'PSS/tn':>7} {'cpu%/tn':>8} {'max':>6} {'vc MiB':>7} {'vc cpu%':>8}")
    lines = [f"tenant density (process runtime, no nodes; idle window {r['idle_s']:.0f} s; RSS in MiB, mean per "
             f"tenant by component; CPU in % of one core)"]
    for one in _passes(r):
        lines += [f"  tenant components with the tuning {_label(one)}", "  " + head]
        lines += ["  " + _text_row(s) for s in one["steps"]]
    return "\n".join(lines)


def _text_row(s: dict[str, Any]) -> str:
    return " ".join([
        f"{s['tenants']:>7}", f"{s['create_to_ready_p50_s']:>8.2f}s", f"{s['create_to_ready_p99_s']:>5.2f}s",
        *(f"{c:>6}" for c in _component_cells(s)),
        f"{s['rss_mib_per_tenant_mean']:>7.0f}", f"{s['rss_mib_per_tenant_max']:>6.0f}",
        f"{s.get('pss_mib_per_tenant_mean', float('nan')):>7.0f}", f"{s['idle_cpu_pct_per_tenant_mean']:>8.2f}",
        f"{s['idle_cpu_pct_per_tenant_max']:>6.2f}", f"{s['vc_apiserver_rss_mib']:>7.0f}",
        f"{s['vc_apiserver_idle_cpu_pct']:>8.2f}"])


def render_markdown(r: dict[str, Any]) -> str:
    rows = ["| " + " | ".join([
        _label(one), str(s["tenants"]), f"{s['create_to_ready_p50_s']:.2f} / {s['create_to_ready_p99_s']:.2f}",
        *_component_cells(s), f"{s['rss_mib_per_tenant_mean']:.0f} (max {s['rss_mib_per_tenant_max']:.0f})",
        f"{s['pss_mib_per_tenant_mean']:.0f}" if "pss_mib_per_tenant_mean" in s else "",
        f"{s['idle_cpu_pct_per_tenant_mean']:.2f} (max {s['idle_cpu_pct_per_tenant_max']:.2f})",
        f"{s['rss_mib_all_tenants']:.0f}" + (f" (PSS {s['pss_mib_all_tenants']:.0f})" if "pss_mib_all_tenants" in s else ""),
        f"{s['vc_apiserver_rss_mib']:.0f} MiB, {s['vc_apiserver_idle_cpu_pct']:.2f} %"]) + " |"
        for one in _passes(r) for s in one["steps"]]
    return "\n".join([
        BEGIN,
        f"Measured {r['measured']}: up to {r['tenants']} tenants (process runtime, no nodes), created one after "
        f"another, each Ready before the next; idle window {r['idle_s']:.0f} s on {r['cpus']} CPUs. RSS is VmRSS "
        "in MiB, the mean per tenant by component; idle CPU is utime + stime over the window, in % of one core "
        f"(goal: ≤ {GOAL_PSS_MIB:.0f} MiB and ≤ {GOAL_IDLE_CPU_PCT:g} % per tenant). RSS counts the binaries' shared pages in every tenant; PSS "
        "splits them among the processes mapping them, so it is what each tenant adds. Each count is measured "
        f"twice in the same run: with vc-apiserver's tuning of the tenant components ({LEAN.name}: GOGC={LEAN.gogc}, "
        "the apiserver's watch cache and storage metric polls off, GOMAXPROCS=1 but for the apiserver's 2, "
        f"a timer slack of {_slacks()}), then "
        f"with kube's and Go's defaults ({STOCK.name}).",
        "",
        "| tenant tuning | tenants | create → Ready p50 / p99 (s) | etcd | kube-apiserver | kube-controller-manager "
        "| kube-scheduler | RSS per tenant (MiB) | PSS per tenant (MiB) | idle CPU per tenant (%) "
        "| all tenants' RSS (MiB) | vc-apiserver RSS, idle CPU |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        *_cpu_by_component(r),
        END,
    ])


def _cpu_by_component(r: dict[str, Any]) -> list[str]:
    """Where each pass's idle CPU goes at its largest count: the mean per tenant of each component."""
    lines = [f"- {_label(one)}, {s['tenants']} tenants: " + ", ".join(
        f"{c} {s['idle_cpu_pct_mean_by_component'].get(c, 0.0):.2f} %" for c in COMPONENTS)
        for one in _passes(r) if one["steps"] and "idle_cpu_pct_mean_by_component" in (s := one["steps"][-1])]
    return ["", "Idle CPU per tenant by component:", *lines] if lines else []


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.density [--tenants N] [--idle S] [--docs]``: this family alone (no API suite);
    ``--render results.json`` redraws its block of docs/benchmarks.md from a past run's ``density``."""
    import argparse

    from . import report
    from .workloads import log

    def flags(p: argparse.ArgumentParser) -> None:
        p.add_argument("--tenants", type=int, default=30, help="tenants to create, one after another")
        p.add_argument("--idle", type=float, default=60.0, help="idle window in seconds at each reported count")
        p.add_argument("--tuned-only", action="store_true",
                       help="skip the second pass with kube's and Go's defaults for the tenant components "
                            "(--tenant-tuning=stock)")

    return report.family_main("density", __doc__, argv, flags,
                              lambda workdir, args: run(workdir, args.tenants, args.idle, say=log,
                                                                    untuned=not args.tuned_only),
                              render, render_markdown, BEGIN, END, json_flag=True, ratios=ratios)


if __name__ == "__main__":
    import sys

    sys.exit(main())
