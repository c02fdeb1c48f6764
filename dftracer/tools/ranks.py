"""The ranks of one job side by side (``dftracer summary --ranks``, the report's
Ranks section).

The per-file work is ``_core._rank_file`` (src/reader/ranks.c): a file's
identity (host, pid, ppid, the ``rank`` metadata), its steps (a
``_core.RankSteps`` of named columns: the self time of their events split
into classes -- compute, data wait, I/O, communication, checkpoint, other --
the top event of each class, the step thread's CPU time and run-queue wait),
its (cat, name) keys (``_core.RankKey``) and its sync points (collectives
matched across ranks by group, sequence number and name; the clock
alignment is dftracer/tools/clock_align.py).  This module combines the files:

- ranks: each rank's main process is the file that names the rank and whose
  parent does not; files started by it (DataLoader workers) are its workers.
- leads (leads()): a rank's time in a step is split so that waiting for the
  others is communication (reader/ranks_steps.c), so its time outside
  communication is what it did itself.  Per step, a rank's lead is that
  time, less the machine's part of its run-queue wait (machine_waits: the
  wait the others share, or that its own extra CPU time does not explain;
  never the wait its own extra work caused), minus the median of the other
  ranks' (paired within the step, so what slows the whole machine cancels);
  its wall lead is the same with the waits left in (what the others waited
  for).
- the verdict (verdict()): over the steps, a rank is named when its mean
  lead is evidence, not noise -- above 0 by Student's t at ALPHA over the
  ranks (winsorized, widened for correlated steps), or the slowest rank in
  so many steps that chance (1 / ranks a step) gives it at most that -- and its
  typical and mean lead reach a practical floor (STEP_SHARE of the median
  step, STEP_MIN_US), and so does its wall lead (the others did wait for
  it) -- or, on a machine its extra work contends for, its CPU time over
  the others' reaches the floor while its wall lead reaches WALL_SHARE of
  it -- named with the class whose typical excess over the others holds most
  of it and that class's top event.  A rank whose wall lead is evidence
  while its own lead is not, and whose run-queue wait over the others' is
  what the others waited for, is slowed by its machine: named with the
  cause "waiting for a CPU", never a class.  The step's straggler is the
  rank with the largest lead when it reaches the floor.  A balanced job's
  leads are noise around 0: no straggler, however many ranks or however
  loaded the machine.

Memory: per file, the steps (21 int64 each, in columns) and distinct (cat,
name) keys; no events.  The same numbers whether the files were read locally
or with --dask.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from dftracer import _core
from dftracer.tools import clock_align
from dftracer.tools.lead_stats import (binom_tail, lead_t, mad, medians_of_others, t_tail,
                                       typical_lead)

CLASSES: Tuple[str, ...] = tuple(_core._RANK_CLASSES)
CPU_WAIT = "cpu_wait"  # the cause of a rank slowed by its machine alone (not a class)
LABELS = {"compute": "compute", "data": "data wait", "io": "I/O", "comm": "comm",
          "checkpoint": "checkpoint", "other": "other", CPU_WAIT: "waiting for a CPU"}
COMM = CLASSES.index("comm")
OTHER = CLASSES.index("other")
NCLS = len(CLASSES)
STEP_SHARE = 0.05    # a straggler's lead: at least this share of the median step (practical floor)
STEP_MIN_US = 100    # ... and at least this
MIN_STEPS = 3        # steps compared before anyone is named
ALPHA = 1e-3         # evidence: a rank's mean lead above 0, or its count of slowest steps
                     # above chance, at this significance over all the ranks tested (Bonferroni)
NOISE_K = 3          # or: a typical lead of NOISE_K x the job's step-to-step noise ...
HALF = 0.5           # ... in at least half of the steps
WALL_SHARE = 0.25    # the least wall lead, a share of the floor, of a rank whose CPU lead reaches it
BUSY_SHARE = 0.10    # a run-queue wait of this share of the step is said (a busy machine)
MAX_TABLE_RANKS = 16                 # wider step x rank tables only in --json and the report
WORLD_MAX = 1 << 24                  # a world size past this is no real job's

Result = Dict[str, Any]


_ok = clock_align.ok
_own_rank = clock_align.own_rank
_int64s = clock_align.int64s


# ---- who is who --------------------------------------------------------------

class Steps:
    """A rank's steps by name: the _core.RankSteps columns of the ranks pass
    (reader/ranks_py.c) as int64 views, no copy."""

    __slots__ = ("number", "ts", "dur", "cpu", "wait", "by_class", "top_key", "top_us")

    def __init__(self, seq: Any) -> None:
        def col(b: bytes) -> Sequence[int]:
            return memoryview(b).cast("q")
        if not isinstance(seq, _core.RankSteps):  # none (a sync-only or crafted result)
            seq = _NO_STEPS
        self.number, self.ts, self.dur = col(seq.number), col(seq.ts), col(seq.dur)
        self.cpu, self.wait = col(seq.cpu_us), col(seq.wait_us)
        self.by_class = [col(c) for c in seq.by_class]
        self.top_key = [col(c) for c in seq.top_key]
        self.top_us = [col(c) for c in seq.top_us]

    def __len__(self) -> int:
        return len(self.number)


_NO_STEPS = _core.RankSteps((b"", b"", b"", b"", b"", (b"",) * NCLS, (b"",) * NCLS,
                             (b"",) * NCLS))


def nsteps(r: Result) -> int:
    """The steps of a ranks-pass result."""
    s = r.get("steps")
    return len(s.number) // 8 if isinstance(s, _core.RankSteps) else 0


class Rank:
    """A rank: its main process's result, its workers' results, its steps."""

    __slots__ = ("rank", "main", "workers", "steps", "index", "nsteps")

    def __init__(self, rank: int, main: Result, workers: List[Result]) -> None:
        self.rank = rank
        self.main = main
        self.workers = workers
        self.steps = Steps(main.pop("steps", None))  # not kept twice
        n = len(self.steps)
        numbers = list(self.steps.number)
        # steps 0..n-1 in order (the usual case) need no index: memory per rank
        self.index: Optional[Dict[int, int]] = (
            None if numbers == list(range(n)) else {s: i for i, s in enumerate(numbers)})
        self.nsteps = n

    def at(self, step: int) -> Optional[int]:
        """The index of step number `step` in the columns, None: not a step of it."""
        if self.index is None:
            return step if 0 <= step < self.nsteps else None
        return self.index.get(step)

    def numbers(self) -> Iterable[int]:
        return range(self.nsteps) if self.index is None else self.index.keys()

    def own_us(self, i: int) -> int:
        """Step i's time outside communication: what the rank did itself."""
        return sum(self.steps.by_class[c][i] for c in range(NCLS) if c != COMM)


