"""dftracer diff BASE NEW: what changed between two runs of a job.

Both runs are read by the ranks pass (``_core._rank_file``, src/reader/ranks.c),
so the classes are the one classifier's and the numbers those of
``summary --ranks``.  Each run becomes *units* (a rank's main process, or the
one process with steps of a job that has no ranks) with their steps, and
the processes they started (DataLoader workers).

Everything is per step of one unit: a class's time per step is, for each
step, the mean over the units of the class's self time in it; a (cat, name)
row's time per step is its self time in the steps of the units' main
processes (or its self time in their workers) over the number of unit-steps.

The noise rule (docs/cli.md, "diff"): a change is significant when it is
larger than each of
  - 3 standard errors of the difference of the two means (Welch's, from
    the robust spreads below),
  - the larger step-to-step spread of the two runs (1.4826 x MAD),
  - 10 % of the larger median step, and 20 us,
so what each run's own steps vary by, and what a long run's means still
drift by, are "within noise".  A (cat, name) row uses its class's threshold
and is significant only when its class is.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from dftracer.tools import common, paths, ranks, summary
from dftracer.tools.diff_verdict import label as _label, ms as _ms, verdict, work as _work

EXAMPLE = """example:
  dftracer diff run1/ run2/                     # what changed, and a verdict
  dftracer diff run1/ run2/ --by rank           # each rank before and after
  dftracer diff run1/ run2/ --json > diff.json
