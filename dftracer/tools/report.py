"""dftracer report: one self-contained HTML page of charts (plotly) showing
where the time went."""

from __future__ import annotations

import argparse
import html
import json
import os
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from dftracer.tools import (analysis, classes, clock_align, common, hang, ranks, ranks_text,
                            runner, summary, work)

EXAMPLE = """example:
  dftracer report ./traces -o report.html
  dftracer report 'run1/trace-*.pfw.gz' -o run1.html --top 30
"""

EXTRA = "report"
EXIT_MISSING_EXTRA = 3
MAX_CATEGORIES = 10  # series per stacked chart; the rest are summed as "other"

DATA_ID = "dftracer-report-data"


def add_parser(sub: Any) -> None:
    p = common.command(
        sub, "report", help="one HTML page of charts: where the time went",
        description="Writes one self-contained HTML page (no network needed to view it) with "
                    "charts of the time per category and process, the top functions by total "
                    "and self time, I/O volume and bandwidth over time, the time of each "
                    "training step and the time spent waiting for data versus computing. "
                    "Its totals are those of 'dftracer summary'. Needs the 'report' extra "
                    "(plotly).",
        epilog=EXAMPLE)
    p.add_argument("-o", "--output", required=True, metavar="OUT.html",
                   help="the HTML file to write")
    p.add_argument("--top", type=int, default=20, metavar="N",
                   help="functions in the top-functions charts (0: all; default 20)")
    p.add_argument("--bins", type=int, default=120, metavar="N",
                   help="time bins of the I/O chart (default 120)")
    p.add_argument("--title", default=None, help="the page's title (default: the paths)")
    p.add_argument("--no-group", action="store_true",
                   help="show numbered names (ProfilerStep#3, ...) one by one in the "
                        "top-functions charts instead of as one ProfilerStep#* bar")
    p.add_argument("--step", metavar="NAME", default=None,
                   help="the events (NAME or CAT/NAME) that are the steps of the Ranks "
                        "section (as summary --ranks --step)")
    p.add_argument("--base", metavar="BASE", default=None,
                   help="an earlier run (trace file, directory or glob) to compare with, "
                        "as `dftracer diff BASE PATHS` does: a section of the page")
    p.add_argument("--no-align", action="store_true",
                   help="keep each host's times as recorded (default: aligned on the "
                        "collectives of their ranks, as merge does)")
    p.set_defaults(func=main)


def missing_extra_message() -> str:
    return (f"dftracer report draws its charts with plotly, which is not installed; "
            f"{common.install_hint(EXTRA)}")


def _import_plotly() -> Any:
    try:
        import plotly  # noqa: F401
        import plotly.graph_objects as go
        import plotly.offline  # noqa: F401
    except ImportError:
        return None
    return go


# ---- data ------------------------------------------------------------------

