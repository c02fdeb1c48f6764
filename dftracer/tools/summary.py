"""dftracer summary: where the time went, per category, name, process, thread."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

from dftracer import _core
from dftracer.tools import common, liveness, runner, work
from dftracer.tools.line_keys import unescape

EXAMPLE = """example:
  dftracer summary ./traces --top 10
  dftracer summary 'run1/trace-*.pfw.gz' --by pid --json > summary.json
  dftracer summary run1/ --ranks              # stragglers of a distributed job
  dftracer summary run1/ --io --top 10         # I/O per file, epoch, rank/worker; Darshan counters
"""

GROUPINGS = {
    "cat": ("cat",),
    "name": ("cat", "name"),
    "pid": ("host", "pid"),  # pids repeat across hosts
    "tid": ("host", "pid", "tid"),
}


def add_parser(sub: Any) -> None:
    p = common.command(
        sub, "summary", help="time, counts and percentiles per category, name, process, thread",
        description="Summarises complete events: count, total, mean, p50 and p99 duration, "
                    "share of the traced time and I/O bytes, per category and name "
                    "(or per --by grouping), and per process and rank.",
        epilog=EXAMPLE)
    p.add_argument("--by", choices=sorted(GROUPINGS), action="append",
                   help="grouping to show (repeatable; default: cat and name)")
    p.add_argument("--top", type=int, default=20, metavar="N",
                   help="rows per table, largest total first (0: all; default 20)")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.add_argument("--no-group", action="store_true",
                   help="in the by-name table, list numbered names (ProfilerStep#3, "
                        "ProfilerStep#4, ...) one by one instead of as one ProfilerStep#* row")
    p.add_argument("--ranks", action="store_true",
                   help="the ranks of a distributed job side by side: step x rank times, "
                        "each rank's time per class, stragglers and their cause")
    p.add_argument("--step", metavar="NAME", default=None,
                   help="with --ranks: the events (NAME or CAT/NAME) that are the steps "
                        "(default: pipeline/iteration, ProfilerStep#N, train.block)")
    p.add_argument("--io", action="store_true",
                   help="I/O per file, per epoch (unique and re-read bytes), per rank with its "
                        "DataLoader workers, and Darshan's POSIX_*/STDIO_* counters")
    p.add_argument("--windows", action="store_true",
                   help="each full-detail window the processes opened: rank, trigger, steps "
                        "and the places of its steps against the normal steps' "
                        "(docs/windows.md)")
    p.add_argument("--memory", action="store_true",
                   help="resident memory per process (rank, DataLoader worker, launcher): "
                        "first/last/peak, growth per step, memory creep and OOM kills")
    p.add_argument("--epoch-from", metavar="NAME", default=None,
                   help="with --io: the events (NAME or CAT/NAME) that start epochs "
                        "(default: pipeline/iteration's epoch, ai.pipeline epochs)")
    p.add_argument("--hang-after", type=float, default=None, metavar="S",
                   help="with --ranks: a job whose ranks waited in a collective that others "
                        "of its group never reached for longer than S seconds when it ended "
                        "hung (default 2; docs/hang.md)")
    p.set_defaults(func=main)


# ---- histogram ---------------------------------------------------------------

def bin_value(b: int) -> float:
    """The duration (us) a histogram bin stands for: exact below 16, else the
    middle of its range (see src/reader/summary.c)."""
    if b < 16:
        return float(b)
    e = (b - 16) // 16 + 4
    sub = (b - 16) % 16
    width = 1 << (e - 4)
    return float(((16 + sub) << (e - 4)) + (width - 1) / 2)


def percentile(hist: Dict[int, int], count: int, q: float, lo: int, hi: int) -> float:
    need = max(1, math.ceil(q * count))
    seen = 0
    for b in sorted(hist):
        seen += hist[b]
        if seen >= need:
            return min(max(bin_value(b), lo), hi)
    return float(hi)


# ---- aggregation -------------------------------------------------------------

_NUMBERED = re.compile(r"#\d+$")


def name_group(name: str) -> str:
    """The by-name row a name belongs to: numbered names share one, e.g.
    ProfilerStep#12 -> ProfilerStep#* (docs/cli.md, "Numbered names")."""
    return _NUMBERED.sub("#*", name)


