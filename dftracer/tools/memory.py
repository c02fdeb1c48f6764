"""`dftracer summary --memory`: the resident memory of every process of a
run (docs/memory.md), read by the C memory pass (src/reader/memory.c):
per process its first, last and peak resident bytes and growth per step,
the processes whose memory creeps, and those killed while growing or near
their memory limit (the kernel's OOM killer, most likely)."""

from __future__ import annotations

import argparse
import array
import json
import statistics
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

from dftracer import _core
from dftracer.tools import common, liveness, runner, work

MIB = 1 << 20
CREEP_BYTES_PER_STEP = MIB  # a robust slope at least this ...
CREEP_MIN_STEPS = 20        # ... over at least this many steps
OOM_NEAR_LIMIT = 0.5        # a killed process holding this share of its cgroup's limit
_PAIRS_MAX = 400            # step samples Theil-Sen uses (evenly thinned beyond)
_TAIL = 50                  # the last samples a killed process's rise is read from
OOM_RISE = 64 * MIB         # ... which make it "growing" when they rose this much


def memory_file(path: str) -> Dict[str, Any]:
    """One trace's memory samples, limit, end and top spans (src/reader/memory.c)."""
    try:
        return _core._memory_file(path)
    except OSError as exc:
        return work.failure(path, exc)