def build_data(results: List[Dict[str, Any]], args: argparse.Namespace) -> Dict[str, Any]:
    """The report's numbers: the summary of the files (as `dftracer summary
    --by cat --by name --by pid --json` gives it) plus the analysis of their
    events (self time, I/O bins, steps, waiting versus computing)."""
    bys = ["cat", "name", "pid"]
    grouped = not getattr(args, "no_group", False)
    summ = summary.aggregate(results, bys, group_numbered=grouped)
    good = [r for r in results if summary.readable(r)]
    paths = [r["path"] for r in good]
    rank_data, shift, found, dead, what_if = None, {}, None, None, None
    if len({r["host"] for r in good}) > 1 or sum(r["rank"] >= 0 for r in good) > 1:
        per_rank = runner.run(work.rank_file, paths, jobs=args.jobs, dask=args.dask,
                              label="ranks", progress=args.progress,
                              extra=(getattr(args, "step", None),))
        found = hang.post_mortem(per_rank, hang.POST_MORTEM_AFTER)  # before analyze takes the steps
        dead = hang.dead_last_steps(per_rank)  # a killed rank's steps, for the memory section
        from dftracer.tools import whatif  # the What if section: dftracer whatif's numbers

        what_if = whatif.analyze(per_rank)
        rank_data = ranks.analyze(per_rank)
        if not getattr(args, "no_align", False):
            shift = clock_align.file_offsets(per_rank, rank_data["alignment"])
            for line in clock_align.describe_alignment(rank_data["alignment"]):
                common.err(line)
    starts = [r["ts_min"] + shift.get(r["path"], 0) for r in good if r["has_ts"]]
    ends = [r["end_max"] + shift.get(r["path"], 0) for r in good if r["has_ts"]]
    t0 = min(starts) if starts else 0
    span = (max(ends) - t0) if ends else 0
    nbins = max(1, args.bins)
    bin_us = max(1, -(-span // nbins))  # ceil
    items = [(p, t0 - shift.get(p, 0), bin_us) for p in paths]  # a shifted file's own t0
    per_file = runner.run(_analyze, items, jobs=args.jobs, dask=args.dask, label="report",
                          progress=args.progress)
    hosts = {r["path"]: r["host"] for r in good}
    data = {
        "summary": summ,
        "t0_us": t0,
        "bin_us": bin_us,
        "ranks": {f"{p['host']}:{p['pid']}": p["rank"] for p in summ["processes"]},
        "rank_analysis": rank_data,
        "whatif": what_if,
        # docs/hang.md: what the ranks were inside of when the job ended
        "hang": found if rank_data else None,
    }
    data.update(analysis.merge(per_file, hosts, group_numbered=grouped))
    data["diff"] = None
    if getattr(args, "base", None):
        from dftracer.tools import diff

        base, _ = diff.read_run([args.base], args, "base")
        new, _ = diff.read_run(args.paths, args, "ranks")
        if base is not None and new is not None:
            data["diff"] = diff.compare(base, new)
    if any(r["cat"] in ("POSIX", "STDIO") for r in summ["by_cat"]):
        from dftracer.tools import iostats  # the I/O section: summary --io's numbers

        data["io"] = io = iostats.analyze(iostats.read(paths, args, label="io")[0])
        io["files"] = list(io["files"])  # the page's data holds every file's row
    from dftracer.tools import memory  # the memory section: summary --memory's numbers

    mem = memory.analyze(memory.read(paths, args), dead)
    data["memory"] = mem if any(p["samples"] for p in mem["processes"]) else None
    return data


def _analyze(item: Tuple[str, int, int]) -> Dict[str, Any]:
    return analysis.analyze_file(*item)


def _process_labels(summ: Dict[str, Any]) -> Dict[Tuple[str, int], str]:
    procs = summ["processes"]
    hosts = {p["host"] for p in procs}
    labels = {}
    for p in procs:
        where = f"{p['host']} pid {p['pid']}" if len(hosts) > 1 else f"pid {p['pid']}"
        if p.get("role") == "worker":  # a rank's DataLoader worker is not that rank
            who = f"rank {p['rank']} " if p["rank"] is not None else ""
            w = f"worker {p['worker']}" if p.get("worker") is not None else "worker"
            labels[(p["host"], p["pid"])] = f"{who}{w} ({where})"
        else:
            labels[(p["host"], p["pid"])] = (f"rank {p['rank']} ({where})"
                                             if p["rank"] is not None else where)
    return labels


def _label(labels: Dict[Tuple[str, int], str], host: str, pid: int) -> str:
    return labels.get((host, pid)) or (f"{host} pid {pid}" if host else f"pid {pid}")


def _top_categories(values: Dict[str, float], limit: int = MAX_CATEGORIES) -> List[str]:
    cats = sorted(values, key=lambda c: -values[c])
    return cats[:limit]


# ---- charts ------------------------------------------------------------------

def build_figures(go: Any, data: Dict[str, Any], top: int) -> List[Tuple[str, str, Any, str]]:
    """(id, title, figure or None, note) per chart, in page order."""
    from plotly.subplots import make_subplots

    from plotly.colors import qualitative

    summ = data["summary"]
    labels = _process_labels(summ)
    palette = qualitative.Plotly + qualitative.D3
    colors: Dict[str, str] = {}

    def color(cat: str) -> str:  # one colour per category across the charts
        if cat not in colors:
            colors[cat] = palette[len(colors) % len(palette)]
        return colors[cat]

    out: List[Tuple[str, str, Any, str]] = []
    # the legend above the plot: rotated process labels below it stay clear
    layout = dict(template="plotly_white", margin=dict(l=60, r=20, t=60, b=60),
                  legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))

    # 1. time per category: inclusive totals (the summary's) and self time
    by_cat = summ["by_cat"]
    self_cat: Dict[str, int] = {}
    for row in data["self_by_process_cat"]:
        self_cat[row["cat"]] = self_cat.get(row["cat"], 0) + row["self_us"]
    if by_cat:
        cats = [r["cat"] for r in by_cat][::-1]
        fig = go.Figure()
        fig.add_bar(name="total (incl. nested events)", y=cats,
                    x=[r["total_us"] / 1e3 for r in by_cat][::-1], orientation="h")
        fig.add_bar(name="self", y=cats, x=[self_cat.get(c, 0) / 1e3 for c in cats],
                    orientation="h")
        fig.update_layout(barmode="group", xaxis_title="ms", height=max(300, 40 * len(cats) + 150),
                          **layout)
        out.append(("chart-category", "Time per category", fig,
                    "Total: the duration of the category's events (the totals of "
                    "<code>dftracer summary</code>). Self: that time minus the time of the events "
                    "nested in them on the same thread."))
    else:
        out.append(("chart-category", "Time per category", None, "No complete events."))

    # 2. per process: self time per category, stacked
    per_proc: Dict[Tuple[str, int], Dict[str, int]] = {}
    for row in data["self_by_process_cat"]:
        per_proc.setdefault((row["host"], row["pid"]), {})[row["cat"]] = row["self_us"]
    if per_proc:
        order = [(p["host"], p["pid"]) for p in summ["processes"] if (p["host"], p["pid"]) in per_proc]
        order += [k for k in sorted(per_proc) if k not in order]
        shown = _top_categories(self_cat)
        xs = [_label(labels, h, p) for h, p in order]
        fig = go.Figure()
        for cat in shown:
            fig.add_bar(name=cat, x=xs, y=[per_proc[k].get(cat, 0) / 1e3 for k in order],
                        marker_color=color(cat))
        rest = [sum(v for c, v in per_proc[k].items() if c not in shown) for k in order]
        if any(rest):
            fig.add_bar(name="other", x=xs, y=[v / 1e3 for v in rest], marker_color="#b0b0b0")
        fig.update_layout(barmode="stack", yaxis_title="self time, ms", **layout)
        out.append(("chart-process", "Time per category, per process", fig,
                    "Self time of each category in each traced process (summed over its "
                    "threads); the bars add up to the process's traced time without double "
                    "counting nested events."))
    else:
        out.append(("chart-process", "Time per category, per process", None, "No complete events."))

    # 3, 4. top functions by total and by self time
    self_by = {(r["cat"], r["name"]): r["self_us"] for r in data["self_by_name"]}
    total_by: Dict[Tuple[str, str], int] = {}
    for r in summ["by_name"]:  # (the rows of one name's modules summed: the self times' key)
        total_by[(r["cat"], r["name"])] = total_by.get((r["cat"], r["name"]), 0) + r["total_us"]
    for cid, title, key, note in (
            ("chart-top-total", "Top functions by total time", total_by,
             "Largest total duration first (as <code>dftracer summary --by name</code>)."),
            ("chart-top-self", "Top functions by self time", self_by,
             "Largest self time first: the time spent in the function itself, not in the "
             "traced events nested in it.")):
        rows = sorted(key, key=lambda k: -key[k])
        rows = rows[:top] if top > 0 else rows
        if not rows:
            out.append((cid, title, None, "No complete events."))
            continue
        names = [f"{n} [{c}]" for c, n in rows][::-1]
        fig = go.Figure()
        fig.add_bar(name="total", y=names, x=[total_by.get(k, 0) / 1e3 for k in rows][::-1],
                    orientation="h")
        fig.add_bar(name="self", y=names, x=[self_by.get(k, 0) / 1e3 for k in rows][::-1],
                    orientation="h")
        fig.update_layout(barmode="group", xaxis_title="ms", height=max(300, 30 * len(rows) + 150),
                          **layout)
        fig.update_yaxes(automargin=True)
        out.append((cid, title, fig, note))

    # 5. I/O volume and bandwidth over time
    bins = data["io_bins"]
    if bins:
        bin_us = data["bin_us"]
        io_cat: Dict[str, float] = {}
        for b in bins:
            io_cat[b["cat"]] = io_cat.get(b["cat"], 0) + b["bytes"]
        nb = max(b["bin"] for b in bins) + 1
        xs = [(i + 0.5) * bin_us / 1e6 for i in range(nb)]
        fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                            subplot_titles=("volume per interval", "bandwidth"))
        for cat in _top_categories(io_cat):
            vol = [0.0] * nb
            for b in bins:
                if b["cat"] == cat and 0 <= b["bin"] < nb:
                    vol[b["bin"]] += b["bytes"]
            fig.add_trace(go.Bar(name=cat, x=xs, y=[v / 2**20 for v in vol],
                                 legendgroup=cat, marker_color=color(cat)), row=1, col=1)
            fig.add_trace(go.Scatter(name=cat, x=xs,
                                     y=[v / 2**20 / (bin_us / 1e6) for v in vol],
                                     mode="lines", legendgroup=cat, showlegend=False,
                                     line_color=color(cat)),
                          row=2, col=1)
        fig.update_layout(barmode="stack", height=560, **layout)
        fig.update_yaxes(title_text="MiB", row=1, col=1)
        fig.update_yaxes(title_text="MiB/s", row=2, col=1)
        fig.update_xaxes(title_text="seconds since the first event", row=2, col=1)
        out.append(("chart-io", "I/O volume and bandwidth over time", fig,
                    f"Bytes moved by I/O events per {bin_us / 1e3:.3g} ms interval (an event "
                    "spanning intervals is shared out by time), and the same per second, by "
                    "category (all processes). Nested I/O events (a <code>data.io.read</code> "
                    "around a POSIX <code>read</code>) each count in their category."))
    else:
        out.append(("chart-io", "I/O volume and bandwidth over time", None,
                    "No I/O events (set <code>DFTRACER_DATA_DIR</code> to trace file I/O, "
                    "docs/io-tracing.md)."))

    # 6. steps: with the Ranks section, split as it splits them (one partition
    # of the step in both charts); else by category
    ra = data.get("rank_analysis")
    by_class = _steps_by_class(go, ra, layout, color)
    if by_class is not None:
        out.append(by_class)
    steps = [] if by_class is not None else data["steps"]
    # the step kinds by the ranks pass's priority: iteration, ProfilerStep#N, train.block
    kind = next((k for k in ("iteration", "profiler", "train")
                 if any(s["kind"] == k for s in steps)), "train")
    steps = [s for s in steps if s["kind"] == kind]
    if steps:
        by_num: Dict[int, List[Dict[str, Any]]] = {}
        for s in steps:
            by_num.setdefault(s["step"], []).append(s)
        nums = sorted(by_num)
        cat_tot: Dict[str, float] = {}
        for s in steps:
            for c, v in s["by_cat"].items():
                cat_tot[c] = cat_tot.get(c, 0) + v
        shown = _top_categories(cat_tot)
        fig = go.Figure()
        if kind == "train" and any(s["wait_before_us"] for s in steps):
            fig.add_bar(name="waiting for the batch (train.iter)", x=nums,
                        marker_color=color("waiting for data"),
                        y=[sum(s["wait_before_us"] for s in by_num[n]) / len(by_num[n]) / 1e3
                           for n in nums])
        for cat in shown:
            fig.add_bar(name=cat, x=nums, marker_color=color(cat),
                        y=[sum(s["by_cat"].get(cat, 0) for s in by_num[n]) / len(by_num[n]) / 1e3
                           for n in nums])
        rest = [sum(v for s in by_num[n] for c, v in s["by_cat"].items() if c not in shown)
                / len(by_num[n]) / 1e3 for n in nums]
        if any(rest):
            fig.add_bar(name="other", x=nums, y=rest, marker_color="#b0b0b0")
        nproc = len({(s["host"], s["pid"]) for s in steps})
        fig.update_layout(barmode="stack", xaxis_title="step", yaxis_title="ms", **layout)
        what = _STEP_KINDS.get(kind, _STEP_KINDS["train"])
        out.append(("chart-steps", "Time per step", fig,
                    f"{len(nums)} steps ({what}); self time per category inside each step"
                    + (f", the mean over {nproc} processes" if nproc > 1 else "")
                    + ". <i>untraced</i>: step time that no traced event covers."))
    elif by_class is None:
        out.append(("chart-steps", "Time per step", None,
                    "No steps: no <code>pipeline/iteration</code> events (<code>dftracer "
                    "run</code>), none of torch.profiler's <code>ProfilerStep#N</code> "
                    "(docs/torch-profiler.md) nor <code>ai.pipeline.train.iter</code> loops "
                    "(docs/ai.md)."))

    # 7. waiting for data versus computing
    wc = [w for w in data["wait_compute"] if w["busy_us"] > 0]
    if wc:
        xs = [_label(labels, w["host"], w["pid"]) for w in wc]
        fig = go.Figure()
        fig.add_bar(name="waiting for data", x=xs, y=[w["wait_us"] / 1e3 for w in wc],
                    marker_color=color("waiting for data"))
        fig.add_bar(name="computing", x=xs, y=[w["compute_us"] / 1e3 for w in wc],
                    marker_color=color("computing"))
        if any(w.get("comm_us") for w in wc):
            fig.add_bar(name="communication", x=xs, y=[w.get("comm_us", 0) / 1e3 for w in wc],
                        marker_color=color("communication"))
        fig.add_bar(name="other traced", x=xs, marker_color="#b0b0b0",
                    y=[max(0, w["busy_us"] - w["wait_us"] - w["compute_us"]
                           - w.get("comm_us", 0)) / 1e3 for w in wc])
        fig.update_layout(barmode="stack", yaxis_title="ms (wall-clock)", **layout)
        out.append(("chart-wait", "Waiting for data versus computing", fig,
                    "Per process, wall-clock time (threads that overlap count once): in data "
                    "loading (the data class of docs/cli.md, \"Event classes\"), in "
                    "communication (collectives outstanding, on any thread: a compute event "
                    "waiting for one counts here, not as computing), in compute and in other "
                    "traced code."))
    out.extend(rank_figures(go, data.get("rank_analysis"), layout, color))
    return out