class Group:
    __slots__ = ("count", "total", "min", "max", "io_bytes", "io_events", "hist", "files")

    def __init__(self) -> None:
        self.count = self.total = self.io_bytes = self.io_events = 0
        self.files = 0  # bit i: the group has events in file i
        self.min = None  # type: Any
        self.max = None  # type: Any
        self.hist: Dict[int, int] = {}

    def add(self, count: int, total: int, lo: int, hi: int, io: int, io_n: int,
            hist: Dict[int, int]) -> None:
        self.count += count
        self.total += total
        self.min = lo if self.min is None else min(self.min, lo)
        self.max = hi if self.max is None else max(self.max, hi)
        self.io_bytes += io
        self.io_events += io_n
        for b, n in hist.items():
            self.hist[b] = self.hist.get(b, 0) + n


def readable(r: Dict[str, Any]) -> bool:
    """Whether a per-file result has events to use: a file read to its end or
    to a torn tail, or a corrupt one up to the corruption (its events before
    it are sound; the command still exits with 2)."""
    if "groups" not in r:
        return False
    return r.get("status") in ("ok", "truncated") or (
        r.get("status") == "corrupt" and r.get("events", 0) > 0)


def bad_duration_message(r: Dict[str, Any]) -> str:
    n = r["bad_durations"]
    return (f"{r['path']}: {n} complete event{'s' if n != 1 else ''} with a bad duration "
            f"(first: line {r['first_bad_duration_line']}, dur {r['first_bad_duration']}); "
            "left out of every time and share")


def _wall_of(files: int, spans: List[int]) -> int:
    """The summed wall time of the files whose bits are set: the time a row's
    share is of (docs/cli.md, "share")."""
    wall = 0
    while files:
        low = files & -files
        wall += spans[low.bit_length() - 1]
        files ^= low
    return wall


