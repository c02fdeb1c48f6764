"""The text of ``dftracer summary --ranks`` (docs/cli.md, "Ranks"): the
step table, the per-rank table and one line per straggler, from the dict
dftracer/tools/ranks.py's analyze() returns (the report quotes the lines)."""

from __future__ import annotations

from typing import Any, Dict, Optional

from dftracer.tools import clock_align, common
from dftracer.tools.ranks import BUSY_SHARE, CLASSES, CPU_WAIT, LABELS, MAX_TABLE_RANKS, NCLS


def _ms(us: Optional[float]) -> str:
    return "-" if us is None else f"{us / 1e3:.1f}"


def straggler_line(s: Dict[str, Any]) -> str:
    cause = LABELS[s["cause_class"]]
    if s["cause_class"] == CPU_WAIT and s["cause_name"] == "(its workers' run queue)":
        w = s.get("workers")
        return (f"rank {s['rank']}: the others waited {common.fmt_us(s['mean_lead_us'])} a step "
                f"for it (+-{common.fmt_us(s['stderr_us'])}); {cause}: data wait "
                f"+{common.fmt_us(max(0, s['cause_excess_us']))} that its workers' own work "
                "does not explain (" + (f"{w['cat']}/{w['name']} +{common.fmt_us(w['excess_us'])}"
                                        if w else "none of their events longer")
                + " a step): its workers waited for a CPU, its machine, not its work")
    if s["cause_class"] == CPU_WAIT:
        cpu = s.get("cpu_lead_us")
        return (f"rank {s['rank']}: the others waited {common.fmt_us(s['mean_lead_us'])} a step "
                f"for it (+-{common.fmt_us(s['stderr_us'])}); {cause}: it waited "
                f"{common.fmt_us(max(0, s['cause_excess_us']))} a step more than the others "
                "in the run queue" + (f" with its CPU time like theirs "
                                      f"({common.fmt_us(cpu) if cpu >= 0 else '-' + common.fmt_us(-cpu)})"
                                      if cpu is not None else "")
                + ": its machine, not its work")
    what = f"{s['cause_cat']}/{s['cause_name']}" if s["cause_cat"] else s["cause_name"]
    err = f" +-{common.fmt_us(s['stderr_us'])}" if s.get("stderr_us") else ""
    line = (f"rank {s['rank']}: slowest in {s['slowest_steps']}/{s['of_steps']} steps "
            f"(chance {s['chance_steps']:g}), +{common.fmt_us(s['mean_lead_us'])}{err} a step; "
            f"{cause}: {what} +{common.fmt_us(max(0, s['cause_excess_us']))}")
    if s["cause_io_bytes"]:
        line += f" ({common.fmt_bytes(s['cause_io_bytes'])})"
    w = s.get("workers")
    if w:
        line += (f"; in its workers: {w['cat']}/{w['name']} "
                 f"+{common.fmt_us(w['excess_us'])} a step")
        if w.get("worker") is not None:
            line += f" (mostly worker {w['worker']}: {100 * w['worker_share']:.0f} %)"
        if w["io_bytes"]:
            line += f" ({common.fmt_bytes(w['io_bytes'])})"
    return line


def render(a: Dict[str, Any], top: int) -> str:
    ranks = a["ranks"]
    if not ranks:
        return "Ranks: no process names a rank (no `rank` metadata, no 'rank N' process name)"
    hosts = sorted({r["host"] for r in ranks})
    workers = sum(len(r["workers"]) for r in ranks)
    kind = a["step_kind"] if isinstance(a["step_kind"], str) else "/".join(a["step_kind"]) or "-"
    parts = [f"Ranks: {len(ranks)} rank{'s' if len(ranks) != 1 else ''} on "
             f"{len(hosts)} host{'s' if len(hosts) > 1 else ''}"
             f"{', job ' + ', '.join(a['job_ids']) if a['job_ids'] else ''}, "
             f"{len(a['steps'])} steps ({kind}), {workers} worker processes"]
    steps = a["steps"]
    if steps and len(ranks) <= MAX_TABLE_RANKS:
        shown = steps if top <= 0 else steps[:top]
        order = a["rank_order"]
        body = []
        for s in shown:
            cells = [str(s["step"])]
            for i, r in enumerate(order):
                mark = "*" if s["straggler"] == r else ""
                cells.append(mark + _ms(s["dur_us"][i]))
            body.append(cells)
        more = f" (first {len(shown)} of {len(steps)})" if len(shown) < len(steps) else ""
        parts.append(f"\nStep time per rank, ms; * the step's straggler: the rank the others "
                     f"waited for (its time out of communication led theirs), not always the "
                     f"longest step{more}\n" + common.table(
            ["step"] + [f"rank {r}" for r in order], body, range(len(order) + 1)))
    elif steps:
        parts.append(f"\n(step x rank table: {len(ranks)} ranks; see --json or the report)")
    body = []
    for r in (ranks if top <= 0 or len(ranks) <= top else ranks[:top]):
        n = max(r["steps"], 1)
        body.append([str(r["rank"]), r["host"], str(r["pid"]), str(len(r["workers"])),
                     str(r["steps"]), _ms(r["step_mean_us"])]
                    + [_ms(r["by_class_us"][c] / n) for c in CLASSES]
                    + [str(r["straggler_steps"])])
    more = f" (first {len(body)} of {len(ranks)})" if len(body) < len(ranks) else ""
    parts.append(f"\nPer rank: mean ms per step{more}\n" + common.table(
        ["rank", "host", "pid", "workers", "steps", "step"] + [LABELS[c] for c in CLASSES]
        + ["straggler"], body, [0, 2, 3, 4, 5] + list(range(6, 7 + NCLS))))
    parts.append("\nStragglers")
    parts.extend(straggler_line(s) for s in a["stragglers"])
    if not a["stragglers"] and len(ranks) == 1:
        parts.append("none: one rank, no other to compare it with")
    elif not a["stragglers"]:
        parts.append(f"none: no rank leads the others by {common.fmt_us(a['straggler_bound_us'])} "
                     f"(5% of the median step) with evidence over the steps (the job's "
                     f"step-to-step noise is {common.fmt_us(a['noise_us'])})")
    w = a.get("cpu_wait")
    if w and w["share"] >= BUSY_SHARE:
        parts.append(f"the machine was busy: the median rank's step thread waited "
                     f"{common.fmt_us(w['median_us'])} a step for a CPU ({100 * w['share']:.0f}% "
                     "of the median step); that wait is taken out of the leads where the "
                     "others share it")
    parts.extend(clock_align.describe_alignment(a["alignment"]))
    return "\n".join(parts)
