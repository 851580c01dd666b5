"""Where the numbers go: a table on stdout, ``bench/results/latest.json``, the summary block of
``docs/benchmarks.md`` and the ratio chart ``docs/benchmarks.png``.

Everything is rendered from the JSON document, so ``python -m bench.report [results.json]``
redraws the docs from a past run without running it again. The markdown file is partly
hand-written (method, caveats, profile findings); only the block between the ``bench:results``
markers is regenerated, so a run never erases the explanations.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import re
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import orjson

from .stats import BASELINE, Ratio, Results

REPO = Path(__file__).resolve().parent.parent
DEFAULT_JSON = REPO / "bench" / "results" / "latest.json"
DOCS_MD = REPO / "docs" / "benchmarks.md"
DOCS_PNG = REPO / "docs" / "benchmarks.png"
DOCS_JSON = REPO / "docs" / "benchmarks.json"  # the run the docs show, to redraw them from
BEGIN, END = "<!-- bench:results:begin -->", "<!-- bench:results:end -->"
RAW_SAMPLES_MAX = 200  # per-round values are kept in the JSON; pooled latencies only as summaries
SIDES = ("client", "server", "aggregator", "etcd", "other")
Document = dict[str, Any]


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


def to_document(results: Results, meta: dict[str, Any]) -> Document:
    metrics = []
    for m in results:
        summary = m.summary()
        if all(len(v) <= RAW_SAMPLES_MAX for v in m.samples.values()):
            summary["samples"] = m.samples
        metrics.append(summary)
    return {"meta": meta, "metrics": metrics, "usage_cores": results.usage_summary()}


def write_json(path: Path, document: Document) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))


def read_json(path: Path) -> Document:
    return orjson.loads(path.read_bytes())


# -- the table ---------------------------------------------------------------------------------------

def _fmt(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.2f}x"


def _others(doc: Document) -> list[str]:
    names: list[str] = []
    for metric in doc["metrics"]:
        names += [t for t in metric["targets"] if t != BASELINE and t not in names]
    return names


def table_rows(doc: Document) -> tuple[list[str], list[list[str]]]:
    others = _others(doc)
    header = ["workload", "unit"]
    for name in [*others, BASELINE]:
        header += [f"{name} p50", f"{name} p99"]
    label = {name: "ratio" if len(others) == 1 else f"ratio {name}" for name in others}
    header += [f"{label[name]} p50" for name in others]
    header += [f"{label[name]} p99" for name in others]
    rows = []
    for m in doc["metrics"]:
        row = [m["title"], m["unit"]]
        for name in [*others, BASELINE]:
            t = m["targets"].get(name)
            row += [_fmt(t["p50"]), _fmt(t["p99"])] if t else ["-", "-"]
        row += [_ratio(m["targets"].get(name, {}).get("ratio_p50")) for name in others]
        row += [_ratio(m["targets"].get(name, {}).get("ratio_p99")) for name in others]
        rows.append(row)
    return header, rows


def render_text(doc: Document) -> str:
    header, rows = table_rows(doc)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for n, row in enumerate([header, *rows]):
        cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1])]
        cells += [c.rjust(w) for c, w in zip(row[2:], widths[2:], strict=True)]
        lines.append("  ".join(cells))
        if n == 0:
            lines.append("-" * len(lines[0]))
    lines += ["ratio = baseline / target for times and sizes, target / baseline for rates: > 1 means "
              "vc-apiserver is better", *render_notes(doc), "", render_usage(doc)]
    return "\n".join(lines)


def render_notes(doc: Document) -> list[str]:
    """Failed workloads and per-metric notes (memory when empty, undelivered watch events, ...)."""
    lines = [f"FAILED {name}: {error}" for name, error in doc["meta"].get("failures", {}).items()]
    if doc["meta"].get("incomplete"):
        lines.append(f"INCOMPLETE: the run was {doc['meta']['incomplete']}")
    for m in doc["metrics"]:
        for note, per_target in m.get("notes", {}).items():
            values = ", ".join(f"{t} {_fmt(v) if isinstance(v, float) else v}" for t, v in per_target.items())
            lines.append(f"{m['key']} {note}: {values}")
    return lines


def _cores(c: dict[str, float]) -> str:
    return " / ".join(f"{c[k]:.2f}" for k in SIDES if k in c)


def render_usage(doc: Document) -> str:
    lines = ["cores busy (median per round): load generator / server / [aggregator /] its etcd / everything else"]
    for workload, per_target in doc["usage_cores"].items():
        lines.append(f"  {workload:<8} " + "   ".join(f"{t}: {_cores(c)}" for t, c in per_target.items()))
    return "\n".join(lines)


# -- docs/benchmarks.md --------------------------------------------------------------------------------

def render_markdown(doc: Document) -> str:
    meta = doc["meta"]
    m = meta["machine"]
    header, rows = table_rows(doc)
    targets = list(dict.fromkeys(t for per_target in doc["usage_cores"].values() for t in per_target))
    out = [BEGIN,
           f"Measured {meta['finished']} on {m['cores']} cores ({m['cpu']}), {m['memory_GiB']} GiB, Linux "
           f"{m['kernel']}; Python {m['python']}, kube-apiserver {meta['versions']['kubernetes']}, etcd "
           f"{meta['versions']['etcd']}; {meta['scale']['objects']:,} objects, {meta['scale']['rounds']} rounds "
           f"per target; the whole run took {meta['duration_s'] / 60:.1f} min{_source(meta)}.",
           "",
           "| " + " | ".join(header) + " |",
           "|" + "|".join(["---", "---"] + ["---:"] * (len(header) - 2)) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    out += ["", *[f"- {line}" for line in render_notes(doc)]]
    out += ["", "Cores busy (median of rounds): load generator / server / [aggregator /] its etcd / everything "
            "else on the machine (other jobs, kubectl):", "",
            "| workload | " + " | ".join(targets) + " |", "|---|" + "---:|" * len(targets)]
    for workload, per_target in doc["usage_cores"].items():
        out.append(f"| {workload} | " + " | ".join(_cores(per_target[t]) if t in per_target else "-"
                                                   for t in targets) + " |")
    out.append(END)
    return "\n".join(out)


def _source(meta: dict[str, Any]) -> str:
    src = meta.get("source")
    if not src:
        return ""
    dirty = f", with {len(src['modified'])} files of apiserver/ modified" if src["modified"] else ""
    return f"; server code at {src['commit']}{dirty}"


def update_markdown(path: Path, block: str, begin: str = BEGIN, end: str = END) -> None:
    """Replace the generated block between ``begin`` and ``end`` (the API suite's, or a product family's),
    or append it when the file has none yet; the hand-written text around it stays."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if begin in text and end in text:
        text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