def aggregate(results: List[Dict[str, Any]], bys: List[str],
              group_numbered: bool = True) -> Dict[str, Any]:
    """The summary of per-file results; with group_numbered, the by-name table
    has one row per numbered name family (ProfilerStep#*)."""
    files = [r for r in results if readable(r)]
    tables: Dict[str, Dict[Tuple[Any, ...], Group]] = {by: {} for by in bys}
    names: Dict[Tuple[Any, ...], set] = {}  # by-name row -> the names it holds
    spans: List[int] = []  # per file: its wall time (first event to last)
    traced = 0
    ts_min = ts_max = None
    processes: Dict[Tuple[str, int], Dict[str, Any]] = {}
    for index, r in enumerate(files):
        span = r["end_max"] - r["ts_min"] if r["has_ts"] else 0
        spans.append(span)
        bit = 1 << index
        traced += span
        if r["has_ts"]:
            ts_min = r["ts_min"] if ts_min is None else min(ts_min, r["ts_min"])
            ts_max = r["end_max"] if ts_max is None else max(ts_max, r["end_max"])
        proc = processes.setdefault((r["host"], r["pid"]), {
            "host": r["host"], "pid": r["pid"], "rank": r["rank"] if r["rank"] >= 0 else None,
            "process_name": r["process_name"], "files": 0, "events": 0, "complete": 0,
            "wall_us": 0, "busy_us": 0, "io_bytes": 0, "finalized": True, "end_signal": None,
            "ppid": r["ppid"] if r.get("ppid", -1) >= 0 else None,
            "worker": r["worker"] if r.get("worker", -1) >= 0 else None})
        proc["files"] += 1
        proc["events"] += r["events"]
        proc["complete"] += r["complete"]
        proc["wall_us"] += span
        proc["finalized"] = proc["finalized"] and r["finalized"]
        # its `end` names the signal that then ended it: asked to stop, not finished
        proc["end_signal"] = liveness.end_signal(r) or proc["end_signal"]
        for cat, name, pid, tid, count, total, lo, hi, io, io_n, hist, module in r["groups"]:
            proc["busy_us"] += total
            proc["io_bytes"] += io
            row = {"cat": cat, "name": name, "host": r["host"], "pid": pid, "tid": tid}
            for by in bys:
                if by == "name":  # a torch module's forward/backward: a row per module
                    key = (cat, name_group(name) if group_numbered else name, module)
                    names.setdefault(key, set()).add(name)
                else:
                    key = tuple(row[f] for f in GROUPINGS[by])
                g = tables[by].get(key)
                if g is None:
                    g = tables[by][key] = Group()
                g.add(count, total, lo, hi, io, io_n, hist)
                g.files |= bit
    roles = process_roles(list(processes.values()))
    for key, proc in processes.items():
        proc["role"] = roles[key]
    out: Dict[str, Any] = {
        "overview": {
            "files": len(files),
            "processes": len(processes),
            "ranks": sum(1 for v in roles.values() if v == "rank"),
            "workers": sum(1 for v in roles.values() if v == "worker"),
            "events": sum(r["events"] for r in files),
            "complete_events": sum(r["complete"] for r in files),
            "instant_events": sum(r["instant"] for r in files),
            "counter_events": sum(r["counter"] for r in files),
            "metadata_events": sum(r["metadata"] for r in files),
            "bad_lines": sum(r["bad_lines"] for r in files),
            "bad_duration_events": sum(r.get("bad_durations", 0) for r in files),
            "truncated_files": sum(1 for r in files if r["status"] == "truncated"),
            "corrupt_files": sum(1 for r in files if r["status"] == "corrupt"),
            "unfinalized_files": sum(1 for r in files if not r["finalized"]),
            "signalled_files": sum(1 for r in files if liveness.end_signal(r)),
            "wall_us": (ts_max - ts_min) if ts_min is not None else 0,
            "traced_us": traced,
            "io_bytes": sum(p["io_bytes"] for p in processes.values()),
        },
        "processes": sorted(processes.values(),
                            key=lambda p: (p["rank"] is None, p["rank"] or 0, p["host"],
                                           p["pid"])),
    }
    walls: Dict[int, int] = {}  # many rows share their files: sum each set once
    for by in bys:
        rows = []
        for key, g in tables[by].items():
            wall = walls.get(g.files)
            if wall is None:
                wall = walls[g.files] = _wall_of(g.files, spans)
            row: Dict[str, Any] = {}
            for f, v in zip(GROUPINGS[by], key):
                row[f] = unescape(v) if isinstance(v, str) else v
            if by == "name":
                row["module"] = unescape(key[2]) if key[2] is not None else None
            row.update({
                "count": g.count,
                "total_us": g.total,
                "mean_us": g.total / g.count if g.count else 0.0,
                "p50_us": percentile(g.hist, g.count, 0.50, g.min, g.max),
                "p99_us": percentile(g.hist, g.count, 0.99, g.min, g.max),
                "min_us": g.min,
                "max_us": g.max,
                "share": g.total / wall if wall else 0.0,
                "process_wall_us": wall,
                "io_bytes": g.io_bytes,
                "io_events": g.io_events,
            })
            if by == "name":
                row["names"] = len(names[key]) if group_numbered else 1
            rows.append(row)
        # ties by the group's own fields: the C pass's table order is no order
        fields = list(GROUPINGS[by]) + (["module"] if by == "name" else [])
        rows.sort(key=lambda x: (-x["total_us"], -x["count"],
                                 tuple(_tie(x.get(f)) for f in fields)))
        out["by_" + by] = rows
    return out


def process_roles(procs: List[Dict[str, Any]]) -> Dict[Tuple[Any, Any], Optional[str]]:
    """{(host, pid): "rank", "worker" or None} (docs/cli.md, "Ranks"): a
    process is a rank when it names one (its `rank` event or process name)
    and is neither a DataLoader worker (its `worker` event) nor a child of a
    process of the same rank (a worker whose loader wrote no `worker` event
    yet).  The rest (a launcher, a single process without a rank,
    multiprocessing's resource tracker) is neither."""
    by = {(p["host"], p["pid"]): p for p in procs}
    out: Dict[Tuple[Any, Any], Optional[str]] = {}
    for p in procs:
        parent = by.get((p["host"], p.get("ppid"))) if p.get("ppid") is not None else None
        parent = parent if parent is not p else None
        r = p.get("rank")
        if p.get("worker") is not None or (parent is not None and parent.get("rank") is not None
                                            and parent.get("rank") == r):
            out[(p["host"], p["pid"])] = "worker"
        elif r is not None:
            out[(p["host"], p["pid"])] = "rank"
        else:
            out[(p["host"], p["pid"])] = None
    return out