# how summary --ranks splits a step, said under both charts that draw it
_CLASS_SPLIT = ("compute, data wait, I/O, communication (including the time the training "
                "thread waited for a collective inside backward or optimizer.step), "
                "checkpoint and other (step time no event covers); nothing counted twice.")

_STEP_KINDS = {"iteration": "the <code>pipeline/iteration</code> events: optimizer steps",
               "profiler": "torch.profiler's <code>ProfilerStep#N</code>",
               "train": "the <code>train.block</code> events of <code>ai.pipeline.train.iter</code>"}


def _steps_by_class(go: Any, ra: Any, layout: Dict[str, Any],
                    color: Any) -> Optional[Tuple[str, str, Any, str]]:
    """"Time per step" of a job with ranks: each step's mean over the ranks,
    split by class as `summary --ranks` and the "Ranks: time per step by
    class" chart split it (communication includes the time the training
    thread waited for a collective inside backward), so the two agree;
    None without ranks."""
    if not ra or len(ra["ranks"]) < 2:
        return None
    steps = [s for s in ra["steps"] if s.get("by_class_us")]
    if not steps:
        return None
    kind = ra.get("step_kind")
    fig = go.Figure()
    xs = [s["step"] for s in steps]
    for c in ranks.CLASSES:
        ys = [s["by_class_us"][c] / 1e3 for s in steps]
        if any(ys):
            fig.add_bar(name=ranks.LABELS[c], x=xs, y=ys, marker_color=color(ranks.LABELS[c]))
    fig.update_layout(barmode="stack", xaxis_title="step", yaxis_title="ms", **layout)
    return ("chart-steps", "Time per step", fig,
            f"{len(steps)} steps ({_STEP_KINDS.get(kind, 'steps') if isinstance(kind, str) else 'steps'}) of "
            f"{len(ra['ranks'])} ranks; each step the mean over the "
            "ranks, split as <code>dftracer summary --ranks</code> splits it (the "
            "\"Ranks: time per step by class\" chart below): " + _CLASS_SPLIT)


