"""``dftracer whatif``: the critical path of each step across the ranks, and
what the step would take if one thing were fixed (docs/whatif.md).

Input: the ranks pass (src/reader/ranks.c, ``_core._rank_file``) of every
file, read through `rank_steps` (the one place that knows the pass's row
layout): per rank and step its start, duration and self time by class
(reader/ranks_steps.c: a partition of the step's wall time, waiting for
other ranks counted as comm), each class's top event (or sampled place for
untraced time).  No event is read again here.

The graph of a step (docs/whatif.md, "The graph"): on each rank, the time
since its previous step ended (between steps), then its own work (data wait,
I/O, compute, checkpoint, untraced), then the step's collectives, one join
node: a synchronous data-parallel step ends when its last rank arrives plus
the transfer that rank still waits for (its own comm time).  So a step takes

    P_n = max_r (gap_rn + own_rn) + transfer_n

its critical path is the rank of the max (the last arriver): its gap, its
classes and its comm, which add up to that rank's step period.  A
counterfactual changes one candidate's segments (a rank's class set to the
other ranks' median in that step; every checkpoint to zero) and replays the
max; the saving is the difference, per step and over the run.

Noise: on a busy machine every rank's classes wander; a rank that is the max
by chance would "save" its noise.  A segment is only replaced in a step
where it exceeds the others' median by NOISE_K times the job's spread of
that class (the median absolute deviation of every rank's excess), so a
balanced job projects (about) nothing.  The first step of each rank is left
out (start-up is not a step's work) when there are more.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from dftracer.tools import clock_align, common, ranks as ranks_mod


def medians_of_others(values: Sequence[float]) -> List[float]:
    """For each i, the median of values without values[i] (lead_stats's,
    from one sort): taking one value out leaves one of two medians, the one
    above or below it in sort order, so each rank gets one of two numbers."""
    n = len(values)
    if n < 2:
        return [0.0] * n
    lo, hi = min(values), max(values)
    if lo == hi:  # every rank the same (a class no rank has): no sort
        return [float(lo)] * n
    order = sorted(range(n), key=values.__getitem__)
    v = [values[i] for i in order]
    m = n - 1
    # the median of v without position pos: positions >= m // 2 + 1 shift by one
    if m % 2:
        below, above = v[m // 2 + 1], v[m // 2]       # pos <= m//2, pos > m//2
        cut = m // 2
    else:
        below = (v[m // 2] + v[m // 2 + 1]) / 2       # pos <= m//2 - 1
        above = (v[m // 2 - 1] + v[m // 2]) / 2       # pos >= m//2 + 1
        mid = (v[m // 2 - 1] + v[m // 2 + 1]) / 2     # pos == m//2
        out = [0.0] * n
        for pos, i in enumerate(order):
            out[i] = below if pos < m // 2 else (mid if pos == m // 2 else above)
        return out
    out = [0.0] * n
    for pos, i in enumerate(order):
        out[i] = below if pos <= cut else above
    return out

EXAMPLE = """examples:
  dftracer whatif ./traces
  dftracer whatif ./traces --json | jq '.findings[0]'