def _tie(v: Any) -> Tuple[int, Any]:
    """A group field as a sort key: numbers in their order, then text, None first."""
    if isinstance(v, int):
        return (1, v)
    return (0, "") if v is None else (2, str(v))


# ---- output ------------------------------------------------------------------

def _cell(row: Dict[str, Any], key: str) -> str:
    if key == "name":
        name = row["name"] if row.get("module") is None else f"{row['name']} [{row['module']}]"
        return f"{name} ({row['names']} names)" if row.get("names", 1) > 1 else name
    return str(row[key])


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def _finalized_cell(p: Dict[str, Any]) -> str:
    """`yes`, `no`, or `yes, then SIGTERM` (its `end` names the signal)."""
    if not p["finalized"]:
        return "no"
    return f"yes, then {liveness.signal_name(p['end_signal'])}" if p.get("end_signal") else "yes"


def render(summary: Dict[str, Any], bys: List[str], top: int) -> str:
    ov = summary["overview"]
    parts = [
        f"{ov['files']} files, {ov['processes']} processes, {ov['events']:,} events "
        f"({ov['complete_events']:,} complete), wall time {common.fmt_us(ov['wall_us'])}, "
        f"traced time {common.fmt_us(ov['traced_us'])} (all processes), "
        f"I/O {common.fmt_bytes(ov['io_bytes'])}"
    ]
    if ov.get("ranks"):
        parts[0] += f"; {_count(ov['ranks'], 'rank')}, {_count(ov.get('workers', 0), 'worker')}"
    if ov["truncated_files"] or ov["unfinalized_files"]:
        parts.append(f"{ov['truncated_files']} files with a truncated tail, "
                     f"{ov['unfinalized_files']} without an end event")
    if ov.get("signalled_files"):
        parts.append(f"{ov['signalled_files']} files end with the signal that ended their "
                     "process (asked to stop; whole all the same)")
    if ov["corrupt_files"]:
        parts.append(f"{ov['corrupt_files']} corrupt files: their events before the "
                     "corruption are counted")
    if ov["bad_duration_events"]:
        parts.append(f"{ov['bad_duration_events']:,} complete events with a bad duration "
                     "(negative, or longer than 365 days): left out of every time and share")
    titles = {"cat": "By category", "name": "By name", "pid": "By process",
              "tid": "By thread"}
    for by in bys:
        rows = summary["by_" + by]
        shown = rows if top <= 0 else rows[:top]
        keys = list(GROUPINGS[by])
        body = [[_cell(r, k) for k in keys] + [
            f"{r['count']:,}", common.fmt_us(r["total_us"]), common.fmt_us(r["mean_us"]),
            common.fmt_us(r["p50_us"]), common.fmt_us(r["p99_us"]), f"{100 * r['share']:.1f}%",
            common.fmt_bytes(r["io_bytes"])] for r in shown]
        more = f" (top {len(shown)} of {len(rows)})" if len(shown) < len(rows) else ""
        right = [i for i, k in enumerate(keys) if k in ("pid", "tid")]
        right += list(range(len(keys), len(keys) + 7))
        parts.append(f"\n{titles[by]}{more}\n" + common.table(
            keys + ["count", "total", "mean", "p50", "p99", "share", "I/O"], body, right))
    procs = summary["processes"]
    shown_p = procs if top <= 0 else procs[:top]
    body = [[str(p["rank"]) if p["rank"] is not None else "-", p["host"], str(p["pid"]),
             p["process_name"], f"{p['events']:,}", common.fmt_us(p["wall_us"]),
             common.fmt_us(p["busy_us"]), common.fmt_bytes(p["io_bytes"]),
             _finalized_cell(p)] for p in shown_p]
    more = f" (first {len(shown_p)} of {len(procs)})" if len(shown_p) < len(procs) else ""
    parts.append(f"\nProcesses{more}\n" + common.table(
        ["rank", "host", "pid", "name", "events", "wall", "busy", "I/O", "finalized"], body,
        [0, 2, 4, 5, 6, 7]))
    return "\n".join(parts)