def identify(results: Iterable[Result]) -> Tuple[List[Rank], List[Result], List[str]]:
    """(ranks by rank number, the processes that belong to no rank, warnings)."""
    files = [r for r in results if _ok(r)]
    by_proc = {(r["host"], r["pid"]): r for r in files}
    # the rank rule's rank, as the C pass read it (reader/identity.c)
    own = {id(r): _own_rank(r) for r in files}

    def parent(r: Result) -> Optional[Result]:
        p = by_proc.get((r["host"], r.get("ppid", -1)))
        return p if p is not r else None

    def rank_of(r: Result) -> Optional[int]:
        seen = 0
        while r is not None and seen < 32:  # a worker's rank: its nearest ancestor's
            if own[id(r)] is not None:
                return own[id(r)]
            r = parent(r)  # type: ignore[assignment]
            seen += 1
        return None

    groups: Dict[int, List[Result]] = {}
    loose: List[Result] = []
    for r in files:
        k = rank_of(r)
        if k is None:
            loose.append(r)
        else:
            groups.setdefault(k, []).append(r)
    ranks, warnings = [], []
    for k in sorted(groups):
        members = groups[k]
        roots = [r for r in members if not (parent(r) is not None and rank_of(parent(r)) == k)]
        roots.sort(key=lambda r: (-nsteps(r), -r.get("events", 0), r["path"]))
        if len(roots) > 1:
            claim = ", ".join(f"{r['host']}:{r['pid']}" for r in roots)
            warnings.append(f"rank {k}: {len(roots)} processes claim it ({claim}); using "
                            f"{roots[0]['host']}:{roots[0]['pid']} (are these the files of "
                            "one job?)")
        main = roots[0]
        ranks.append(Rank(k, main, [r for r in members if r is not main and r not in roots]))
    jobs = sorted({r.main.get("job_id") for r in ranks if r.main.get("job_id")})
    if len(jobs) > 1:
        warnings.append(f"the files hold {len(jobs)} jobs ({', '.join(jobs)}); their ranks are "
                        "compared as one job")
    for r in ranks:
        if r.nsteps == 0:
            warnings.append(f"rank {r.rank} ({r.main['path']}): no steps")
    warnings += rank_data_warnings(ranks)
    return ranks, loose, warnings