"""

CLASSES = ranks_mod.CLASSES
LABELS = dict(ranks_mod.LABELS, other="untraced time")
PATH_LABELS = dict(LABELS, gap="between steps", tail="after the join")
COMM = CLASSES.index("comm")
CKPT = CLASSES.index("checkpoint")
OTHER = CLASSES.index("other")
GAP = "gap"                      # the time between a rank's steps (no step holds it)
TAIL = "tail"                    # on the path: the rank leaving the step last, after the arrival
DATA = CLASSES.index("data")
# the path's order within a rank: the data it waits for first, then its other classes
PATH_ORDER = [DATA] + [c for c in range(len(CLASSES)) if c not in (DATA, COMM)]
NOISE_K = 3.0                    # a segment is replaced where it passes the others by this x spread
SYSTEMATIC = 0.5                 # a rank over the bound in this share of the steps: its own doing
MIN_SHARE = 0.01                 # findings below this share of the median step are not listed
MIN_US = 50                      # ... nor below this
QUEUE_NOTE = 0.2                 # the CPU wait folded in, this share of the saving: said
SELF_CPU = 0.2                   # extra CPU time, this share of the excess: its CPU wait its own
MAX_EVIDENCE_STEPS = 20          # step numbers listed per finding


# ---- the adapter: the ranks pass's rows as named fields -----------------------

class RankSteps(NamedTuple):
    """One rank's steps as the ranks pass gives them, column by column (row
    i of each column is the i-th step in start order)."""
    number: List[int]
    ts: List[int]
    dur: List[int]
    by_class: List[List[int]]   # per class of CLASSES: self time (a partition of dur)
    top_key: List[List[int]]    # per class: index into the rank's keys, -1: none
    top_us: List[List[int]]     # per class: that event's self time
    cpu_us: List[int]           # the step thread's CPU time (-1: unknown)
    wait_us: List[int]          # run-queue wait of the step thread (-1: unknown)


def rank_steps(rank: "ranks_mod.Rank") -> RankSteps:
    """A rank's steps from the ranks pass's named columns (ranks.Steps: the
    pass's _core.RankSteps as int64 views), in start order.  The one
    function that reads the pass's layout."""
    st, k = rank.steps, ranks_mod.NCLS
    cols = ([list(st.number), list(st.ts), list(st.dur)] + [list(c) for c in st.by_class] +
            [list(c) for c in st.top_key] + [list(c) for c in st.top_us] +
            [list(st.cpu), list(st.wait)])
    ts = cols[1]
    if any(b < a for a, b in zip(ts, ts[1:])):  # rows not in start order: sort them
        order = sorted(range(len(ts)), key=ts.__getitem__)
        cols = [[c[i] for i in order] for c in cols]
    return RankSteps(cols[0], cols[1], cols[2], cols[3:3 + k], cols[3 + k:3 + 2 * k],
                     cols[3 + 2 * k:3 + 3 * k], cols[3 + 3 * k], cols[3 + 3 * k + 1])


def key_name(rank: "ranks_mod.Rank", key: int, cls: int) -> str:
    """The event (cat/name) or sampled place a top key names."""
    keys = rank.main.get("keys", ())
    if 0 <= key < len(keys):
        cat, name = keys[key][0], keys[key][1]
        return f"untraced: {name}" if cat == "sampled" else f"{cat}/{name}"
    return "(untraced)" if cls == OTHER else "-"


# ---- the graph ----------------------------------------------------------------

class Step:
    """One step across the ranks present in it, column by column: `who`
    the ranks' positions in the job's ranks, `row` the step's row in each
    rank's RankSteps, its gap, own work by class (`cls[c][i]`, comm's column
    zero), comm, CPU time, run-queue wait and aligned end."""
    __slots__ = ("number", "who", "row", "gap", "cls", "comm", "cpu", "wait", "end")

    def __init__(self, number: int) -> None:
        self.number = number
        self.who: List[int] = []
        self.row: List[int] = []
        self.gap: List[int] = []
        self.cls: List[List[int]] = [[] for _ in CLASSES]
        self.comm: List[int] = []
        self.cpu: List[int] = []
        self.wait: List[int] = []
        self.end: List[int] = []


def build_steps(rk: Sequence["ranks_mod.Rank"], offsets: Dict[str, int],
                cols: List[RankSteps]) -> List[Step]:
    """The steps that two or more ranks share, in number order (cols: each
    rank's rank_steps)."""
    steps: Dict[int, Step] = {}
    ncls = len(CLASSES)
    for pos, (r, c) in enumerate(zip(rk, cols)):
        off = offsets.get(r.main["path"], 0)
        ends = [t + d for t, d in zip(c.ts, c.dur)]
        gaps = [0] + [max(0, t - e) for t, e in zip(c.ts[1:], ends)]
        for j, n in enumerate(c.number):
            s = steps.get(n)
            if s is None:
                s = steps[n] = Step(n)
            s.who.append(pos)
            s.row.append(j)
            s.gap.append(gaps[j])
            for k in range(ncls):
                s.cls[k].append(0 if k == COMM else c.by_class[k][j])
            s.comm.append(c.by_class[COMM][j])
            s.cpu.append(c.cpu_us[j])
            s.wait.append(c.wait_us[j])
            s.end.append(ends[j] + off)
    return [steps[n] for n in sorted(steps) if len(steps[n].who) >= 2]


def arrivals(s: Step) -> List[float]:
    """Each rank's arrival at the step's join: its gap and its own work."""
    return [sum(x) for x in zip(s.gap, *s.cls)]


def critical(s: Step) -> int:
    """The index (in s.who) of the last rank to arrive."""
    a = arrivals(s)
    return max(range(len(a)), key=lambda i: (a[i], -s.who[i]))


def period(s: Step) -> float:
    """P_n: the last arrival plus its transfer (its own comm)."""
    i = critical(s)
    return arrivals(s)[i] + s.comm[i]


def path(s: Step, prev: Optional[Step], rk: Sequence["ranks_mod.Rank"],
         cols: Sequence[RankSteps]) -> List[Dict[str, Any]]:
    """The critical path's segments over the step's window on the aligned
    clocks (from the last rank's end of the step before to the last rank's
    end of this one), in the graph's order: the last rank to arrive, its
    between-steps time, its own work class by class (each class's top event,
    then the rest of the class) and its comm (the join and transfer); the
    part of them before the window (it ran while another rank still finished
    the step before) left out; then, when another rank leaves the step
    later, that rank's time after the last arrival left the step (TAIL: its
    last collective and what follows it, the optimizer, a checkpoint)."""
    i = critical(s)
    pos, j = s.who[i], s.row[i]
    r, c_ = rk[pos], cols[pos]
    segs: List[Tuple[str, str, float]] = [(GAP, "(between steps)", s.gap[i])]
    for c in PATH_ORDER + [COMM]:
        us = s.comm[i] if c == COMM else s.cls[c][i]
        key = c_.top_key[c][j]
        top = min(us, c_.top_us[c][j]) if key >= 0 else 0
        segs.append((CLASSES[c], key_name(r, key, c), top))
        segs.append((CLASSES[c], f"(other {LABELS[CLASSES[c]]})" if top else
                     ("(untraced)" if c == OTHER else f"({LABELS[CLASSES[c]]})"), us - top))
    # before the window: rank i's own previous end came before the last one's
    own_start = s.end[i] - sum(x for _, _, x in segs)
    clip = max(0, max(prev.end) - own_start) if prev is not None else 0
    out: List[Dict[str, Any]] = []
    for cls, event, us in segs:
        cut = min(us, clip)
        clip -= cut
        if us - cut > 0:
            out.append({"rank": r.rank, "class": cls, "event": event,
                        "dur_us": int(round(us - cut))})
    last = max(range(len(s.end)), key=lambda x: (s.end[x], -s.who[x]))
    if s.end[last] > s.end[i]:
        out.append({"rank": rk[s.who[last]].rank, "class": TAIL,
                    "event": f"(after rank {r.rank} left the step)",
                    "dur_us": int(s.end[last] - s.end[i])})
    return out


# ---- counterfactuals ------------------------------------------------------------

class Candidate(NamedTuple):
    rank: Optional[int]     # the rank's number; None: every rank
    cls: str                # a class, or GAP
    how: str                # "median" or "zero"


KINDS = [CLASSES[c] for c in range(len(CLASSES)) if c != COMM] + [GAP]


class Prepared:
    """What every replay of a step needs, computed once: the arrivals, the
    two latest, each rank's excess over the others' median per class (and
    gap), its run-queue excess and its CPU time's excess.  A candidate that changes one rank's
    segment replays the step's join in O(1): the new max is that rank's new
    arrival or the latest of the others."""
    __slots__ = ("step", "arr", "first", "second", "top", "excess", "queue", "cpu", "at",
                 "transfer")

    def __init__(self, s: Step) -> None:
        self.step = s
        self.arr = arrivals(s)
        order = sorted(range(len(self.arr)), key=lambda i: (-self.arr[i], s.who[i]))
        self.top = order[0]
        self.first = self.arr[order[0]]
        self.second = self.arr[order[1]] if len(order) > 1 else 0.0
        self.transfer = s.comm[critical(s)]
        self.excess: Dict[str, List[float]] = {}
        for kind in KINDS:
            vals = s.gap if kind == GAP else s.cls[CLASSES.index(kind)]
            self.excess[kind] = [x - m for x, m in zip(vals, medians_of_others(vals))]
        w = [max(0, x) for x in s.wait]
        self.queue = [max(0.0, x - m) for x, m in zip(w, medians_of_others(w))]
        c = [max(0, x) for x in s.cpu]
        self.cpu = [x - m if x > 0 else 0.0 for x, m in zip(c, medians_of_others(c))]
        self.at = {pos: i for i, pos in enumerate(s.who)}

    def latest_without(self, i: int) -> float:
        return self.second if i == self.top else self.first


def _spreads(prep: Sequence[Prepared]) -> Dict[str, float]:
    """Per class (and gap): the job's step-to-step noise, the median over the
    ranks of 1.4826 x the median absolute deviation of the rank's excess
    over the others' median (a rank slowed in every step shifts its excess,
    not its spread; pooling every rank's excess would count the shift as
    noise)."""
    out = {}
    for kind in KINDS:
        per: Dict[int, List[float]] = {}
        for p in prep:
            for i, pos in enumerate(p.step.who):
                per.setdefault(pos, []).append(p.excess[kind][i])
        mads = []
        for v in per.values():
            if len(v) >= 2:
                med = statistics.median(v)
                mads.append(1.4826 * statistics.median(abs(x - med) for x in v))
        out[kind] = statistics.median(mads) if mads else 0.0
    return out


def self_queue(p: Prepared, i: int, ex: float, floor: float) -> float:
    """The CPU wait that rank i, the last to arrive, brought on itself at the
    step's collectives: a rank that runs longer on a machine with fewer
    cores than runnable threads also waits longer for a CPU once it reaches
    them (the scheduler favours the threads that slept), which holds the
    step's transfer back (docs/whatif.md, "The CPU wait a rank brings on
    itself").  The transfer's excess over the job's usual transfer (`floor`,
    the shortest of the steps' transfers), at most the rank's run-queue
    wait over the others'; zero unless the rank's extra CPU time is a fifth
    of its segment's excess `ex` or more (a rank that sleeps or waits longer
    brings no CPU wait on itself: its wait is the machine's, which the
    others share)."""
    if p.cpu[i] < max(SELF_CPU * ex, MIN_US) or p.queue[i] <= 0:
        return 0.0
    return min(p.queue[i], max(0.0, p.transfer - floor))


def replay_one(p: Prepared, i: int, kind: str, bound: float, systematic: bool,
               floor: float) -> Optional[Tuple[float, float, float]]:
    """(the saving of the step, the excess taken out, the rank's own
    run-queue wait taken out of the transfer) when rank i's `kind` is set to
    the others' median, or None where that changes nothing.  The segment is
    replaced where its excess over the others' median passes the noise
    bound: less its rank's run-queue excess unless the rank exceeds the
    bound in most steps (`systematic`: a rank spinning longer waits for a
    CPU longer, its own doing); then all of its excess is taken out, and,
    when the rank was the last to arrive, so is the CPU wait it brought on
    itself after arriving (`self_queue`, against the job's usual transfer
    `floor`)."""
    ex = p.excess[kind][i]
    if ex - (0.0 if systematic else p.queue[i]) <= bound:
        return None
    new = max(p.arr[i] - ex, p.latest_without(i))
    folded = 0.0
    if systematic and i == p.top:
        folded = self_queue(p, i, ex, floor)
    return p.first - new + folded, ex, folded


def replay_zero(p: Prepared, cls: int) -> Optional[Tuple[float, float, float]]:
    """(the saving of the step, the time taken out) with every rank's class
    `cls` at zero (no checkpoint), or None where no rank has any."""
    s = p.step
    taken = sum(s.cls[cls])
    if not taken:
        return None
    return p.first - max(a - v for a, v in zip(p.arr, s.cls[cls])), taken, 0.0


def _evidence(steps: Sequence[Step], changed: List[Tuple[Prepared, float, float]],
              cand: Candidate,
              rk: Sequence["ranks_mod.Rank"], cols: Sequence[RankSteps]) -> Dict[str, Any]:
    """The steps a finding rests on, and the events (each class's top event
    or sampled place on the rank) that held the time taken out."""
    events: Dict[str, int] = {}
    if cand.cls != GAP:
        c = CLASSES.index(cand.cls)
        for p, _, _ in changed:
            s = p.step
            for i, pos in enumerate(s.who):
                r = rk[pos]
                if (cand.rank is None or r.rank == cand.rank) and s.cls[c][i] > 0:
                    j = s.row[i]
                    name = key_name(r, cols[pos].top_key[c][j], c)
                    label = name if cand.rank is not None else f"rank {r.rank}: {name}"
                    events[label] = events.get(label, 0) + cols[pos].top_us[c][j]
    nums = [p.step.number for p, _, _ in changed]
    queue = 0.0  # the rank's run-queue wait over the others' in those steps
    if cand.rank is not None:
        qs = [p.queue[i] for p, _, _ in changed for i, pos in enumerate(p.step.who)
              if rk[pos].rank == cand.rank]
        queue = statistics.median(qs) if qs else 0.0
    return {"steps": nums[:MAX_EVIDENCE_STEPS], "of_steps": len(steps),
            "queue_excess_us": int(queue),
            # the rank's own CPU wait taken out of the transfer, per step
            "queue_folded_us": int(sum(f for _, _, f in changed) / max(1, len(steps))),
            "steps_changed": len(nums),
            "excess_us": int(statistics.median(x for _, x, _ in changed)),
            "events": [{"event": k, "us_per_step": int(v / max(1, len(changed)))}
                       for k, v in sorted(events.items(), key=lambda kv: -kv[1])[:3]]}


def _what(cand: Candidate) -> str:
    if cand.how == "zero":
        return "no checkpoint"
    return "between-steps time" if cand.cls == GAP else LABELS[cand.cls]


def counterfactuals(steps: Sequence[Step], rk: Sequence["ranks_mod.Rank"],
                    cols: Sequence[RankSteps],
                    med: float) -> Tuple[List[Dict[str, Any]], Dict[str, float]]:
    """The findings, largest saving first, and the noise spreads: every
    rank's classes and gap set to the others' median, and every checkpoint
    to zero.  Linear in ranks x steps x classes."""
    prep = [Prepared(s) for s in steps]
    spread = _spreads(prep)
    floor = max(MIN_SHARE * med, MIN_US)
    # the job's usual transfer, the collectives' own time: the shortest of
    # the steps' (a step whose last rank waited for a CPU at the collectives
    # has a longer one; in a job slowed throughout, most of them do)
    usual = min(p.transfer for p in prep)
    # per candidate: the steps it changed, with their excess, and its saving
    found: Dict[Candidate, Tuple[List[Tuple[Prepared, float, float]], float]] = {}
    for kind in KINDS:
        bound = max(NOISE_K * spread[kind], MIN_US)
        over: Dict[int, int] = {}  # rank position -> steps its raw excess passes the bound
        passing = []
        for p in prep:
            ex = p.excess[kind]
            idx = [i for i, x in enumerate(ex) if x > bound]
            passing.append(idx)
            for i in idx:
                pos = p.step.who[i]
                over[pos] = over.get(pos, 0) + 1
        for p, idx in zip(prep, passing):
            for i in idx:
                pos = p.step.who[i]
                got = replay_one(p, i, kind, bound, over[pos] >= SYSTEMATIC * len(prep), usual)
                if got is None:
                    continue
                cand = Candidate(rk[pos].rank, kind, "median")
                changed, saved = found.get(cand, ([], 0.0))
                changed.append((p, got[1], got[2]))
                found[cand] = (changed, saved + got[0])
    if any(any(s.cls[CKPT]) for s in steps):
        cand = Candidate(None, "checkpoint", "zero")
        changed: List[Tuple[Prepared, float, float]] = []
        saved = 0.0
        for p in prep:
            got = replay_zero(p, CKPT)
            if got is not None:
                changed.append((p, got[1], got[2]))
                saved += got[0]
        found[cand] = (changed, saved)
    findings = []
    for cand, (changed, saved) in found.items():
        per_step = saved / len(steps)
        if per_step < floor:
            continue
        findings.append({
            "rank": cand.rank, "what": _what(cand), "class": cand.cls, "to": cand.how,
            "saving_us": int(round(per_step)), "saving_share": per_step / med if med else 0.0,
            "run_saving_us": int(round(saved)),
            "evidence": _evidence(steps, changed, cand, rk, cols)})
    findings.sort(key=lambda f: (-f["saving_us"], f["rank"] if f["rank"] is not None else -1,
                                 f["what"]))
    return findings, spread


# ---- the analysis ----------------------------------------------------------------

def job_steps(results: Iterable[ranks_mod.Result], align: bool = True
              ) -> Tuple[List["ranks_mod.Rank"], List[RankSteps], List[Step], List[str]]:
    """The ranks, their steps' columns, the steps they share (on the
    clocks aligned on the collectives, as merge does; `align` False: as
    recorded) and the warnings."""
    # copies: identify takes each main process's steps out of its result, and
    # the report's Ranks section reads the same results after this
    results = [dict(r) for r in results]
    offsets = clock_align.file_offsets(results, clock_align.align(results)) if align else {}
    rk, _loose, warnings = ranks_mod.identify(results)
    cols = [rank_steps(r) for r in rk]
    return rk, cols, build_steps(rk, offsets, cols), warnings


TRACK_PID = 0x7FFFFFF0   # the "critical path" track's pid in view's trace (no real pid is so high)


TRACK_ID_TOP = (1 << 53) - 2  # hang.MARK_ID - 1


def track_events(results: Iterable[ranks_mod.Result],
                 align: bool = True) -> List[Dict[str, Any]]:
    """The critical path of every step (but the first, which has no step
    before it to start from) as trace events for `dftracer view`: a process
    track named "critical path", one complete event a segment, laid end to
    end over the step's window on the aligned clocks (from the last rank's
    end of the step before), named by its rank, class and event, with the
    step in its args.  Empty when the traces have fewer than two ranks that
    share steps."""
    rk, cols, steps, _ = job_steps(results, align)
    if not steps or len(rk) < 2:
        return []
    out: List[Dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": TRACK_PID, "tid": TRACK_PID,
         "args": {"name": "critical path"}},
        {"name": "process_sort_index", "ph": "M", "pid": TRACK_PID, "tid": TRACK_PID,
         "args": {"sort_index": -1}},
        {"name": "thread_name", "ph": "M", "pid": TRACK_PID, "tid": TRACK_PID,
         "args": {"name": "the last rank to arrive, each step"}}]
    for prev, s in zip(steps, steps[1:]):
        t = max(prev.end)
        for seg in path(s, prev, rk, cols):
            what = seg["event"] if not seg["event"].startswith("(") else \
                PATH_LABELS.get(seg["class"], seg["class"])
            out.append({"name": f"rank {seg['rank']}: {what}", "cat": "critical_path",
                        "ph": "X", "pid": TRACK_PID, "tid": TRACK_PID, "ts": int(t),
                        "dur": seg["dur_us"],
                        "args": {"step": s.number, "rank": seg["rank"], "class": seg["class"],
                                 "event": seg["event"]}})
            t += seg["dur_us"]
    if len(out) > 3:  # the track's own `start`, as each process of a merge has (rule 3)
        out.insert(3, {"name": "start", "cat": "dftracer", "ph": "X", "pid": TRACK_PID,
                       "tid": TRACK_PID, "ts": out[3]["ts"], "dur": 0,
                       "args": {"name": "critical path"}})
    # the format's keys on every line (docs/trace-format.md, rule 1): ids
    # counted down from below hang's mark, where no tracer's ids reach
    for i, e in enumerate(out):
        e.setdefault("cat", "dftracer")
        e["id"] = TRACK_ID_TOP - i
    return out


