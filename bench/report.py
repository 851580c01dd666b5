"""Where the numbers go: a table on stdout, ``bench/results/latest.json``, the summary block of
``docs/benchmarks.md`` and the ratio chart ``docs/benchmarks.png``.

The markdown file is partly hand-written (method, caveats, profile findings); only the block
between the ``bench:results`` markers is regenerated, so a run never erases the explanations.
"""

from __future__ import annotations

import math
import os
import platform
import re
from pathlib import Path
from typing import Any

import orjson

from .stats import BASELINE, Metric, Results

BEGIN, END = "<!-- bench:results:begin -->", "<!-- bench:results:end -->"
RAW_SAMPLES_MAX = 200  # per-round values are kept in the JSON; pooled latencies only as summaries


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kib = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
    return {"cores": os.cpu_count(), "cpu": model, "memory_GiB": round(mem_kib / 1024 / 1024, 1),
            "kernel": platform.release(), "python": platform.python_version()}


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _ratio(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}x"


def _others(results: Results) -> list[str]:
    names: list[str] = []
    for metric in results:
        names += [t for t in metric.samples if t != BASELINE and t not in names]
    return names


def table_rows(results: Results) -> tuple[list[str], list[list[str]]]:
    others = _others(results)
    header = ["workload", "unit"]
    for name in [*others, BASELINE]:
        header += [f"{name} p50", f"{name} p99"]
    header += [f"{'ratio' if len(others) == 1 else name} p50" for name in others]
    header += [f"{'ratio' if len(others) == 1 else name} p99" for name in others]
    rows = []
    for m in results:
        row = [m.title, m.unit]
        for name in [*others, BASELINE]:
            row += [_fmt(m.p50(name)), _fmt(m.p99(name))] if name in m.samples else ["-", "-"]
        row += [_ratio(m.ratio(name, 50)) for name in others]
        row += [_ratio(m.ratio(name, 99)) for name in others]
        rows.append(row)
    return header, rows


def render_text(results: Results) -> str:
    header, rows = table_rows(results)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for n, row in enumerate([header, *rows]):
        cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1])] + [c.rjust(w) for c, w in zip(row[2:], widths[2:],
                                                                                                 strict=True)]
        lines.append("  ".join(cells))
        if n == 0:
            lines.append("-" * len(lines[0]))
    lines.append("ratio = baseline / ours for times and sizes, ours / baseline for rates: > 1 means vc-apiserver "
                 "is better")
    return "\n".join(lines)


def render_usage(usage: dict[str, dict[str, dict[str, float]]]) -> str:
    lines = ["cores busy (median per round): client / server / etcd"]
    for workload, per_target in usage.items():
        parts = [f"{t}: {c.get('client', 0):.2f} / {c.get('server', 0):.2f} / {c.get('etcd', 0):.2f}"
                 for t, c in per_target.items()]
        lines.append(f"  {workload:<8} " + "   ".join(parts))
    return "\n".join(lines)


def to_json(results: Results, meta: dict[str, Any]) -> dict[str, Any]:
    metrics = []
    for m in results:
        summary = m.summary()
        if all(len(v) <= RAW_SAMPLES_MAX for v in m.samples.values()):
            summary["samples"] = m.samples
        metrics.append(summary)
    return {"meta": meta, "metrics": metrics, "usage_cores": results.usage_summary()}


def write_json(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))


def render_markdown(results: Results, meta: dict[str, Any]) -> str:
    m = meta["machine"]
    header, rows = table_rows(results)
    out = [BEGIN,
           f"Measured {meta['finished']} on {m['cores']} cores ({m['cpu']}), {m['memory_GiB']} GiB, Linux "
           f"{m['kernel']}; Python {m['python']}, kube-apiserver {meta['versions']['kubernetes']}, etcd "
           f"{meta['versions']['etcd']}; scale {meta['scale']['objects']:,} objects, {meta['scale']['rounds']} "
           f"rounds per target; whole run {meta['duration_s'] / 60:.1f} min.",
           "",
           "| " + " | ".join(header) + " |",
           "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    out += ["", "Cores busy per side (median of rounds), client / server / etcd:", "",
            "| workload | " + " | ".join(next(iter(results.usage_summary().values()), {}).keys()) + " |",
            "|---|" + "---:|" * len(next(iter(results.usage_summary().values()), {}))]
    for workload, per_target in results.usage_summary().items():
        cells = [f"{c.get('client', 0):.2f} / {c.get('server', 0):.2f} / {c.get('etcd', 0):.2f}"
                 for c in per_target.values()]
        out.append(f"| {workload} | " + " | ".join(cells) + " |")
    out.append(END)
    return "\n".join(out)


def update_markdown(path: Path, block: str) -> None:
    """Replace the generated block, or append it when the file has none yet."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if BEGIN in text and END in text:
        text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


def _chart_entries(results: Results, target: str) -> list[tuple[str, float]]:
    entries: list[tuple[str, float]] = []
    for metric in results:
        if not metric.chart or target not in metric.samples:
            continue
        entries.append((_short(metric) + (" p50" if metric.chart_p99 else ""), metric.ratio(target, 50)))
        if metric.chart_p99:
            entries.append((_short(metric) + " p99", metric.ratio(target, 99)))
    return [(label, value) for label, value in entries if not math.isnan(value)]


def _short(metric: Metric) -> str:
    return metric.title.split(":")[0]


def write_chart(path: Path, results: Results, target: str = "ours") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = _chart_entries(results, target)
    labels = [label for label, _ in entries][::-1]
    values = [value for _, value in entries][::-1]
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(entries) + 1.6))
    colors = ["#2a9d55" if v >= 1 else "#d0543c" for v in values]
    ax.barh(labels, values, color=colors)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:.2f}x", va="center", ha="left", fontsize=8)
    ax.set_xlabel("kube-apiserver+CRD / vc-apiserver (log scale; > 1: vc-apiserver faster or smaller)")
    ax.set_title("vc-apiserver vs kube-apiserver serving the same resource as a CRD")
    ax.tick_params(axis="y", labelsize=8)
    low, high = min([*values, 1.0]), max([*values, 1.0])
    ax.set_xlim(low / 1.6, high * 2.2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