def rank_data_warnings(ranks: Sequence["Rank"]) -> List[str]:
    """One warning per kind of absurd rank data (docs/cli.md, "dftracer
    summary --ranks"): a world size no job has, ranks that disagree on it, a
    rank not below its world size."""
    out = []
    sizes = {r.rank: r.main.get("world_size", -1) for r in ranks}
    known = {k: w for k, w in sizes.items() if w is not None and w >= 0}
    huge = sorted(k for k, w in known.items() if w > WORLD_MAX)
    if huge:
        out.append(f"rank {huge[0]}: world size {known[huge[0]]} is not a real job's "
                   f"(more than {WORLD_MAX}); ranks are taken as they are"
                   + (f" ({len(huge)} ranks say so)" if len(huge) > 1 else ""))
    if len(set(known.values())) > 1:
        shown = ", ".join(f"{w} (rank {k})" for w, k in
                          sorted({w: k for k, w in sorted(known.items(), reverse=True)}.items()))
        out.append(f"the ranks disagree on the world size: {shown}")
    over = sorted(k for k, w in known.items() if 0 < w <= k)
    if over:
        out.append(f"rank {over[0]} is not below its world size {known[over[0]]}"
                   + (f" ({len(over)} ranks are not)" if len(over) > 1 else "")
                   + "; are these the files of one job?")
    return out


# ---- stragglers --------------------------------------------------------------

class Leads:
    """What the rule compares, per rank and step (leads()): each rank's lead
    over the others with the machine's contention taken out, its wall lead
    (what the others waited for), its excess per class, its CPU time and its
    run-queue wait over the others'."""

    def __init__(self, ranks: Sequence[Rank]) -> None:
        # per rank: [(step, lead, per-class excess over the others' median)]
        self.by_rank: Dict[int, List[Tuple[int, float, List[float]]]] = {r.rank: [] for r in ranks}
        self.walls: Dict[int, List[float]] = {r.rank: [] for r in ranks}  # waits left in
        self.cpu_over: Dict[int, List[float]] = {r.rank: [] for r in ranks}  # CPU time over the others
        self.wait_over: Dict[int, List[float]] = {r.rank: [] for r in ranks}  # run-queue wait over
        self.slowest: Dict[int, int] = {r.rank: 0 for r in ranks}  # steps with the largest lead
        self.chance: Dict[int, float] = {r.rank: 0.0 for r in ranks}  # sum of 1 / ranks compared
        self.waits: List[float] = []  # per step, the median rank's run-queue wait
        self.steps: List[Tuple[int, List[Optional[int]], List[Optional[float]],
                               Optional[List[float]]]] = []  # (step, durs, leads, mean by class)


def machine_waits(cpu: Sequence[float], wait: Sequence[float]) -> List[float]:
    """Per rank of one step, the part of its run-queue wait that is the
    machine's, never the part its own extra work caused.  A rank that did
    more CPU work than the others (a spin, a slower kernel) used up its share
    of a contended machine and waits for a CPU longer: of its wait, the share
    that goes with its extra CPU time (its wait scaled by the others' CPU
    time over its own) is its own doing and stays in its time (a spinning
    rank's lead would otherwise go out with its wait: issue 68).  What is
    the machine's: the wait the others share (the others' median, up to its
    own), or all of it when its CPU time is no more than theirs (its core
    shared with another job: it waits, it does not work)."""
    c_other = medians_of_others(cpu)
    w_other = medians_of_others(wait)
    out = []
    for c, w, co, wo in zip(cpu, wait, c_other, w_other):
        scaled = w * min(1.0, co / c) if c > 0 and co >= 0 else w
        out.append(max(min(w, wo), scaled))
    return out