def analyze(results: Iterable[ranks_mod.Result]) -> Dict[str, Any]:
    """The dict `whatif --json` prints (docs/whatif.md)."""
    rk, cols, steps, warnings = job_steps(results)
    out: Dict[str, Any] = {"ranks": len(rk), "steps": len(steps), "step_us": 0,
                           "mean_step_us": 0, "path": [], "path_step": None, "wall_us": None,
                           "path_error": None, "model_error_median": None, "run_us": 0,
                           "findings": [], "warnings": warnings}
    if len(steps) > 2:
        steps = steps[1:]  # start-up: the first step
        out["warmup_steps_left_out"] = 1
    out["steps"] = len(steps)
    if not steps:
        out["warnings"].append("no step that two or more ranks share: nothing to compare")
        return out
    periods = [period(s) for s in steps]
    # each step's wall time on the aligned clocks: the last rank's end of it
    # minus the last rank's end of the step before (the first has none: its
    # model period stands in)
    walls = [periods[0]] + [max(s.end) - max(steps[i - 1].end) for i, s in enumerate(steps) if i]
    # the median step: a step's own (the lower middle of an even count), so
    # that its path adds up to step_us
    med = statistics.median_low(walls[1:] if len(walls) > 1 else walls)
    mid = min(range(1 if len(steps) > 1 else 0, len(steps)),
              key=lambda i: (abs(walls[i] - med), i))
    ms = steps[mid]
    out["step_us"] = int(round(med))
    out["mean_step_us"] = int(round(sum(walls) / len(walls)))
    out["run_us"] = int(round(sum(walls)))
    out["path_step"] = ms.number
    out["path"] = path(ms, steps[mid - 1] if mid else None, rk, cols)
    if mid:
        out["wall_us"] = int(walls[mid])
        if walls[mid] > 0:
            out["path_error"] = abs(sum(p["dur_us"] for p in out["path"]) - walls[mid]) / walls[mid]
    # the model's step (the last arrival and its transfer) against the wall
    errors = [abs(periods[i] - walls[i]) / walls[i] for i in range(1, len(steps)) if walls[i] > 0]
    out["model_error_median"] = statistics.median(errors) if errors else None
    out["findings"], spread = counterfactuals(steps, rk, cols, med)
    out["spread_us"] = {c: int(v) for c, v in spread.items()}
    return out