# -- docs/benchmarks.png -----------------------------------------------------------------------------

def _chart_entries(doc: Document, target: str) -> list[tuple[str, float]]:
    entries: list[tuple[str, float | None]] = []
    prefixes = Counter(m["title"].split(":")[0] for m in doc["metrics"] if m["chart"])
    for m in doc["metrics"]:
        t = m["targets"].get(target)
        if not m["chart"] or not t:
            continue
        short = m["title"].split(":")[0]
        if prefixes[short] > 1:  # two measures of one workload (the watch fan-out's): each by its own name
            short = m["title"]
        entries.append((short + (" p50" if m["chart_p99"] else ""), t.get("ratio_p50")))
        if m["chart_p99"]:
            entries.append((short + " p99", t.get("ratio_p99")))
    return [(label, value) for label, value in entries if value is not None and not math.isnan(value)]


def product_ratios(doc: Document) -> list[Ratio]:
    """The product families' bars, in the order the run measured them (each family's ``chart``); a ratio
    a log axis cannot show (a smoke run's promotion can come out at or under zero) is left out."""
    return [(label, value, goal) for family in doc.values() if isinstance(family, dict)
            for label, value, goal in family.get("chart", []) if math.isfinite(value) and value > 0]


def write_chart(path: Path, doc: Document) -> None:
    """Horizontal bars of every ratio on a log scale around 1: the API suite's, one colour per
    non-baseline target, and beneath them the product families' against their floors, each with its
    goal marked where it has one."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    others = _others(doc)
    per_target = {name: dict(_chart_entries(doc, name)) for name in others}
    labels = [label for label, _ in _chart_entries(doc, others[0])]
    product = product_ratios(doc)
    api_rows = len(labels) * max(1, len(others) * 0.7)
    heights = [api_rows, len(product) * 0.75] if product else [api_rows]
    fig, axes = plt.subplots(len(heights), 1, figsize=(10, 0.5 * sum(heights) + 1.8 * len(heights)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    api_ax = axes[0][0]
    height = 0.8 / len(others)
    colors = ("#2a6f97", "#e09f3e", "#7b2cbf")
    for i, name in enumerate(others):
        ys = [len(labels) - 1 - n + (len(others) - 1 - 2 * i) * height / 2 for n in range(len(labels))]
        values = [per_target[name].get(label, math.nan) for label in labels]
        api_ax.barh(ys, values, height=height, color=colors[i % len(colors)],
                    label=f"{name} vs kube-apiserver + CRD")
        _value_labels(api_ax, ys, values)
    api_ax.set_yticks(range(len(labels)))
    api_ax.set_yticklabels(labels[::-1], fontsize=8)
    api_ax.set_xlabel("ratio (log scale): > 1 means vc-apiserver is faster or smaller than kube-apiserver + CRD")
    api_ax.set_title(f"vc-apiserver vs kube-apiserver serving the same resource as a CRD "
                     f"({doc['meta']['scale']['objects']:,} objects)", fontsize=10)
    api_ax.legend(loc="lower right", fontsize=8)
    _log_axis(api_ax, [v for t in per_target.values() for v in t.values()])
    if product:
        ax = axes[1][0]
        ys = list(range(len(product) - 1, -1, -1))
        values = [value for _, value, _ in product]
        ax.barh(ys, values, height=0.6, color=colors[0])
        _value_labels(ax, ys, values)
        goals = [(goal, y) for (_, _, goal), y in zip(product, ys, strict=True) if goal is not None]
        if goals:
            ax.scatter([g for g, _ in goals], [y for _, y in goals], marker="|", s=300, color="#c1121f",
                       zorder=3, label="goal: the bar should reach it")
            ax.legend(loc="lower right", fontsize=8)
        ax.set_yticks(ys)
        ax.set_yticklabels([label for label, _, _ in product], fontsize=8)
        ax.set_xlabel("ratio (log scale): > 1 means ours is faster or smaller than its floor, or under its goal")
        ax.set_title("the product against its floors and goals", fontsize=10)
        _log_axis(ax, values + [goal for _, goal in goals])
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _value_labels(ax: Any, ys: list[float], values: list[float]) -> None:
    for y, v in zip(ys, values, strict=True):
        if not math.isnan(v):
            ax.text(v, y, f" {v:.2f}x", va="center", ha="left", fontsize=7)


def _log_axis(ax: Any, values: list[float]) -> None:
    """A log x axis around 1, wide enough for every bar and its label."""
    import matplotlib.ticker

    shown = [1.0, *(v for v in values if not math.isnan(v))]
    low, high = min(shown) / 1.5, max(shown) * 2.2
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlim(low, high)
    ticks = [t for t in (0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50) if low <= t <= high]
    ax.set_xticks(ticks, [f"{t:g}x" for t in ticks])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())


def write_docs(doc: Document, md: Path = DOCS_MD, png: Path = DOCS_PNG,
               blocks: Iterable[tuple[str, str, str]] = (), data: Path = DOCS_JSON) -> None:
    """The API suite's block and chart, the product families' own blocks ``(begin, end, block)``, and the
    run itself beside them (``python -m bench.report docs/benchmarks.json`` draws the block and the chart
    again)."""
    write_json(data, doc)
    update_markdown(md, render_markdown(doc))
    write_chart(png, doc)
    for begin, end, block in blocks:
        update_markdown(md, block, begin, end)


def add_chart(result: Document, ratios: Callable[[Document], list[Ratio]]) -> str | None:
    """Puts a family's chart bars in its result (``chart``, which the chart draws); why not, if they
    cannot be drawn: a bar short is no reason to lose the run's results."""
    try:
        result["chart"] = ratios(result)
    except (ArithmeticError, KeyError) as e:
        return repr(e)
    return None