def leads(ranks: Sequence[Rank]) -> Leads:
    """Per step, each rank's lead: its time outside communication less the
    machine's part of its run-queue wait (machine_waits), minus the median
    of the other ranks' (paired within the step, so what slows the whole
    machine cancels); its wall lead (the waits left in); its excess per
    class, CPU time and wait over the others'.  The medians of the others
    come from one sort per step and class: linear in the ranks."""
    out = Leads(ranks)
    numbers = sorted(set().union(*(r.numbers() for r in ranks))) if ranks else []
    pos = {r.rank: i for i, r in enumerate(ranks)}
    usual = _usual_counters(ranks)
    for n in numbers:
        present = [(r, r.at(n)) for r in ranks]
        present = [(r, i) for r, i in present if i is not None]
        durs: List[Optional[int]] = [None] * len(ranks)
        lead_at: List[Optional[float]] = [None] * len(ranks)
        for r, i in present:
            durs[pos[r.rank]] = r.steps.dur[i]
        cls = [[r.steps.by_class[c][i] for c in range(NCLS)] for r, i in present]
        # the step's split by class, the mean over the ranks that have it
        mean_cls = [sum(v[c] for v in cls) / len(cls) for c in range(NCLS)] if cls else None
        if len(present) >= 2:
            own = [float(r.own_us(i)) for r, i in present]
            med_wall = medians_of_others(own)
            for k, (r, _) in enumerate(present):
                out.walls[r.rank].append(own[k] - med_wall[k])
            counters = [_counters(r, i, usual) for r, i in present]
            if all(c is not None for c in counters):
                cpu = [c[0] for c in counters]  # type: ignore[index]
                wait = [c[1] for c in counters]  # type: ignore[index]
                mw = machine_waits(cpu, wait)
                own = [o - m for o, m in zip(own, mw)]
                c_other, w_other = medians_of_others(cpu), medians_of_others(wait)
                for k, (r, _) in enumerate(present):
                    out.cpu_over[r.rank].append(cpu[k] - c_other[k])
                    out.wait_over[r.rank].append(wait[k] - w_other[k])
                out.waits.append(statistics.median(wait))
            med_own = medians_of_others(own)
            med_cls = [medians_of_others([v[c] for v in cls]) for c in range(NCLS)]
            best = None
            for k, (r, _) in enumerate(present):
                lead = own[k] - med_own[k]
                over = [cls[k][c] - med_cls[c][k] for c in range(NCLS)]
                lead_at[pos[r.rank]] = lead
                out.by_rank[r.rank].append((n, lead, over))
                out.chance[r.rank] += 1.0 / len(present)
                if best is None or lead > best[0]:
                    best = (lead, r.rank)
            out.slowest[best[1]] += 1  # type: ignore[index]
        out.steps.append((n, durs, lead_at, mean_cls))
    return out


def noise_of(ld: Leads) -> float:
    """The job's step-to-step noise: the median over the ranks of the spread
    (1.4826 MAD) of their leads; where most leads are equal (MAD 0) their
    standard deviation, then the spread of the step times: never 0 when the
    steps differ."""
    spreads = [mad([x[1] for x in v]) for v in ld.by_rank.values() if len(v) >= 2]
    noise = statistics.median(spreads) if spreads else 0.0
    if noise > 0:
        return noise
    sds = [statistics.pstdev([x[1] for x in v]) for v in ld.by_rank.values() if len(v) >= 2]
    noise = statistics.median(sds) if sds else 0.0
    if noise > 0:
        return noise
    durs = [d for _, ds, _, _ in ld.steps for d in ds if d is not None]
    if len(set(durs)) > 1:
        return max(mad(durs), statistics.pstdev(durs), 1.0)
    return 0.0


def _evidence(v: Sequence[float], slowest: int, chance: float, tested: int
              ) -> Tuple[float, float, float, float, float]:
    """(typical, mean, stderr, p of the mean, p of the slowest count) of one
    rank's leads v."""
    typical = typical_lead(v)
    mean, se, n_eff = lead_t(v)
    t = math.inf if se == 0 and mean > 0 else (mean / se if se > 0 else 0.0)
    p_mean = t_tail(t, n_eff - 1)
    p_slowest = binom_tail(slowest, len(v), chance / len(v)) if v else 1.0
    return typical, mean, se, p_mean, p_slowest