# ---- text ------------------------------------------------------------------------

def finding_line(f: Dict[str, Any], mean_step_us: float) -> str:
    who = "every rank's" if f["rank"] is None else f"rank {f['rank']}'s"
    if f["to"] == "zero":
        cond = "there were no checkpoint"
    else:
        cond = f"{who} {f['what']} were the other ranks' median"
    ev = f["evidence"]
    top = ev["events"][0]["event"] if ev["events"] else ""
    pct = 100.0 * f["saving_us"] / mean_step_us if mean_step_us else 0.0
    line = (f"if {cond}, steps would take {common.fmt_us(f['saving_us'])} less (-{pct:.0f} %), "
            f"{common.fmt_us(f['run_saving_us'])} over the run; "
            f"{ev['steps_changed']}/{ev['of_steps']} steps" + (f", {top}" if top else ""))
    q = ev.get("queue_folded_us", 0)
    if q >= max(QUEUE_NOTE * f["saving_us"], MIN_US):
        # more runnable threads than CPUs: the slow rank's collectives waited
        # for its CPU too, its own doing (docs/whatif.md)
        line += (f" (of which {common.fmt_us(q)} the CPU wait rank {f['rank']} brought on "
                 "itself at the collectives)")
    return line


def render(a: Dict[str, Any], top: int = 10) -> str:
    if not a["steps"]:
        return "What if: no step that two or more ranks share"
    lines = [f"What if: {a['ranks']} ranks, {a['steps']} steps, median step "
             f"{common.fmt_us(a['step_us'])} (mean {common.fmt_us(a['mean_step_us'])})"]
    shown = a["findings"] if top <= 0 else a["findings"][:top]
    lines += [finding_line(f, a["mean_step_us"]) for f in shown]
    if not a["findings"]:
        lines.append(f"no fix of one rank's class, its between-steps time or the checkpoints "
                     f"would save {MIN_SHARE:.0%} of the step")
    err = a.get("path_error")
    lines.append(f"\nCritical path of step {a['path_step']} (the median step"
                 + (f"; its wall time {common.fmt_us(a['wall_us'])}, the path "
                    f"{100 * err:.1f} % off" if err is not None else "") + ")")
    lines.append(common.table(["rank", "class", "event or place", "ms"],
                              [[str(p["rank"]), PATH_LABELS.get(p["class"], p["class"]),
                                common.printable(p["event"]), f"{p['dur_us'] / 1e3:.2f}"]
                               for p in a["path"]], [0, 3]))
    return "\n".join(lines)