# -- a product family run alone ------------------------------------------------------------------------

def family_main(name: str, description: str | None, argv: list[str] | None,
                flags: Callable[[argparse.ArgumentParser], None],
                measure: Callable[[Path, argparse.Namespace], Awaitable[Document]],
                render: Callable[[Document], str], render_markdown: Callable[[Document], str],
                begin: str, end: str, json_flag: bool = False,
                ratios: Callable[[Document], list[Ratio]] | None = None) -> int:
    """``python -m bench.NAME``: one product family without the API suite, or its docs block redrawn
    from a past run (``--render``). The family brings its options (``flags``) and its measurement;
    the work directory, the JSON (``--json`` keys it by ``name`` and carries the chart bars ``ratios``
    draws, as ``python -m bench`` does) and the docs block are handled alike for every family."""
    p = argparse.ArgumentParser(prog=f"python -m bench.{name}", description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    flags(p)
    p.add_argument("--workdir", type=Path, help="keep data and logs here (default: a temporary directory, removed)")
    if json_flag:
        p.add_argument("--json", type=Path, help="also write the result here")
    p.add_argument("--docs", action="store_true", help="write this family's block of docs/benchmarks.md")
    p.add_argument("--render", type=Path, metavar="JSON", help="only redraw the block from a results file")
    args = p.parse_args(argv)
    if args.render:
        result = read_json(args.render)
        result = result.get(name, result)
    else:
        workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"vc-{name}-"))
        result = asyncio.run(measure(workdir, args))
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
        if ratios is not None and (why := add_chart(result, ratios)) is not None:
            print(f"{name}: no chart bars: {why}", file=sys.stderr)
        print(json.dumps(result, indent=2))
        if json_flag and args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({name: result}, indent=2))
    print(render(result))
    if args.docs or args.render:
        update_markdown(DOCS_MD, render_markdown(result), begin, end)
        print(f"docs: {DOCS_MD}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.report [results.json]``: print the table and redraw the docs from a past run."""
    args = sys.argv[1:] if argv is None else argv
    doc = read_json(Path(args[0]) if args else DEFAULT_JSON)
    print(render_text(doc))
    write_docs(doc)
    print(f"docs: {DOCS_MD}, {DOCS_PNG}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