def verdict(ranks: List[Rank], ld: Leads) -> Dict[str, Any]:
    """Who the others waited for (docs/cli.md, "Stragglers"): the named
    ranks with their causes, each step's straggler, the floor and the noise."""
    compared = sum(1 for _, _, la, _ in ld.steps if any(x is not None for x in la))
    noise = noise_of(ld)
    all_durs = [d for _, ds, _, _ in ld.steps for d in ds if d is not None]
    med_step = statistics.median(all_durs) if all_durs else 0
    floor = max(STEP_SHARE * med_step, STEP_MIN_US)
    straggled: Dict[int, int] = {r.rank: 0 for r in ranks}
    who: Dict[int, int] = {}  # step -> its straggler
    steps_out = []
    for n, durs, lead_at, mean_cls in ld.steps:
        straggler = None
        known = [(x, -ranks[i].rank, i) for i, x in enumerate(lead_at) if x is not None]
        if known:
            x, _, i = max(known)
            if x >= floor:
                straggler = ranks[i].rank
                straggled[straggler] += 1
                who[n] = straggler
        steps_out.append({"step": n, "dur_us": durs,
                          "excess_us": [None if x is None else int(max(0.0, x)) for x in lead_at],
                          "straggler": straggler,
                          "by_class_us": None if mean_cls is None else
                          {c: int(v) for c, v in zip(CLASSES, mean_cls)}})
    stragglers = []
    tested = max(1, sum(1 for v in ld.by_rank.values() if len(v) >= MIN_STEPS))
    for r in ranks:
        v = ld.by_rank[r.rank]
        if compared < MIN_STEPS or len(v) < MIN_STEPS:
            continue
        typical, mean, se, p_mean, p_slowest = _evidence(
            [x[1] for x in v], ld.slowest[r.rank], ld.chance[r.rank], tested)
        # evidence over the steps, either test at ALPHA for all the ranks
        # tested; or the lead is so large that it holds the others back in
        # half of the steps (a lead every other step, as prefetching
        # DataLoader workers make it)
        evidence = min(p_mean, p_slowest) <= ALPHA / tested or (
            typical >= NOISE_K * noise and straggled[r.rank] >= HALF * compared)
        # ... and the others waited for it, at least the floor: taking the
        # machine's waits out may not make a straggler of a rank that waited
        # for them (a spin to a deadline, as a host's wait for its GPU, is not
        # stretched by the run queue: the rank the machine preempted there
        # only looks faster); a wall lead of a few us is noise, not a wait
        wall = typical_lead(ld.walls[r.rank])
        cpu_over = typical_lead(ld.cpu_over[r.rank]) if ld.cpu_over[r.rank] else None
        wait_over = typical_lead(ld.wait_over[r.rank]) if ld.wait_over[r.rank] else None
        common_fields = {"wall_lead_us": int(wall),
                         "cpu_lead_us": None if cpu_over is None else int(cpu_over),
                         "wait_lead_us": None if wait_over is None else int(wait_over)}
        p0 = ld.chance[r.rank] / len(v)
        # on a machine with more runnable threads than CPUs, a rank's extra
        # CPU work slows the others' work too (they share the CPUs): the
        # wall lead it leaves is a fraction of that work.  Its CPU time over
        # the others' then says what it did: a CPU lead at the floor, with a
        # wall lead of at least WALL_SHARE of it, is the others waiting for
        # its work (issue 68: a Lightning rank spun 10 % of the step beside
        # six burners, CPU lead 2.4 ms, wall lead 0.83 ms, floor 2.26 ms)
        waited = wall >= floor or (cpu_over is not None and cpu_over >= floor
                                   and wall >= WALL_SHARE * floor)
        if typical >= floor and mean >= floor and evidence and waited:
            held = [x for x in v if who.get(x[0]) == r.rank] or v
            s = _straggler(r, v, held, compared, ranks)
            s.update({"mean_lead_us": int(mean), "stderr_us": int(se), "p_mean": p_mean,
                      "slowest_steps": ld.slowest[r.rank], "p_slowest": p_slowest,
                      "chance_steps": round(p0 * len(v), 1), **common_fields})
            if _starved_workers(r, s, ranks):
                s.update({"cause_class": CPU_WAIT, "cause_cat": "",
                          "cause_name": "(its workers' run queue)"})
            stragglers.append(s)
            continue
        # slowed by its machine alone: the others waited for it (its wall
        # lead, with evidence) while its own lead is the machine's wait for a
        # CPU, not work of its own -- named with that cause, never a class
        if wait_over is None or wall < floor or wait_over < floor / 2:
            continue
        walls = ld.walls[r.rank]
        w_slowest = sum(1 for x in walls if x > 0)  # (not the slowest count: the others' leads)
        w_typ, w_mean, w_se, w_p, _ = _evidence(walls, 0, 0.0, tested)
        if w_mean >= floor and w_p <= ALPHA / tested:
            stragglers.append({
                "rank": r.rank, "steps": 0, "of_steps": compared, "excess_us": int(w_typ),
                "cause_class": CPU_WAIT, "cause_cat": "", "cause_name": "(run queue)",
                "cause_excess_us": int(wait_over), "cause_io_bytes": 0, "workers": None,
                "mean_lead_us": int(w_mean), "stderr_us": int(w_se), "p_mean": w_p,
                "slowest_steps": w_slowest, "p_slowest": 1.0,
                "chance_steps": round(len(walls) / 2, 1), **common_fields})
    stragglers.sort(key=lambda s: (s["cause_class"] == CPU_WAIT, -s["mean_lead_us"], s["rank"]))
    return {"steps": steps_out, "stragglers": stragglers, "noise_us": int(math.ceil(noise)),
            "straggler_bound_us": int(floor), "median_step_us": int(med_step),
            "straggled": straggled, "compared": compared,
            "cpu_wait": _cpu_wait(ld, med_step)}