def theil_sen(points: List[Tuple[int, int]]) -> float:
    """The median of the slopes between every two points of distinct x."""
    if len(points) > _PAIRS_MAX:
        step = len(points) / _PAIRS_MAX
        points = [points[int(i * step)] for i in range(_PAIRS_MAX)]
    slopes = [(y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(points)
              for (x2, y2) in points[i + 1:] if x2 != x1]
    return statistics.median(slopes) if slopes else 0.0


def _end(r: Dict[str, Any]) -> str:
    """finalized, exited (asked to stop: its `end` names the signal that
    ended it, or no `end` but its SIGTERM stacks), running (no `end` yet:
    the one rule of tools/liveness.py), killed or unknown."""
    return liveness.ending(bool(r.get("finalized")), bool(r.get("sigterm")), r.get("host"),
                           r.get("pid"), r.get("path"),
                           r.get("ts_max") if r.get("has_ts") else None,
                           signalled=liveness.end_signal(r))


def _end_cell(p: Dict[str, Any]) -> str:
    """The `end` column: `exited (SIGTERM)` when the `end` names the signal."""
    sig = p.get("end_signal")
    return f"{p['end']} ({liveness.signal_name(sig)})" if sig else p["end"]


def _role(r: Dict[str, Any], ranks_by_ppid: Dict[int, int]) -> str:
    if r.get("worker", -1) >= 0:
        return "worker"
    if r["rank"] is None and ranks_by_ppid.get(r.get("pid", -1), 0):
        return "launcher"
    return "main"


def _first_step(points: List[Tuple[int, int]], slope: float) -> Optional[int]:
    """The step from which the memory keeps growing: the first sample after
    which the growth per step stays at half the slope or more."""
    start = None
    for (s1, r1), (s2, r2) in zip(points, points[1:]):
        if (r2 - r1) / (s2 - s1) >= slope / 2:
            start = s1 if start is None else start
        else:
            start = None
    return start


_WAITING = ("pipeline", "comm", "dataloader")  # steps, collectives, waits for batches


def _span(r: Dict[str, Any]) -> Optional[str]:
    """The span (cat/name) that took most of the process's time outside the
    steps themselves and the waits (collectives, the main process's wait for
    a batch): where its steps' work, and so their growth, happened."""
    for cat, name, _count, _total in r.get("spans", []):
        if cat not in _WAITING:
            return f"{cat}/{name}"
    return None


def _process(r: Dict[str, Any], ranks_by_ppid: Dict[int, int]) -> Dict[str, Any]:
    raw = array.array("q", r.get("samples", b""))
    samples = [(raw[i], raw[i + 1], raw[i + 2]) for i in range(0, len(raw), 3)]
    samples.sort()
    steps = sorted({s: rss for _ts, rss, s in samples if s >= 0}.items())
    slope = theil_sen(steps) if len(steps) >= 3 else 0.0
    rss = [x[1] for x in samples]
    p: Dict[str, Any] = {
        "rank": r["rank"], "pid": r.get("pid"), "role": _role(r, ranks_by_ppid),
        "worker": r["worker"] if r.get("worker", -1) >= 0 else None,
        "host": r.get("host") or None, "path": r["path"],
        "first_rss_bytes": rss[0] if rss else None,
        "last_rss_bytes": rss[-1] if rss else None,
        "peak_rss_bytes": max(rss) if rss else None,
        "samples": len(samples),
        "steps": (steps[-1][0] - steps[0][0] + 1) if steps else 0,
        "last_step": steps[-1][0] if steps else None,
        "growth_bytes_per_step": int(round(slope)),
        "limit_bytes": r["limit_bytes"] if r.get("limit_bytes", -1) > 0 else None,
        "end": _end(r),
        "end_signal": liveness.end_signal(r) or None,  # the signal its `end` names
    }
    p["_points"] = steps
    p["_span"] = _span(r)
    # without step samples (no torch steps, or lost with the last interval of
    # a killed process): how much its last samples rose, over time
    tail = [(ts, rss) for ts, rss, _s in samples[-_TAIL:]]
    p["_rise"] = theil_sen(tail) * (tail[-1][0] - tail[0][0]) if len(tail) >= 3 else 0.0
    return p


def analyze(results: List[Dict[str, Any]],
            dead_steps: Optional[Dict[str, int]] = None) -> Dict[str, Any]:
    """{"processes", "creep", "oom", "running"} (docs/cli.md, "summary --memory").
    dead_steps: {path: last step} of the job's dead ranks by the hang post
    mortem (hang.dead_last_steps), which counts the steps a killed rank's
    trace lost from its peers' collectives."""
    readable = [r for r in results if r.get("status") in ("ok", "truncated")]
    for r in readable:
        rank = r.get("own_rank", -1)  # the rank rule, as reader/identity.c applied it
        r["rank"] = rank if rank >= 0 else None
    ranks_by_ppid: Dict[int, int] = {}
    for r in readable:
        if r["rank"] is not None and r.get("worker", -1) < 0:
            ranks_by_ppid[r.get("ppid", -1)] = ranks_by_ppid.get(r.get("ppid", -1), 0) + 1
    procs = [_process(r, ranks_by_ppid) for r in readable]
    procs.sort(key=lambda p: (p["rank"] is None, p["rank"] or 0, p["role"] != "launcher",
                              p["role"] == "worker", p["worker"] or 0, p["pid"] or 0))
    creep, oom = [], []
    running = []
    for p in procs:
        pts, slope = p["_points"], p["growth_bytes_per_step"]
        who = {k: p[k] for k in ("rank", "pid", "role", "worker")}
        if p["end"] == "running":
            running.append({**who, "last_step": p["last_step"], "path": p["path"]})
        if slope >= CREEP_BYTES_PER_STEP and p["steps"] >= CREEP_MIN_STEPS:
            creep.append({**who, "growth_bytes_per_step": slope,
                          "first_step": _first_step(pts, slope), "steps": p["steps"],
                          "span": p["_span"], "path": p["path"]})
        if p["end"] == "killed":
            told = (dead_steps or {}).get(p["path"])
            if told is not None and (p["last_step"] is None or told > p["last_step"]):
                p["last_step"] = told
            growing = ((slope >= CREEP_BYTES_PER_STEP and len(pts) >= 3)
                       or p["_rise"] >= OOM_RISE)
            limit, last = p["limit_bytes"], p["last_rss_bytes"]
            near = bool(limit and last and last >= OOM_NEAR_LIMIT * limit)
            if growing or near:
                oom.append({**who, "last_step": p["last_step"], "last_rss_bytes": last,
                            "growth_bytes_per_step": slope, "limit_bytes": limit,
                            "why": "growing" if growing else "near its memory limit",
                            "message": _oom_message(p, growing), "path": p["path"]})
    for p in procs:
        del p["_points"], p["_span"], p["_rise"]
    return {"processes": procs, "creep": creep, "oom": oom, "running": running}


def _who(p: Dict[str, Any]) -> str:
    if p["role"] == "worker":
        base = f"rank {p['rank']} " if p["rank"] is not None else ""
        return f"{base}worker {p['worker']} (pid {p['pid']})"
    if p["role"] == "launcher":
        return f"launcher (pid {p['pid']})"
    return f"rank {p['rank']}" if p["rank"] is not None else f"pid {p['pid']}"


def size_text(n: Optional[int]) -> str:
    """Bytes as `1.2 GiB` or `20 MiB` (the memory reports' and the hang line's)."""
    return "?" if n is None else common.fmt_bytes(n, coarse=True)


def _oom_message(p: Dict[str, Any], growing: bool) -> str:
    at = f" after step {p['last_step']}" if p["last_step"] is not None else ""
    if growing and p["growth_bytes_per_step"] >= CREEP_BYTES_PER_STEP:
        how = f"growing {size_text(p['growth_bytes_per_step'])} a step"
    elif growing:
        how = f"up {size_text(int(p['_rise']))} over its last samples"
    else:
        how = f"limit {size_text(p['limit_bytes'])}"
    return f"{_who(p)} killed{at}, {size_text(p['last_rss_bytes'])}, {how}"


def render(a: Dict[str, Any]) -> str:
    rows = [[_who(p), p["role"], common.fmt_bytes(p["first_rss_bytes"] or 0),
             common.fmt_bytes(p["last_rss_bytes"] or 0), common.fmt_bytes(p["peak_rss_bytes"] or 0),
             str(p["steps"]), common.fmt_bytes(p["growth_bytes_per_step"])
             if p["growth_bytes_per_step"] > 0 else "-", _end_cell(p)] for p in a["processes"]]
    out = ["Memory (resident)\n" + common.table(
        ["process", "role", "first", "last", "peak", "steps", "growth/step", "end"], rows,
        [2, 3, 4, 5, 6])]
    if a["creep"]:
        out.append("\nCreep (a steady growth of 1 MiB a step or more over 20 steps or more)")
        for c in a["creep"]:
            where = f", in {c['span']}" if c["span"] else ""
            out.append(f"  {_who(c)}: +{size_text(c['growth_bytes_per_step'])} a step from step "
                       f"{c['first_step']} over {c['steps']} steps{where}")
    else:
        out.append("\nNo memory creep.")
    if a["oom"]:
        out.append("\nKilled while growing or near the memory limit (the OOM killer?)")
        out.extend(f"  {o['message']}" for o in a["oom"])
    if a.get("running"):
        out.append("\n" + running_text(a["running"]))
    return "\n".join(out)


def running_text(running: List[Dict[str, Any]]) -> str:
    """`Still running (no end event yet; the figures are so far): rank 0, rank 1`."""
    names = [_who(p) for p in running]
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    return f"Still running (no end event yet; the figures are so far): {shown}"


def html_section(a: Dict[str, Any]) -> List[Tuple[str, List[str], List[List[str]]]]:
    """The report's memory section as (title, headers, rows) tables (the
    numbers of `summary --memory`)."""
    out = [("Memory (resident) per process",
            ["process", "role", "first", "last", "peak", "steps", "growth/step", "end"],
            [[_who(p), p["role"], common.fmt_bytes(p["first_rss_bytes"] or 0),
              common.fmt_bytes(p["last_rss_bytes"] or 0), common.fmt_bytes(p["peak_rss_bytes"] or 0),
              str(p["steps"]), common.fmt_bytes(p["growth_bytes_per_step"]), _end_cell(p)]
             for p in a["processes"]])]
    if a["creep"]:
        out.append(("Memory creep", ["process", "growth/step", "from step", "steps", "span"],
                    [[_who(c), common.fmt_bytes(c["growth_bytes_per_step"]), str(c["first_step"]),
                      str(c["steps"]), c["span"] or "-"] for c in a["creep"]]))
    if a["oom"]:
        out.append(("Killed while growing or near the memory limit (the OOM killer?)",
                    ["process", "what"], [[_who(o), o["message"]] for o in a["oom"]]))
    if a.get("running"):
        out.append(("Still running (no end event yet; the figures are so far)",
                    ["process", "last step"],
                    [[_who(p), "-" if p["last_step"] is None else str(p["last_step"])]
                     for p in a["running"]]))
    return out


def read(paths: List[str], args: argparse.Namespace) -> List[Dict[str, Any]]:
    """The memory pass over paths (args: jobs, dask, progress)."""
    return runner.run(memory_file, paths, jobs=args.jobs, dask=args.dask, label="memory",
                      progress=args.progress)


def killed_ranks(results: List[Dict[str, Any]]) -> bool:
    """Whether some rank of a job of several ended killed: then its steps
    are counted by the post mortem (dead_steps of analyze)."""
    ranks = [r for r in results if r.get("status") in ("ok", "truncated")
             and r.get("worker", -1) < 0 and (r.get("rank") if isinstance(r.get("rank"), int)
                                               else -1) >= 0]
    return len(ranks) > 1 and any(_end(r) == "killed" for r in ranks)


def main(args: argparse.Namespace,
         dead_steps_of: Optional[Callable[[List[str]], Dict[str, int]]] = None) -> int:
    """dead_steps_of(files): the dead ranks' last steps by the post mortem
    (summary.py passes one: a ranks pass more, when a rank was killed)."""
    files, status = common.expand_paths(args)
    if not files:
        return common.EXIT_BAD_INPUT
    results = read(files, args)
    status = max(status, common.check_results(results))
    dead = dead_steps_of(files) if dead_steps_of is not None and killed_ranks(results) else None
    a = analyze(results, dead)
    if args.json:
        json.dump(a, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(render(a))
    return status