def html_section(a: Dict[str, Any], top: int = 10) -> str:
    """The report's "What if" section (at the top of the page): the findings'
    lines and the median step's critical path."""
    import html

    if not a or not a.get("steps"):
        return ""
    lines = render(a, top).split("\n\nCritical path")[0].splitlines()
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines[1:])
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in (
        p["rank"], PATH_LABELS.get(p["class"], p["class"]), common.printable(p["event"]),
        f"{p['dur_us'] / 1e3:.2f}")) + "</tr>" for p in a["path"])
    err = a.get("path_error")
    return (f"<h2 id=\"whatif\">What if</h2><p>{html.escape(lines[0])}</p><ul>{items}</ul>"
            f"<p>Critical path of step {a['path_step']} (the median step"
            + (f"; the path is {100 * err:.1f} % off its wall time" if err is not None else "")
            + ")</p><table><tr><th>rank</th><th>class</th><th>event or place</th><th>ms</th>"
            f"</tr>{rows}</table><p class=\"note\">The same as <code>dftracer whatif</code> "
            "(docs/whatif.md).</p>")


# ---- the command -------------------------------------------------------------------

def add_parser(sub: Any) -> None:
    p = common.command(
        sub, "whatif",
        help="the critical path of each step across ranks, and what a fix would save",
        description="Builds each step's dependency graph across the ranks (each rank's own work "
                    "by class, the collectives as one join where the last rank arrives), its "
                    "critical path, and replays it with one thing fixed: a rank's class (data "
                    "wait, compute, I/O, checkpoint, untraced time) or its time between steps "
                    "set to the other ranks' median, or no checkpoint. Prints the projected "
                    "saving per step and over the run, largest first, each with its evidence "
                    "(docs/whatif.md).",
        epilog=EXAMPLE)
    p.add_argument("--step", metavar="NAME", default=None,
                   help="the events (NAME or CAT/NAME) that are the steps (as summary --ranks "
                        "--step)")
    p.add_argument("--top", type=int, default=10, metavar="N",
                   help="findings shown (0: all; default 10; --json has them all)")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from dftracer.tools import summary

    results, status = summary.collect_ranks(args, label="whatif")
    if not results:
        return status
    a = analyze(results)
    for w in a["warnings"]:
        common.err(f"warning: {w}")
    if args.json:
        json.dump(a, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(render(a, args.top))
    return status