def _starved_workers(r: Rank, s: Dict[str, Any], ranks: Sequence[Rank]) -> bool:
    """A data-wait straggler whose DataLoader workers did not work more than
    the other ranks' workers: their extra time a step (in their events, the
    items most) is under half the lead the others waited for, while extra
    work makes the wait at most as long as the work (workers in parallel:
    shorter).  Its wait is its workers waiting for a CPU on a contended
    machine (their items carry no run-queue wait): its machine, not its work
    (issue 68: a balanced Lightning rank beside six burners, data wait +2.4
    ms a step, its workers' items +126 us)."""
    if s["cause_class"] != "data" or not r.workers:
        return False
    if not any(o.workers for o in ranks if o is not r):
        return False  # nothing to compare its workers with
    w = s.get("workers")
    extra = w["excess_us"] if w else 0
    return extra < HALF * s["mean_lead_us"]


def _cpu_wait(ld: Leads, med_step: float) -> Optional[Dict[str, Any]]:
    """The median rank's run-queue wait per step, and its share of the
    median step (None: no counters)."""
    if not ld.waits:
        return None
    w = statistics.median(ld.waits)
    return {"median_us": int(w), "share": (w / med_step) if med_step else 0.0}


def analyze(results: Iterable[Result]) -> Dict[str, Any]:
    """The dict `summary --ranks --json` prints (docs/cli.md, "Ranks"): the
    leads, then the verdict on them."""
    results = list(results)
    ranks, loose, warnings = identify(results)
    kinds = sorted({r.main.get("step_kind") for r in ranks if r.main.get("step_kind")})
    ld = leads(ranks)
    v = verdict(ranks, ld)
    return {
        "step_kind": kinds[0] if len(kinds) == 1 else kinds,
        "job_ids": sorted({r.main.get("job_id") for r in ranks if r.main.get("job_id")}),
        "rank_order": [r.rank for r in ranks],
        "ranks": [_rank_row(r, v["straggled"][r.rank], ld.slowest[r.rank]) for r in ranks],
        "steps": v["steps"],
        "stragglers": v["stragglers"],
        "noise_us": v["noise_us"], "straggler_bound_us": v["straggler_bound_us"],
        "median_step_us": v["median_step_us"],
        "cpu_wait": v["cpu_wait"],
        "other_processes": [{"host": p["host"], "pid": p["pid"], "process_name":
                             p.get("process_name", "")} for p in loose],
        "alignment": clock_align.align(results),
        "warnings": warnings,
    }