def rank_figures(go: Any, ra: Any, layout: Dict[str, Any], color: Any) -> List[Tuple[str, str, Any, str]]:
    """The Ranks section: a step x rank heatmap of each rank's excess over the
    median rank, each rank's time per class stacked, and the straggler lines."""
    if not ra or len(ra["ranks"]) < 2:
        return []
    out: List[Tuple[str, str, Any, str]] = []
    order = ra["rank_order"]
    steps = ra["steps"]
    ylabels = [f"rank {r}" for r in order]
    if steps:
        z = [[None if s["excess_us"][i] is None else s["excess_us"][i] / 1e3 for s in steps]
             for i in range(len(order))]
        text = [[("" if s["dur_us"][i] is None else f"step {s['dur_us'][i] / 1e3:.1f} ms")
                 + (" (straggler)" if s["straggler"] == r else "") for s in steps]
                for i, r in enumerate(order)]
        fig = go.Figure(go.Heatmap(z=z, x=[s["step"] for s in steps], y=ylabels, text=text,
                                   colorscale="Reds", colorbar=dict(title="ms"),
                                   hovertemplate="%{y}, step %{x}: +%{z:.1f} ms over the "
                                                 "others<br>%{text}<extra></extra>"))
        fig.update_layout(xaxis_title="step", height=max(300, min(1200, 22 * len(order) + 160)),
                          **layout)
        fig.update_yaxes(autorange="reversed")
        out.append(("chart-rank-steps", "Ranks: step x rank", fig,
                    "Per step and rank: the rank's lead, its time outside communication "
                    "over the other ranks' median (<code>dftracer summary --ranks</code>). In "
                    "a synchronous job every step lasts as long as its slowest rank and the "
                    "others wait for it in communication: the straggler leads."))
    fig = go.Figure()
    xs = ylabels
    for c in ranks.CLASSES:
        fig.add_bar(name=ranks.LABELS[c], x=xs, marker_color=color(ranks.LABELS[c]),
                    y=[r["by_class_us"][c] / max(r["steps"], 1) / 1e3 for r in ra["ranks"]])
    fig.update_layout(barmode="stack", yaxis_title="ms per step", **layout)
    out.append(("chart-rank-breakdown", "Ranks: time per step by class", fig,
                "Each rank's mean step split as <code>dftracer summary --ranks</code> splits "
                "it: " + _CLASS_SPLIT))
    lines = [html.escape(ranks_text.straggler_line(s)) for s in ra["stragglers"]]
    lines += [html.escape(w) for w in clock_align.describe_alignment(ra["alignment"])]
    out.append(("rank-stragglers", "Ranks: stragglers", None,
                "<br>".join(lines) if ra["stragglers"] else
                "No straggler: no rank leads the others by more than the job's "
                "step-to-step noise allows (docs/cli.md, \"Stragglers\")."
                + ("<br>" + "<br>".join(lines) if lines else "")))
    return out