def collect(args: argparse.Namespace, label: str = "summary") -> Tuple[List[Dict[str, Any]], int]:
    """Summarizes the files args.paths names (locally or on args.dask), reporting
    bad files on stderr; returns the per-file results and the exit status.
    `dftracer report` starts from the same results, so its numbers are these."""
    return _over_paths(args, lambda files: _summaries(files, args, label))


def _over_paths(args: argparse.Namespace,
                run: Callable[[List[str]], Tuple[List[Dict[str, Any]], int]]
                ) -> Tuple[List[Dict[str, Any]], int]:
    """The head `collect` and `collect_ranks` share: args.paths expanded (bad
    arguments reported), then run over the files; the worse exit status."""
    files, status = common.expand_paths(args)
    if not files:
        return [], common.EXIT_BAD_INPUT
    results, st = run(files)
    return results, max(status, st)


def _summaries(files: List[str], args: argparse.Namespace,
               label: str) -> Tuple[List[Dict[str, Any]], int]:
    results = runner.run(work.summarize_file, files, jobs=args.jobs, dask=args.dask,
                         label=label, progress=args.progress)
    status = common.report_file_status(results)
    for r in results:
        why = common.not_a_trace(r)
        if why:
            common.err(f"{r['path']}: {why}")
            r["status"] = "error"
            status = common.EXIT_BAD_INPUT
        elif r.get("status") == "ok" and r.get("events") == 0:
            common.err(f"warning: {r['path']}: no events")
        else:
            common.report_bad_lines([r])
        if r.get("bad_durations") and readable(r):
            common.err("warning: " + bad_duration_message(r))
    return results, status


def collect_ranks(args: argparse.Namespace, label: str = "ranks") -> Tuple[List[Dict[str, Any]], int]:
    """The per-file results of the ranks pass (dftracer.tools.ranks) over
    args.paths, bad files reported as `collect` reports them."""
    return _over_paths(args, lambda files: rank_results(files, args, label))


def rank_results(files: List[str], args: argparse.Namespace,
                 label: str = "ranks") -> Tuple[List[Dict[str, Any]], int]:
    """The ranks pass over files (args: jobs, dask, progress, step), checked."""
    results = runner.run(work.rank_file, files, jobs=args.jobs, dask=args.dask, label=label,
                         progress=args.progress, extra=(getattr(args, "step", None),))
    return results, common.check_results(results)