"""

SE_FACTOR, SPREAD_FACTOR, STEP_FLOOR, US_FLOOR = 3.0, 1.0, 0.10, 20.0
MAD_SD = 1.4826  # MAD -> standard deviation of a normal distribution
COUNT_RATIO = 1.5  # a row's count per step changed when it moved by this factor
BYS = ("cat", "name", "rank", "file")

Result = Dict[str, Any]


def add_parser(sub: Any) -> None:
    p = common.command(
        sub, "diff", help="what changed between two runs: step time, classes, names, ranks",
        description="Compares two runs of a job (each a set of trace files, directories or "
                    "globs): the step time before and after, where the change is (per class "
                    "and per category/name, time per step, sorted by contribution to the "
                    "step-time change), per rank when both are multi-rank jobs, and a verdict "
                    "line. A change smaller than the runs' own step-to-step noise is "
                    "reported as within noise.",
        epilog=EXAMPLE, paths=False)
    p.add_argument("base", metavar="BASE", help="the first run: a trace file, directory or glob")
    p.add_argument("new", metavar="NEW", help="the second run, compared with BASE")
    p.add_argument("--by", choices=BYS, action="append",
                   help="tables to show besides the classes (repeatable; default: name, and "
                        "rank for multi-rank jobs; file needs I/O events)")
    p.add_argument("--step", metavar="NAME", default=None,
                   help="the events (NAME or CAT/NAME) that are the steps (as summary "
                        "--ranks --step; default: pipeline/iteration, ProfilerStep#N, "
                        "train.block)")
    p.add_argument("--top", type=int, default=15, metavar="N",
                   help="rows per table (0: all; default 15)")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.add_argument("-j", "--jobs", type=int, default=None,
                   help="worker processes (default: the usable CPU cores)")
    p.add_argument("--dask", metavar="ADDRESS", default=None,
                   help="run the per-file work on the Dask cluster at this scheduler address")
    p.add_argument("--progress", dest="progress", action="store_const", const=True,
                   default=None, help="always show the progress bar")
    p.add_argument("--no-progress", dest="progress", action="store_const", const=False,
                   help="never show the progress bar")
    p.set_defaults(func=main)


# ---- statistics ----------------------------------------------------------------

def _spread(values: Sequence[float]) -> float:
    """The step-to-step spread: 1.4826 x the median absolute deviation."""
    if len(values) < 2:
        return 0.0
    med = statistics.median(values)
    return MAD_SD * statistics.median(abs(v - med) for v in values)


def _stderr(a: Sequence[float], b: Sequence[float]) -> float:
    """The standard error of the difference of the means, from the robust
    spreads (one slow step in a hundred does not hide a change)."""
    return math.sqrt(sum(_spread(v) ** 2 / len(v) for v in (a, b) if len(v) >= 2))


def threshold(a: Sequence[float], b: Sequence[float], step_us: float) -> float:
    """The smallest change of mean(b) - mean(a) that is not noise (module doc)."""
    return max(SE_FACTOR * _stderr(a, b), SPREAD_FACTOR * max(_spread(a), _spread(b)),
               STEP_FLOOR * step_us, US_FLOOR)


def _mean(v: Sequence[float]) -> float:
    return statistics.fmean(v) if v else 0.0


def _p90(v: Sequence[float]) -> float:
    if not v:
        return 0.0
    s = sorted(v)
    return float(s[min(len(s) - 1, int(math.ceil(0.9 * len(s))) - 1)])


# ---- one run ---------------------------------------------------------------------

class StepRow(NamedTuple):
    """One step of a unit, by name (from the pass's _core.RankSteps)."""
    dur: int
    cpu: int   # the step thread's CPU time, -1: unknown
    wait: int  # its run-queue wait, -1: unknown
    by_class: Tuple[int, ...]


class Unit:
    """A rank (or the one process with steps of a job without ranks)."""

    def __init__(self, rank: Optional[int], main: Result, workers: List[Result]) -> None:
        self.rank, self.main, self.workers = rank, main, workers
        st = ranks.Steps(main.get("steps"))
        self.rows = {st.number[i]: StepRow(st.dur[i], st.cpu[i], st.wait[i],
                                           tuple(c[i] for c in st.by_class))
                     for i in range(len(st))}


class Run:
    def __init__(self, label: str, results: List[Result]) -> None:
        self.label = label
        self.files: List[str] = []  # the trace files (read_run sets them)
        self.results = [r for r in results if ranks._ok(r)]
        rank_list, loose, self.warnings = ranks.identify(
            [dict(r) for r in self.results])  # identify pops the step bytes: keep ours
        by_path = {r["path"]: r for r in self.results}
        self.units = [Unit(rk.rank, by_path[rk.main["path"]],
                           [by_path[w["path"]] for w in rk.workers]) for rk in rank_list]
        self.multi_rank = len(self.units) > 1
        if not self.units:
            self.units = _unit_without_ranks(loose)
        self.stragglers = ranks.analyze([dict(r) for r in self.results])["stragglers"] \
            if self.multi_rank else []
        numbers = sorted(set().union(*(u.rows.keys() for u in self.units))) \
            if self.units else []
        self.steps: List[float] = []  # per step: the median over units
        # per class, per step: on the critical path (the unit the others waited
        # for: the least communication wait), and the mean over units
        self.by_class: List[List[float]] = [[] for _ in ranks.CLASSES]
        self.mean_class: List[List[float]] = [[] for _ in ranks.CLASSES]
        # per step, the mean over the units that have it of their step
        # thread's CPU time and run-queue wait (the iterations' cpu_us, wait_us)
        self.cpu: List[float] = []
        self.wait: List[float] = []
        for n in numbers:
            rows = [u.rows[n] for u in self.units if n in u.rows]
            self.steps.append(float(statistics.median(r.dur for r in rows)))
            known = [r for r in rows if r.wait >= 0 and r.cpu >= 0]
            if known:
                self.cpu.append(_mean([r.cpu for r in known]))
                self.wait.append(_mean([r.wait for r in known]))
            critical = min(rows, key=lambda r: (r.by_class[ranks.COMM], -r.dur))
            for c in range(ranks.NCLS):
                self.by_class[c].append(float(critical.by_class[c]))
                self.mean_class[c].append(_mean([r.by_class[c] for r in rows]))
        self.unit_steps = sum(len(u.rows) for u in self.units)
        self.events = sum(r.get("events", 0) for r in self.results)
        starts = [r["ts_min"] for r in self.results if r.get("has_ts")]
        ends = [r["end_max"] for r in self.results if r.get("has_ts")]
        self.wall_us = (max(ends) - min(starts)) if starts else 0
        self.step_kind = next((u.main.get("step_kind") for u in self.units
                               if u.main.get("step_kind")), None)

    def keys(self, rank: Optional[int] = None) -> Dict[Tuple[str, str, str], Tuple[int, float, int]]:
        """(where, cat, name) -> (class, self us, count); where: "main" (the units'
        main processes, time in steps) or "workers" (their workers, all time);
        with rank, that rank's alone."""
        out: Dict[Tuple[str, str, str], Tuple[int, float, int]] = {}
        for u in self.units:
            if rank is not None and u.rank != rank:
                continue
            for where, procs, field in (("main", [u.main], "self_steps"),
                                        ("workers", u.workers, "self_all")):
                for r in procs:
                    for k in r.get("keys", ()):
                        us = getattr(k, field)
                        if us <= 0 and k.count <= 0:
                            continue
                        key = (where, k.cat, k.name)
                        cls, t, n = out.get(key, (k.cls, 0.0, 0))
                        out[key] = (cls, t + us, n + k.count)
        return out


def _unit_without_ranks(loose: List[Result]) -> List[Unit]:
    """A job with no ranks: its process with the most steps, and the processes
    it started."""
    with_steps = [r for r in loose if ranks.nsteps(r)]
    if not with_steps:
        return []
    main = max(with_steps, key=lambda r: (ranks.nsteps(r), r.get("events", 0)))
    pids = {main["pid"]}
    workers: List[Result] = []
    grew = True
    while grew:  # the processes it started, and theirs
        grew = False
        for r in loose:
            if r is not main and r not in workers and r["host"] == main["host"] \
                    and r.get("ppid") in pids:
                workers.append(r)
                pids.add(r["pid"])
                grew = True
    return [Unit(None, main, workers)]


def read_run(where: Sequence[str], args: argparse.Namespace,
             label: str) -> Tuple[Optional[Run], int]:
    """A run from the files, directories and globs `where` names, read by the
    ranks pass (args: jobs, dask, progress, step); (None, 2) when none."""
    path = " ".join(where)
    files, errors = paths.expand(list(where))
    status = common.EXIT_OK
    for arg, msg in errors:
        common.err(f"{arg}: {msg}")
        status = common.EXIT_BAD_INPUT
    if not files:
        if not errors:
            common.err(f"{path}: no trace files")
        return None, common.EXIT_BAD_INPUT
    results, st = summary.rank_results(files, args, label)
    status = max(status, st)
    run = Run(path, results)
    run.files = files
    return run, status


def by_file(a: Run, b: Run, args: argparse.Namespace) -> List[Dict[str, Any]]:
    """Per file: bytes and time in I/O calls in each run (the I/O pass of
    `summary --io`), the largest change of time first."""
    from dftracer.tools import iostats

    def files(r: Run, label: str) -> Dict[str, Dict[str, Any]]:
        results, _ = iostats.read(r.files, args, label=label)
        return {f["path"]: f for f in iostats.analyze(results)["files"]}

    fa, fb = files(a, "base io"), files(b, "new io")
    rows = []
    for path in fa.keys() | fb.keys():
        x, y = fa.get(path), fb.get(path)
        row: Dict[str, Any] = {"path": path, "status": "new" if x is None else
                               "vanished" if y is None else "changed"}
        for f in ("bytes_read", "bytes_written"):
            row["base_" + f] = x[f] if x else 0
            row["new_" + f] = y[f] if y else 0
        for key, r in (("base_time_us", x), ("new_time_us", y)):
            row[key] = (r["read_time_us"] + r["write_time_us"] + r["meta_time_us"]) if r else 0
        row["change_time_us"] = row["new_time_us"] - row["base_time_us"]
        rows.append(row)
    rows.sort(key=lambda r: (-abs(r["change_time_us"]), r["path"]))
    return rows


# ---- the comparison ----------------------------------------------------------------

def _row(base: float, new: float) -> Dict[str, Any]:
    return {"base_us_per_step": round(base, 1), "new_us_per_step": round(new, 1),
            "change_us_per_step": round(new - base, 1)}


def compare(a: Run, b: Run) -> Dict[str, Any]:
    """The dict `diff --json` prints (docs/cli.md, "diff")."""
    step_ref = max(statistics.median(a.steps) if a.steps else 0.0,
                   statistics.median(b.steps) if b.steps else 0.0)
    step_noise = threshold(a.steps, b.steps, step_ref)
    step = {"base_us": round(statistics.median(a.steps), 1) if a.steps else None,
            "new_us": round(statistics.median(b.steps), 1) if b.steps else None,
            "base_p90_us": round(_p90(a.steps), 1), "new_p90_us": round(_p90(b.steps), 1),
            "base_mean_us": round(_mean(a.steps), 1), "new_mean_us": round(_mean(b.steps), 1),
            "base_steps": len(a.steps), "new_steps": len(b.steps),
            "noise_us": round(step_noise, 1)}
    step["change_us"] = round((step["new_us"] or 0.0) - (step["base_us"] or 0.0), 1)
    step["change"] = (step["change_us"] / step["base_us"]) if step["base_us"] else None
    step["significant"] = bool(a.steps and b.steps and abs(step["change_us"]) > step_noise)

    classes = []
    limits: Dict[str, Tuple[float, bool]] = {}
    for c, name in enumerate(ranks.CLASSES):
        lim = threshold(a.by_class[c], b.by_class[c], step_ref)
        row = {"cls": name, **_row(_mean(a.by_class[c]), _mean(b.by_class[c])),
               "noise_us": round(lim, 1)}
        row["significant"] = bool(a.steps and b.steps
                                  and abs(row["change_us_per_step"]) > lim)
        limits[name] = (lim, row["significant"])
        classes.append(row)
    sign = 1.0 if step["change_us"] >= 0 else -1.0
    classes.sort(key=lambda r: (not r["significant"], -sign * r["change_us_per_step"]))

    ka, kb = a.keys(), b.keys()
    fa, fb = _fit(a, ka), _fit(b, kb)
    for c, name in enumerate(ranks.CLASSES):  # each class's time outside its own events
        if fa[1][c] > 0 or fb[1][c] > 0:
            key = ("main", "", RESIDUAL.get(name, "(critical-path rest)"))
            ka[key] = (c, fa[1][c] * max(a.unit_steps, 1), 0)
            kb[key] = (c, fb[1][c] * max(b.unit_steps, 1), 0)
    changes = []
    for key in ka.keys() | kb.keys():
        where, cat, name = key
        ca, ua, na = ka.get(key, (None, 0.0, 0))
        cb, ub, nb = kb.get(key, (None, 0.0, 0))
        c = cb if cb is not None else ca
        cls = ranks.CLASSES[c]
        base = ua / max(a.unit_steps, 1)
        new = ub / max(b.unit_steps, 1)
        if where == "main" and cat:  # the class's critical-path time, split by the names' shares
            base *= fa[0][c]
            new *= fb[0][c]
        if not ua and not ub and na == nb:
            continue  # no time of its own in either run (an enclosing event)
        row = {"cls": cls, "cat": cat, "name": name, "where": where, **_row(base, new),
               "base_count_per_step": round(na / max(a.unit_steps, 1), 3),
               "new_count_per_step": round(nb / max(b.unit_steps, 1), 3)}
        # a worker's events (its reads too) feed the training loop's data wait
        lim, cls_sig = limits["data" if where == "workers" else cls]
        row["significant"] = bool(cls_sig and abs(new - base) > lim)
        row["status"] = "changed" if not cat or (na and nb) else "new" if not na else "vanished"
        cpa, cpb = row["base_count_per_step"], row["new_count_per_step"]
        row["count_changed"] = bool(cpa and cpb and max(cpa, cpb) / min(cpa, cpb) >= COUNT_RATIO)
        changes.append(row)
    # the training path (main) first, by contribution to the step-time change
    changes.sort(key=lambda r: (r["where"] != "main", not r["significant"],
                                -sign * r["change_us_per_step"], r["cat"], r["name"]))

    out: Dict[str, Any] = {
        "sched": _sched(a, b, step_ref),
        "straggler_changes": _straggler_changes(a, b),
        "base": {"paths": a.label, "files": len(a.results), "events": a.events,
                 "wall_us": a.wall_us, "units": len(a.units), "step_kind": a.step_kind},
        "new": {"paths": b.label, "files": len(b.results), "events": b.events,
                "wall_us": b.wall_us, "units": len(b.units), "step_kind": b.step_kind},
        "step": step, "classes": classes, "changes": changes,
        "by_rank": _by_rank(a, b, step_ref) if a.multi_rank and b.multi_rank else [],
        "stragglers": {"base": a.stragglers, "new": b.stragglers},
        "warnings": [f"{a.label}: {w}" for w in a.warnings]
                    + [f"{b.label}: {w}" for w in b.warnings],
    }
    if not a.steps or not b.steps:
        out["warnings"].append("no steps in " + " and ".join(
            r.label for r in (a, b) if not r.steps) + ": times are per run, not per step")
    out["verdict"] = verdict(out)
    return out


RESIDUAL = {"comm": "(waiting inside other events)", "other": "(untraced)"}


def _sched(a: Run, b: Run, step_ref: float) -> Optional[Dict[str, Any]]:
    """The step threads' CPU time and run-queue wait per step in each run (the
    iterations' cpu_us and wait_us), when both runs have them: a job whose
    steps grew while its CPU time did not, and its wait for a CPU did, ran on
    a busier machine."""
    if not a.wait or not b.wait:
        return None
    out: Dict[str, Any] = {}
    for name, va, vb in (("cpu", a.cpu, b.cpu), ("wait", a.wait, b.wait)):
        lim = threshold(va, vb, step_ref)
        row = {**_row(_mean(va), _mean(vb)), "noise_us": round(lim, 1)}
        row["significant"] = abs(row["change_us_per_step"]) > lim
        out[name] = row
    return out


def _straggler_changes(a: Run, b: Run) -> List[Dict[str, Any]]:
    """For each rank that is a straggler in NEW and not in BASE: its own
    events' self time per step (its main process, in its steps) before and
    after, the largest growth first -- what the others waited for, where the
    averaged rows also hold the waiting ranks' longer calls."""
    out = []
    was = {x["rank"] for x in a.stragglers if _work(x)}
    for x in b.stragglers:
        if x["rank"] in was or not _work(x):
            continue
        ua = next((u for u in a.units if u.rank == x["rank"]), None)
        ub = next((u for u in b.units if u.rank == x["rank"]), None)
        if ua is None or ub is None:
            continue
        ka, kb = a.keys(x["rank"]), b.keys(x["rank"])
        rows = []
        for key in ka.keys() | kb.keys():
            where, cat, name = key
            if where != "main":
                continue
            ca, us_a, _ = ka.get(key, (None, 0.0, 0))
            cb, us_b, _ = kb.get(key, (None, 0.0, 0))
            c = cb if cb is not None else ca
            rows.append({"cls": ranks.CLASSES[c], "cat": cat, "name": name,
                         **_row(us_a / max(len(ua.rows), 1), us_b / max(len(ub.rows), 1))})
        rows.sort(key=lambda r: (-r["change_us_per_step"], r["cat"], r["name"]))
        out.append({"rank": x["rank"], "cause_class": x["cause_class"], "rows": rows[:10]})
    return out


def _fit(r: Run, keys: Dict[Tuple[str, str, str], Tuple[int, float, int]]
         ) -> Tuple[List[float], List[float]]:
    """Per class: the factor that fits its main rows to its critical-path time
    per step, and the time per step left over (docs/cli.md, "Names"). The
    rows (means over the units) are first scaled as the class is from its
    mean to the critical path (one rank's forward grew: the mean shows a
    quarter of it); then a class's events can hold more than the class (a
    backward's wait for DDP's all-reduce is comm, not compute): their rows
    shrink to it; or less (that wait, the step's untraced time): the rest is
    a row of its own."""
    per = max(r.unit_steps, 1)
    own = [0.0] * ranks.NCLS
    for (where, _cat, _name), (c, us, _n) in keys.items():
        if where == "main":
            own[c] += us / per
    scale, rest = [1.0] * ranks.NCLS, [0.0] * ranks.NCLS
    for c in range(ranks.NCLS):
        crit, mean = _mean(r.by_class[c]), _mean(r.mean_class[c])
        scale[c] = crit / mean if mean > 0 else 1.0
        own[c] *= scale[c]
        if own[c] > crit:
            scale[c] *= crit / own[c]
        elif crit - own[c] >= 0.5:  # (less is rounding)
            rest[c] = crit - own[c]
    return scale, rest


def _by_rank(a: Run, b: Run, step_ref: float) -> List[Dict[str, Any]]:
    ua = {u.rank: u for u in a.units}
    ub = {u.rank: u for u in b.units}
    rows = []
    for rank in sorted(ua.keys() & ub.keys()):
        ra, rb = list(ua[rank].rows.values()), list(ub[rank].rows.values())
        row: Dict[str, Any] = {"rank": rank,
                               **_row(_mean([r.dur for r in ra]), _mean([r.dur for r in rb]))}
        row["by_class"] = {}
        for c, name in enumerate(ranks.CLASSES):
            va, vb = [r.by_class[c] for r in ra], [r.by_class[c] for r in rb]
            d = _row(_mean(va), _mean(vb))
            d["significant"] = bool(va and vb and abs(d["change_us_per_step"])
                                    > threshold(va, vb, step_ref))
            row["by_class"][name] = d
        row["straggler_base"] = any(s["rank"] == rank for s in a.stragglers)
        row["straggler_new"] = any(s["rank"] == rank for s in b.stragglers)
        rows.append(row)
    return rows


# ---- output ------------------------------------------------------------------------

def render(d: Dict[str, Any], bys: List[str], top: int) -> str:
    s = d["step"]
    parts = [d["verdict"], ""]
    parts.append(common.table(
        ["", "base", "new", "change"],
        [["step median", _fmt(s["base_us"]), _fmt(s["new_us"]),
          _ms(s["new_us"] - s["base_us"]) if s["base_us"] is not None and s["new_us"]
          is not None else "-"],
         ["step p90", _fmt(s["base_p90_us"]), _fmt(s["new_p90_us"]),
          _ms(s["new_p90_us"] - s["base_p90_us"])],
         ["steps", str(s["base_steps"]), str(s["new_steps"]), ""],
         ["wall", _fmt(d["base"]["wall_us"]), _fmt(d["new"]["wall_us"]),
          _ms(d["new"]["wall_us"] - d["base"]["wall_us"])],
         ["events", f"{d['base']['events']:,}", f"{d['new']['events']:,}",
          f"{d['new']['events'] - d['base']['events']:+,}"]], [1, 2, 3]))
    parts.append("\nBy class, per step")
    parts.append(common.table(
        ["class", "base", "new", "change", "noise", ""],
        [[ranks.LABELS[c["cls"]], _fmt(c["base_us_per_step"]), _fmt(c["new_us_per_step"]),
          _ms(c["change_us_per_step"]), _fmt(c["noise_us"]),
          "significant" if c["significant"] else ""] for c in d["classes"]], [1, 2, 3, 4]))
    if "name" in bys or "cat" in bys:
        rows = d["changes"]
        if "cat" in bys and "name" not in bys:
            rows = _by_cat(rows)
        shown = rows if top <= 0 else rows[:top]
        body = [[r["where"], r["cls"], _label(r),
                 _fmt(r["base_us_per_step"]), _fmt(r["new_us_per_step"]),
                 _ms(r["change_us_per_step"]),
                 f"{r['base_count_per_step']:g} -> {r['new_count_per_step']:g}",
                 _flags(r)] for r in shown]
        more = f" (top {len(shown)} of {len(rows)})" if len(shown) < len(rows) else ""
        parts.append(f"\nBy {'name' if 'name' in bys else 'category'}, per step{more}; "
                     "main: the ranks' training processes in their steps, workers: the "
                     "processes they started")
        parts.append(common.table(["where", "class", "name", "base", "new", "change",
                                   "count/step", ""], body, [3, 4, 5]))
    if "rank" in bys and d["by_rank"]:
        body = []
        for r in d["by_rank"][:top] if top > 0 else d["by_rank"]:
            moved = [f"{ranks.LABELS[c]} {_ms(v['change_us_per_step'])}"
                     for c, v in r["by_class"].items() if v["significant"]]
            mark = "new straggler" if r["straggler_new"] and not r["straggler_base"] else \
                "straggler" if r["straggler_new"] else ""
            body.append([str(r["rank"]), _fmt(r["base_us_per_step"]), _fmt(r["new_us_per_step"]),
                         _ms(r["change_us_per_step"]), ", ".join(moved) or "-", mark])
        parts.append("\nBy rank: step time")
        parts.append(common.table(["rank", "base", "new", "change", "significant classes", ""],
                                  body, [0, 1, 2, 3]))
    elif "rank" in bys:
        parts.append("\nBy rank: both runs need two or more ranks")
    if "file" in bys:
        rows = d.get("by_file") or []
        shown = rows if top <= 0 else rows[:top]
        more = f" (top {len(shown)} of {len(rows)})" if len(shown) < len(rows) else ""
        parts.append(f"\nBy file: I/O bytes and time in the run{more}")
        parts.append(common.table(
            ["path", "read", "", "written", "", "time", "", "change", ""],
            [[r["path"], common.fmt_bytes(r["base_bytes_read"]), common.fmt_bytes(r["new_bytes_read"]),
              common.fmt_bytes(r["base_bytes_written"]), common.fmt_bytes(r["new_bytes_written"]),
              _fmt(r["base_time_us"]), _fmt(r["new_time_us"]), _ms(r["change_time_us"]),
              r["status"] if r["status"] != "changed" else ""] for r in shown],
            [1, 2, 3, 4, 5, 6, 7]) if shown else "no I/O events in either run")
    for w in d["warnings"]:
        parts.append(f"warning: {w}")
    return "\n".join(parts)


def _by_cat(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    out: Dict[Tuple[str, str, str], Dict[str, Any]] = {}
    for r in rows:
        k = (r["where"], r["cls"], r["cat"])
        o = out.setdefault(k, {"where": k[0], "cls": k[1], "cat": k[2], "name": "",
                               "base_us_per_step": 0.0, "new_us_per_step": 0.0,
                               "change_us_per_step": 0.0, "base_count_per_step": 0.0,
                               "new_count_per_step": 0.0, "significant": False,
                               "status": "changed", "count_changed": False})
        for f in ("base_us_per_step", "new_us_per_step", "change_us_per_step",
                  "base_count_per_step", "new_count_per_step"):
            o[f] = round(o[f] + r[f], 3)
        o["significant"] = o["significant"] or r["significant"]
    return sorted(out.values(), key=lambda r: (r["where"] != "main", not r["significant"],
                                               -abs(r["change_us_per_step"])))


def _flags(r: Dict[str, Any]) -> str:
    f = [r["status"]] if r["status"] != "changed" else []
    if r["count_changed"]:
        f.append("count")
    if r["significant"]:
        f.append("significant")
    return ", ".join(f)


def _fmt(us: Optional[float]) -> str:
    return "-" if us is None else common.fmt_us(max(0.0, us))


def main(args: argparse.Namespace) -> int:
    a, sa = read_run([args.base], args, "base")
    if a is None:
        return sa
    b, sb = read_run([args.new], args, "new")
    if b is None:
        return sb
    d = compare(a, b)
    bys = args.by or (["name", "rank"] if d["by_rank"] else ["name"])
    if "file" in bys:
        d["by_file"] = by_file(a, b, args)
    for w in d["warnings"]:
        if args.json:
            common.err(f"warning: {w}")
    if args.json:
        json.dump(d, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(render(d, bys, args.top))
    return max(sa, sb)


def html_section(d: Dict[str, Any], top: int) -> str:
    """The comparison as a section of `dftracer report --base` (escaped HTML)."""
    import html

    def table(headers: List[str], rows: List[List[str]]) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                       for r in rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    s = d["step"]
    rows = d["changes"] if top <= 0 else d["changes"][:top]
    return "".join([
        "<h2>Compared with the base run</h2>",
        f"<p><b>{html.escape(d['verdict'])}</b></p>",
        f"<p>{html.escape('base: ' + d['base']['paths'])}</p>",
        table(["", "base", "new"],
              [["step median", _fmt(s["base_us"]), _fmt(s["new_us"])],
               ["step p90", _fmt(s["base_p90_us"]), _fmt(s["new_p90_us"])],
               ["steps", str(s["base_steps"]), str(s["new_steps"])]]),
        table(["class", "base / step", "new / step", "change", "noise", ""],
              [[ranks.LABELS[c["cls"]], _fmt(c["base_us_per_step"]), _fmt(c["new_us_per_step"]),
                _ms(c["change_us_per_step"]), _fmt(c["noise_us"]),
                "significant" if c["significant"] else ""] for c in d["classes"]]),
        table(["where", "class", "name", "base / step", "new / step", "change", ""],
              [[r["where"], r["cls"], _label(r), _fmt(r["base_us_per_step"]),
                _fmt(r["new_us_per_step"]), _ms(r["change_us_per_step"]), _flags(r)]
               for r in rows]),
        "<p class=\"note\">As <code>dftracer diff BASE NEW</code> prints it (docs/cli.md, "
        "\"dftracer diff\"): classes on the critical path of each step, changes within "
        "each run's own step-to-step noise not significant.</p>",
    ])