# ---- page --------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, sans-serif; margin: 0 auto; max-width: 1200px; padding: 0 1em;
       color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
p.note { color: #555; font-size: 0.9em; }
table { border-collapse: collapse; font-size: 0.9em; }
td, th { padding: 2px 10px; border-bottom: 1px solid #ddd; text-align: right; }
td:first-child, th:first-child { text-align: left; }
.chart { min-height: 300px; }
"""


def _table(headers: List[str], rows: List[List[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _caveats(ov: Dict[str, Any]) -> List[str]:
    """What the reader of the page must know about the numbers (as summary
    says it under its overview line)."""
    out = []
    if ov.get("corrupt_files"):
        out.append(f"{ov['corrupt_files']} corrupt files: only their events before the "
                   "corruption are counted.")
    if ov.get("bad_duration_events"):
        out.append(f"{ov['bad_duration_events']:,} complete events with a bad duration "
                   "(negative, or longer than 365 days) are left out of every time and share.")
    return out


def _hang_html(h: Any) -> str:
    """The hang, first thing on the page (docs/hang.md)."""
    if not h:
        return ""
    rows = []
    for s in h["stuck"]:
        where = f"{s['file']}:{s['line']} ({s.get('call') or s.get('function')})" if s.get("file") else ""
        inside = ", ".join(f"{o['name']}" + (f" #{o['seq']}" if "seq" in o else "") +
                           (f" {o['step']}" if "step" in o else "") +
                           (f" {o['file']}" if "file" in o else "") for o in s.get("open", []))
        rows.append([str(s["rank"]), str(s.get("host") or "-"), str(s.get("pid") or "-"),
                     where or "-", inside or "-", str(s.get("state") or "-")])
    note = ("<p class=\"note\">Ranks " + html.escape(", ".join(map(str, h["waiting_ranks"]))) +
            f" waited {h['since_s']:.1f} s in {html.escape(h['collective'])} #{h['seq']} "
            f"({html.escape(str(h['group']))}) when the job ended (docs/hang.md).</p>"
            if h.get("collective") else
            "<p class=\"note\">A rank died without finalizing (docs/hang.md).</p>")
    return ("<h2 id=\"hang\" style=\"color:#b00\">Hang</h2>"
            f"<p style=\"color:#b00;font-weight:bold\">{html.escape(h['message'])}</p>" +
            _table(["stuck rank", "host", "pid", "where (innermost Python frame)", "inside",
                    "state"], rows) + note)


def verdict_lines(data: Dict[str, Any]) -> List[Tuple[str, bool]]:
    """The answer first (issue 52): (line, alarming) for the stragglers and
    their causes, what a step is mostly, and how much of each main process's
    wall time no event covers.  The hang has its own block above."""
    out: List[Tuple[str, bool]] = []
    ra = data.get("rank_analysis")
    if ra and ra.get("ranks"):
        out += [("Straggler: " + ranks_text.straggler_line(s), True) for s in ra["stragglers"]]
        if not ra["stragglers"]:
            out.append((f"No straggler among {len(ra['ranks'])} ranks "
                        f"({len(ra['steps'])} steps; docs/cli.md gives the rule).", False))
        by = {c: sum(r["by_class_us"][c] for r in ra["ranks"]) for c in ranks.CLASSES}
        total = sum(by.values())
        if total:
            parts = sorted(by.items(), key=lambda kv: -kv[1])
            out.append((f"A step ({common.fmt_us(ra['median_step_us'])} median) is "
                        + ", ".join(f"{100 * v / total:.0f} % {ranks.LABELS[c]}"
                                    for c, v in parts if v >= 0.05 * total)
                        + " (every rank's steps, one partition: the chart \"Ranks: time per "
                        "step by class\").", False))
    else:
        shares = traced_line(data)
        if shares:
            out.append((shares, False))
    covered: Dict[Tuple[str, int], int] = {}
    for row in data.get("self_by_process_cat", []):
        key = (row["host"], row["pid"])
        covered[key] = covered.get(key, 0) + row["self_us"]
    # the ranks' main processes (not their DataLoader workers, nor the launcher)
    mains = [p for p in data["summary"]["processes"] if p.get("role") == "rank"] or \
        [p for p in data["summary"]["processes"] if p.get("role") is None][:1] or \
        data["summary"]["processes"][:1]
    low = []  # (who, wall, covered) of the main processes mostly untraced
    for p in mains:
        wall = p["wall_us"]
        cov = min(wall, covered.get((p["host"], p["pid"]), 0))
        if wall and wall - cov >= 0.2 * wall:
            low.append((f"rank {p['rank']}" if p["rank"] is not None else f"pid {p['pid']}",
                        wall, cov))
    if len(low) == 1:
        who, wall, cov = low[0]
        out.append((f"Untraced: {who} ran {common.fmt_us(wall)}; its events cover at most "
                    f"{common.fmt_us(cov)} ({100 * cov / wall:.0f} %). The rest ran outside "
                    "every traced span: imports, setup, code that records no event.", False))
    elif low:
        shares = [100 * cov / wall for _, wall, cov in low]
        out.append((f"Untraced: the events of {len(low)} ranks cover at most "
                    f"{min(shares):.0f} to {max(shares):.0f} % of their wall time "
                    f"({common.fmt_us(min(w for _, w, _ in low))} to "
                    f"{common.fmt_us(max(w for _, w, _ in low))}); the rest ran outside every "
                    "traced span: imports, setup, code that records no event.", False))
    return out


def traced_line(data: Dict[str, Any]) -> str:
    """Where the traced time went, for a job without ranks (one process and
    its workers): the self time of every event by class (docs/cli.md, "Event
    classes"; the tracer's own events in none), the classes of 5 % or more,
    largest first; "" without events."""
    by = dict.fromkeys(classes.CLASSES, 0)
    for r in data.get("self_by_name", []):
        cls = classes.traced_class(r["cat"], r["name"])
        if cls is not None:
            by[cls] += r["self_us"]
    total = sum(by.values())
    if not total:
        return ""
    parts = [(c, v) for c, v in sorted(by.items(), key=lambda kv: -kv[1]) if v >= 0.05 * total]
    nproc = len(data["summary"]["processes"])
    return (f"Traced time ({common.fmt_us(total)} of events' self time"
            + (f", {nproc} processes" if nproc > 1 else "") + "): "
            + ", ".join(f"{100 * v / total:.0f} % {ranks.LABELS[c]}" for c, v in parts)
            + (" (the chart \"Time per step\" below splits each step)." if data.get("steps")
               else "."))


def _verdict_html(data: Dict[str, Any]) -> str:
    lines = verdict_lines(data)
    if not lines:
        return ""
    alarm = " style=\"color:#b00;font-weight:bold\""
    items = "".join(f"<li{alarm if bad else ''}>{html.escape(t)}</li>" for t, bad in lines)
    return f"<h2 id=\"verdict\">Verdict</h2><ul>{items}</ul>"


def _whatif_html(a: Any, top: int) -> str:
    if not a:
        return ""
    from dftracer.tools import whatif

    return whatif.html_section(a, min(top, 10) if top > 0 else 10)


def render_html(go: Any, data: Dict[str, Any], title: str, top: int) -> str:
    import plotly.io as pio
    import plotly.offline

    figures = build_figures(go, data, top)
    # the answer first: the per-step chart right under the verdict, before the
    # tables (the I/O section's files can be many rows); the rest after them
    first = [f for f in figures if f[0] == "chart-steps"]
    figures = [f for f in figures if f[0] != "chart-steps"]
    data["charts"] = [cid for cid, _, fig, _ in first + figures if fig is not None]
    config = {"displaylogo": False, "responsive": True}

    def chart(cid: str, ctitle: str, fig: Any, note: str) -> List[str]:
        return ([f"<h2>{html.escape(ctitle)}</h2>"]
                + ([pio.to_html(fig, include_plotlyjs=False, full_html=False, div_id=cid,
                                config=config, default_height="450px")] if fig is not None else [])
                + [f"<p class=\"note\">{note}</p>"])

    ov = data["summary"]["overview"]
    parts = [
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>{html.escape(title)}</title><style>{_CSS}</style>",
        # script errors are kept for the browser test (tests/tools/test_report_browser.py)
        "<script>window.__dftracer_errors = []; window.addEventListener('error', "
        "function (e) { window.__dftracer_errors.push(String(e.message)); });</script>",
        # plotly.js itself, inline: the page needs no network
        "<script type=\"text/javascript\">" + plotly.offline.get_plotlyjs() + "</script>",
        "</head><body>",
        f"<h1>{html.escape(title)}</h1>",
        "<p>" + html.escape(
            f"{ov['files']} files, {ov['processes']} processes, {ov['events']:,} events "
            f"({ov['complete_events']:,} complete), wall time {common.fmt_us(ov['wall_us'])}, "
            f"traced time {common.fmt_us(ov['traced_us'])} (all processes), "
            f"I/O {common.fmt_bytes(ov['io_bytes'])}.") + "</p>",
        "".join(f"<p>{html.escape(line)}</p>" for line in _caveats(ov)),
        _hang_html(data.get("hang")),
        _verdict_html(data),
        _whatif_html(data.get("whatif"), top),
        *[part for f in first for part in chart(*f)],
        "<h2>By category</h2>",
        _table(["category", "count", "total", "mean", "p50", "p99", "share", "I/O"],
               [[r["cat"], f"{r['count']:,}", common.fmt_us(r["total_us"]),
                 common.fmt_us(r["mean_us"]), common.fmt_us(r["p50_us"]),
                 common.fmt_us(r["p99_us"]), f"{100 * r['share']:.1f}%",
                 common.fmt_bytes(r["io_bytes"])] for r in data["summary"]["by_cat"]]),
        "<p class=\"note\">The same numbers as <code>dftracer summary</code>.</p>",
    ]
    if data.get("diff"):
        from dftracer.tools import diff

        parts.append(diff.html_section(data["diff"], top))
    if data.get("io"):
        from dftracer.tools import iostats

        for ttitle, headers, rows in iostats.html_section(data["io"], top):
            parts += [f"<h2>{html.escape(ttitle)}</h2>", _table(headers, rows)]
        parts.append("<p class=\"note\">The same numbers as <code>dftracer summary --io</code> "
                     "(docs/cli.md).</p>")
    if data.get("memory"):
        from dftracer.tools import memory

        for ttitle, headers, rows in memory.html_section(data["memory"]):
            parts += [f"<h2>{html.escape(ttitle)}</h2>", _table(headers, rows)]
        parts.append("<p class=\"note\">The same numbers as <code>dftracer summary --memory"
                     "</code> (docs/memory.md).</p>")
    for f in figures:
        parts += chart(*f)
    blob = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    parts.append(f"<script type=\"application/json\" id=\"{DATA_ID}\">{blob}</script>")
    parts.append(f"<p class=\"note\">Written by dftracer report on "
                 f"{html.escape(time.strftime('%Y-%m-%d %H:%M:%S'))}.</p></body></html>\n")
    return "\n".join(parts)


def main(args: argparse.Namespace) -> int:
    go = _import_plotly()
    if go is None:
        common.err(missing_extra_message())
        return EXIT_MISSING_EXTRA
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir):
        common.err(f"{args.output}: the directory {out_dir} does not exist")
        return common.EXIT_BAD_INPUT
    results, status = summary.collect(args, label="summary")
    if not any(summary.readable(r) for r in results):
        if results:
            common.err("no readable trace files; no report written")
        return common.EXIT_BAD_INPUT
    data = build_data(results, args)
    if getattr(args, "base", None) and data["diff"] is None:
        status = max(status, common.EXIT_BAD_INPUT)  # the base run's problem was printed
    title = args.title or "dftracer report: " + " ".join(args.paths)
    page = render_html(go, data, title, args.top)
    tmp = args.output + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(tmp, args.output)
    common.say(f"report written to {args.output} ({common.fmt_bytes(len(page))}, "
               f"{len(data['charts'])} charts); open it in a browser", file=sys.stderr)
    return status


def read_data(path: str) -> Dict[str, Any]:
    """The numbers embedded in a report page (for tests and scripts)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start = text.index(f'id="{DATA_ID}">') + len(f'id="{DATA_ID}">')
    end = text.index("</script>", start)
    return json.loads(text[start:end])