def _main_ranks(args: argparse.Namespace) -> int:
    from dftracer.tools import ranks, ranks_text

    results, status = collect_ranks(args)
    if not results:
        return status
    from dftracer.tools import hang

    # docs/hang.md: what the ranks were inside of when the job ended (before
    # analyze, which takes the steps' bytes)
    found = hang.post_mortem([r for r in results if r.get("status") != "error"],
                             hang.POST_MORTEM_AFTER if args.hang_after is None
                             else args.hang_after)
    one = one_process_as_rank(results)
    analysis = ranks.analyze(results)
    analysis["hang"] = found
    analysis["single_process"] = None if one is None else \
        {"host": one["host"], "pid": one["pid"], "path": one.get("path")}
    for w in analysis["warnings"]:
        common.err(f"warning: {w}")
    if args.json:
        json.dump(analysis, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        if analysis["hang"]:
            print(common.printable(analysis["hang"]["message"]))
        if one is not None:
            print(f"One process without a rank ({one['host']}:{one['pid']}): its steps are "
                  "split as a rank's, shown as rank 0")
        print(ranks_text.render(analysis, args.top))
        if one is not None and analysis["steps"]:
            print(step_split_table(analysis, args.top))
    return status


def one_process_as_rank(results: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """A job of one process that names no rank (a single-process training
    loop, its DataLoader workers beside it): that process, given rank 0 in
    its ranks-pass result so that its steps are split as a rank's
    (docs/cli.md, "dftracer summary --ranks"); None when a process names a
    rank, or when not exactly one process (not a worker, not started by
    another traced process) has steps."""
    ok = [r for r in results if r.get("status") in ("ok", "truncated") and "sync" in r]
    if any(r.get("own_rank", -1) >= 0 for r in ok):
        return None
    procs = {(r.get("host"), r.get("pid")) for r in ok}
    roots = [r for r in ok if r.get("worker", -1) < 0 and r.get("steps")
             and (r.get("host"), r.get("ppid")) not in procs]
    if len(roots) != 1:
        return None
    roots[0]["own_rank"] = 0
    return roots[0]


def step_split_table(analysis: Dict[str, Any], top: int) -> str:
    """Each step's time by class, ms (one rank: its own split)."""
    from dftracer.tools import ranks

    steps = analysis["steps"]
    shown = steps if top <= 0 else steps[:top]
    body = []
    for st in shown:
        cls = st["by_class_us"] or {}
        dur = st["dur_us"][0] if st["dur_us"] else None
        body.append([str(st["step"]), "-" if dur is None else f"{dur / 1e3:.1f}"]
                    + [f"{cls.get(c, 0) / 1e3:.1f}" for c in ranks.CLASSES])
    more = f" (first {len(shown)} of {len(steps)})" if len(shown) < len(steps) else ""
    return (f"\nStep split, ms{more}\n"
            + common.table(["step", "time"] + [ranks.LABELS[c] for c in ranks.CLASSES], body,
                           list(range(len(ranks.CLASSES) + 2))))


def _main_io(args: argparse.Namespace) -> int:
    from dftracer.tools import iostats

    results, status = iostats.collect(args)
    if not results:
        return status
    analysis = iostats.analyze(results)
    if args.json:
        iostats.write_json(analysis, sys.stdout)
    else:
        print(iostats.render(analysis, args.top))
    return status


def main(args: argparse.Namespace) -> int:
    if args.hang_after is not None and not (args.ranks and args.hang_after >= 0):
        common.err("--hang-after S applies to --ranks, with S >= 0")
        return common.EXIT_BAD_INPUT
    if args.step is not None and not args.ranks:
        common.err("--step NAME applies to --ranks")
        return common.EXIT_BAD_INPUT
    if args.epoch_from is not None and not args.io:
        common.err("--epoch-from NAME applies to --io")
        return common.EXIT_BAD_INPUT
    if args.io and args.ranks:
        common.err("--io and --ranks are two views: give one")
        return common.EXIT_BAD_INPUT
    if args.memory and (args.io or args.ranks):
        common.err("--memory, --io and --ranks are views of their own: give one")
        return common.EXIT_BAD_INPUT
    if args.windows:
        if args.io or args.ranks or args.memory:
            common.err("--windows, --memory, --io and --ranks are views of their own: give one")
            return common.EXIT_BAD_INPUT
        from dftracer.tools import windows

        return windows.main(args)
    if args.memory:
        from dftracer.tools import hang, memory

        # a killed rank's steps, as the post mortem counts them (docs/hang.md);
        # a bad file was reported by the memory pass already
        return memory.main(args, lambda files: hang.dead_last_steps(runner.run(
            work.rank_file, files, jobs=args.jobs, dask=args.dask, label="ranks",
            progress=args.progress, extra=(args.step,))))
    if args.io:
        return _main_io(args)
    if args.ranks:
        return _main_ranks(args)
    results, status = collect(args)
    if not any(readable(r) for r in results):
        return status  # the errors said why; no empty table
    bys = args.by or ["cat", "name"]
    summary = aggregate(results, bys, group_numbered=not args.no_group)
    if args.json:
        json.dump(summary, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(render(summary, bys, args.top))
    return status


assert _core._HIST_BINS == 16 + 36 * 16  # keep bin_value in step with the C side
assert _core._LINE_MAX == 16 << 20 and common.LINE_MAX_TEXT == "16 MiB"