def _usual_counters(ranks: Sequence[Rank]) -> Dict[int, Optional[Tuple[float, float]]]:
    """Each rank's median CPU time and run-queue wait over its steps that
    have them (None: none has): what a step of it without them is taken to
    have, so that one rank's missing counters do not leave every rank's wait
    in its step."""
    out: Dict[int, Optional[Tuple[float, float]]] = {}
    for r in ranks:
        known = [i for i in range(r.nsteps) if r.steps.wait[i] >= 0 and r.steps.cpu[i] >= 0]
        out[r.rank] = (statistics.median(r.steps.cpu[i] for i in known),
                       statistics.median(r.steps.wait[i] for i in known)) if known else None
    return out


def _counters(r: Rank, i: int, usual: Dict[int, Optional[Tuple[float, float]]]
              ) -> Optional[Tuple[float, float]]:
    if r.steps.wait[i] >= 0 and r.steps.cpu[i] >= 0:
        return float(r.steps.cpu[i]), float(r.steps.wait[i])
    return usual[r.rank]


def _rank_row(r: Rank, straggler_steps: int, slowest_steps: int) -> Dict[str, Any]:
    m = r.main
    durs = list(r.steps.dur)
    by = [sum(r.steps.by_class[c]) for c in range(NCLS)]
    total = sum(by)
    cpu = [x for x in r.steps.cpu if x >= 0]
    wait = [x for x in r.steps.wait if x >= 0]
    return {
        "rank": r.rank, "host": m["host"], "pid": m["pid"],
        "local_rank": m["local_rank"] if m.get("local_rank", -1) >= 0 else None,
        "world_size": m["world_size"] if m.get("world_size", -1) >= 0 else None,
        "job_id": m.get("job_id") or None, "rank_source": m.get("rank_source") or None,
        "process_name": m.get("process_name", ""), "path": m["path"],
        "workers": sorted(w["pid"] for w in r.workers),
        "steps": r.nsteps,
        "step_mean_us": statistics.fmean(durs) if durs else 0.0,
        "step_median_us": statistics.median(durs) if durs else 0,
        "by_class_us": dict(zip(CLASSES, by)),
        "share": {c: (v / total if total else 0.0) for c, v in zip(CLASSES, by)},
        "cpu_median_us": statistics.median(cpu) if cpu else None,
        "wait_median_us": statistics.median(wait) if wait else None,
        "straggler_steps": straggler_steps, "slowest_steps": slowest_steps,
    }


def _keys(results: Iterable[Result], field: str, per: int) -> Dict[Tuple[str, str], float]:
    """(cat, name) -> time (field "self_all" or "self_steps" of the RankKey) per step,
    over results."""
    out: Dict[Tuple[str, str], float] = {}
    for res in results:
        for k in res.get("keys", ()):
            us = getattr(k, field)
            if us:
                out[(k.cat, k.name)] = out.get((k.cat, k.name), 0.0) + us / max(per, 1)
    return out


def _io_bytes(results: Iterable[Result], key: Tuple[str, str]) -> int:
    return sum(k.io_bytes for res in results for k in res.get("keys", ())
               if (k.cat, k.name) == key)


def _class_keys(r: Rank, cls: int) -> Dict[Tuple[str, str], float]:
    """(cat, name) -> its self time in steps per step, for one class's events
    of the rank's main process."""
    per = max(r.nsteps, 1)
    return {(k.cat, k.name): k.self_steps / per for k in r.main.get("keys", ())
            if k.cls == cls and k.self_steps}


def _grew_most(r: Rank, ranks: List[Rank],
               cls: int) -> Optional[Tuple[Tuple[str, str], float]]:
    """The event of class cls whose self time a step exceeds the other
    ranks' median of it the most, with that excess (us), or None."""
    mine = _class_keys(r, cls)
    theirs = [_class_keys(o, cls) for o in ranks if o is not r]
    if not mine or not theirs:
        return None
    excess = {k: v - statistics.median(t.get(k, 0.0) for t in theirs) for k, v in mine.items()}
    k = max(excess, key=lambda x: (excess[x], x))
    return (k, excess[k]) if excess[k] > 0 else None


def _straggler(r: Rank, leads: List[Tuple[int, float, List[float]]],
               held: List[Tuple[int, float, List[float]]], compared: int,
               ranks: List[Rank]) -> Dict[str, Any]:
    """What a straggler's lead is made of: the class (not communication) whose
    typical excess over the others is largest, and that class's event whose
    time a step grew most over the other ranks' (when that explains half the
    class's excess), else its top event in the steps where it was over
    (weighted by the excess); its size, the median in the steps it held the
    others back (`held`)."""
    cause = max((c for c in range(NCLS) if c != COMM),
                key=lambda c: typical_lead([x[2][c] for x in leads]))
    per_step = [x[2][cause] for x in held]
    picks: Dict[int, float] = {}
    for n, _, over in leads:
        key = r.steps.top_key[cause][r.at(n)]  # type: ignore[index]
        if key >= 0 and over[cause] > 0:
            picks[key] = picks.get(key, 0.0) + over[cause]
    keys = r.main.get("keys", [])
    cause_cat, cause_name, io = "", "(untraced)" if cause == OTHER else "", 0
    tops = [r.steps.top_us[cause][r.at(n)] for n, _, _ in leads]  # type: ignore[index]
    # a sampled place (hang/sampler.h) is seen in some steps only, at 100 Hz:
    # its mean over the steps is its time a step
    top_us = max(statistics.median(tops), statistics.fmean(tops) if cause == OTHER else 0)
    grew = _grew_most(r, ranks, cause) if cause != OTHER else None
    if grew is not None and grew[1] >= statistics.median(per_step) / 2:
        # the class's event that grew most over the other ranks' same event
        # (a forward slowed by a tenth of the step is not its largest event:
        # backward is)
        cause_cat, cause_name = grew[0]
        io = _io_bytes([r.main], grew[0])
    elif picks and (cause != OTHER or top_us >= statistics.median(per_step) / 2):
        # (an `other` excess mostly in time no event covers stays "(untraced)",
        # unless the stack samples found where it went)
        k = keys[max(picks, key=lambda x: picks[x])]
        cause_cat, cause_name = k.cat, k.name
        io = _io_bytes([r.main], (k.cat, k.name))
    out = {
        "rank": r.rank, "steps": len(held) if held is not leads else 0, "of_steps": compared,
        "excess_us": int(statistics.median(x[1] for x in held)),
        "cause_class": CLASSES[cause], "cause_cat": cause_cat, "cause_name": cause_name,
        "cause_excess_us": int(statistics.median(per_step)),
        "cause_io_bytes": io, "workers": None,
    }
    others = [o for o in ranks if o is not r and o.workers]
    if r.workers and others:  # what its workers spend more on than the other ranks' workers
        mine = _keys(r.workers, "self_all", r.nsteps)
        theirs = [_keys(o.workers, "self_all", o.nsteps) for o in others]
        diff = {k: v - (statistics.median(t.get(k, 0.0) for t in theirs) if theirs else 0.0)
                for k, v in mine.items()}
        if diff:
            k = max(diff, key=lambda x: diff[x])
            if diff[k] > 0:
                out["workers"] = {"cat": k[0], "name": k[1], "excess_us": int(diff[k]),
                                  "io_bytes": _io_bytes(r.workers, k), **_slow_worker(r, k)}
    return out


def _slow_worker(r: Rank, key: Tuple[str, str]) -> Dict[str, Any]:
    """Which worker id (the processes that were worker N over the epochs)
    holds most of the rank's workers' time in key: `worker` and its
    `worker_share`, when it holds half again its even share (1 / workers),
    else `worker` null: the time is spread over them."""
    by_id: Dict[int, float] = {}
    for w in r.workers:
        wid = w.get("worker", -1)
        t = sum(k[5] for k in w.get("keys", ()) if (k[0], k[1]) == key)
        if wid is not None and wid >= 0 and t:
            by_id[wid] = by_id.get(wid, 0.0) + t
    total = sum(by_id.values())
    if len(by_id) < 2 or total <= 0:
        return {"worker": None, "worker_share": None}
    wid = max(by_id, key=lambda i: (by_id[i], -i))
    share = by_id[wid] / total
    if share < 1.5 / len(by_id):
        return {"worker": None, "worker_share": round(share, 3)}
    return {"worker": wid, "worker_share": round(share, 3)}
