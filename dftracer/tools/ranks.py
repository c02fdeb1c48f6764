"""The ranks of one job side by side (``dftracer summary --ranks``, the report's
Ranks section) and the clock alignment of ``merge``, ``view`` and ``report``.

The per-file work is ``_core._rank_file`` (src/reader/ranks.c): a file's
identity (host, pid, ppid, the ``rank`` metadata), its steps with the self
time of their events split into classes (compute, data wait, I/O,
communication, checkpoint, other) and the top event of each class, and its
sync points (collectives matched across ranks by group, sequence number and
name).  This module combines the files:

- ranks: each rank's main process is the file that names the rank and whose
  parent does not; files started by it (DataLoader workers) are its workers.
- stragglers: the straggler is the rank the others wait for (docs/cli.md,
  "Stragglers").  A rank's time in a step is split so that waiting for the
  others is communication (reader/ranks_steps.c), so its time outside
  communication is what it did itself.  Per step, a rank's lead is that time,
  less its run-queue wait (the machine's doing), minus the median of the
  other ranks' (paired within the step, so what
  slows the whole machine cancels).  Over the steps, a rank is named when
  its mean lead is evidence, not noise -- T_MIN standard errors above 0
  (winsorized, widened for correlated steps), or the slowest rank in so
  many steps that chance (1 / ranks a step) gives it at most P_SLOWEST /
  ranks -- and its typical and mean lead reach a practical floor
  (STEP_SHARE of the median step, STEP_MIN_US), and so does its lead with
  the waits left in (the others did wait for it), named with the class whose
  typical excess over the others holds most of it and that class's top
  event.  The step's straggler is the rank with the largest lead when it
  reaches the floor.  A balanced job's leads are noise around 0: no
  straggler, however many ranks or however loaded the machine.  The
  medians of the others come from one sort per step and class: linear in
  the ranks.
- clock alignment: one offset per host, the median over the collectives it
  shares with an aligned host of the difference of their ends.

Memory: per file, the steps (21 int64 each) and distinct (cat, name) keys; no
events.  The same numbers whether the files were read locally or with --dask.
"""

from __future__ import annotations

import math
import statistics
from array import array
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from dftracer import _core
from dftracer.tools import common
from dftracer.tools.lead_stats import (binom_tail, lead_t, mad, medians_of_others, t_tail,
                                       typical_lead)

CLASSES: Tuple[str, ...] = tuple(_core._RANK_CLASSES)
LABELS = {"compute": "compute", "data": "data wait", "io": "I/O", "comm": "comm",
          "checkpoint": "checkpoint", "other": "other"}
COMM = CLASSES.index("comm")
OTHER = CLASSES.index("other")
NCLS = len(CLASSES)
FIELDS = _core._RANK_STEP_FIELDS  # number, ts, dur, by class, top key by class, top us by class,
CPU = 3 + 3 * NCLS                 # the step thread's CPU time, its run-queue wait (-1: unknown)
WAIT = CPU + 1
STEP_SHARE = 0.05    # a straggler's lead: at least this share of the median step (practical floor)
STEP_MIN_US = 100    # ... and at least this
MIN_STEPS = 3        # steps compared before anyone is named
ALPHA = 1e-3         # evidence: a rank's mean lead above 0, or its count of slowest steps
                     # above chance, at this significance over all the ranks tested (Bonferroni)
NOISE_K = 3          # or: a typical lead of NOISE_K x the job's step-to-step noise ...
HALF = 0.5           # ... in at least half of the steps
MAX_TABLE_RANKS = 16                 # wider step x rank tables only in --json and the report
WORLD_MAX = 1 << 24                  # a world size past this is no real job's
PLAUSIBLE_US = 978_307_200_000_000   # 2001-01-01: a clock before it is not set
DAY_US = 86_400_000_000              # a host this far off the reference is warned about

Result = Dict[str, Any]


def _ok(r: Result) -> bool:
    return r.get("status") in ("ok", "truncated") and "sync" in r


def _own_rank(r: Result) -> Optional[int]:
    """The pass's `own_rank` (reader/identity.c applies the rank rule), None
    for none."""
    k = r.get("own_rank", -1)
    return k if k >= 0 else None


def _int64s(data: bytes) -> array:
    a = array("q")
    a.frombytes(data)
    return a


# ---- who is who --------------------------------------------------------------

class Rank:
    """A rank: its main process's result, its workers' results."""

    __slots__ = ("rank", "main", "workers", "steps", "index", "nsteps")

    def __init__(self, rank: int, main: Result, workers: List[Result]) -> None:
        self.rank = rank
        self.main = main
        self.workers = workers
        self.steps = _int64s(main.pop("steps", b""))  # the bytes are not kept twice
        n = len(self.steps) // FIELDS
        numbers = [self.steps[i * FIELDS] for i in range(n)]
        # steps 0..n-1 in order (the usual case) need no index: memory per rank
        self.index: Optional[Dict[int, int]] = (
            None if numbers == list(range(n)) else {s: i for i, s in enumerate(numbers)})
        self.nsteps = n

    def row(self, step: int) -> Optional[Sequence[int]]:
        i = (step if 0 <= step < self.nsteps else None) if self.index is None \
            else self.index.get(step)
        return None if i is None else self.steps[i * FIELDS:(i + 1) * FIELDS]

    def numbers(self) -> Iterable[int]:
        return range(self.nsteps) if self.index is None else self.index.keys()


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
        roots.sort(key=lambda r: (-len(r.get("steps", b"")), -r.get("events", 0), r["path"]))
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

def analyze(results: Iterable[Result]) -> Dict[str, Any]:
    """The dict `summary --ranks --json` prints (docs/cli.md, "Ranks")."""
    results = list(results)
    ranks, loose, warnings = identify(results)
    kinds = sorted({r.main.get("step_kind") for r in ranks if r.main.get("step_kind")})
    numbers = sorted(set().union(*(r.numbers() for r in ranks))) if ranks else []
    pos = {r.rank: i for i, r in enumerate(ranks)}
    # per rank: [(step, lead, per-class excess over the others' median)]
    leads: Dict[int, List[Tuple[int, float, List[float]]]] = {r.rank: [] for r in ranks}
    walls: Dict[int, List[float]] = {r.rank: [] for r in ranks}  # leads before the waits are taken out
    slowest: Dict[int, int] = {r.rank: 0 for r in ranks}  # steps with the largest lead
    chance: Dict[int, float] = {r.rank: 0.0 for r in ranks}  # sum of 1 / ranks compared
    per_step = []  # (step, durs, leads by position, mean time by class)
    usual_wait = _usual_waits(ranks)
    for n in numbers:
        present = [(r, r.row(n)) for r in ranks]
        present = [(r, row) for r, row in present if row is not None]
        durs: List[Optional[int]] = [None] * len(ranks)
        lead_at: List[Optional[float]] = [None] * len(ranks)
        for r, row in present:
            durs[pos[r.rank]] = row[2]
        # the step's split by class, the mean over the ranks that have it
        mean_cls = [sum(row[3 + c] for _, row in present) / len(present)
                    for c in range(NCLS)] if present else None
        if len(present) >= 2:
            cls = [row[3:3 + NCLS] for _, row in present]
            own = [sum(v[c] for c in range(NCLS) if c != COMM) for v in cls]
            med_wall = medians_of_others(own)
            for i, (r, _) in enumerate(present):
                walls[r.rank].append(own[i] - med_wall[i])
            waits = [row[WAIT] if row[WAIT] >= 0 else usual_wait[r.rank] for r, row in present]
            if all(w is not None for w in waits):
                # time waiting for a CPU is the machine's, not the rank's work
                own = [max(0, o - w) for o, w in zip(own, waits)]
            med_own = medians_of_others(own)
            med_cls = [medians_of_others([v[c] for v in cls]) for c in range(NCLS)]
            best = None
            for i, (r, _) in enumerate(present):
                lead = own[i] - med_own[i]
                over = [cls[i][c] - med_cls[c][i] for c in range(NCLS)]
                lead_at[pos[r.rank]] = lead
                leads[r.rank].append((n, lead, over))
                chance[r.rank] += 1.0 / len(present)
                if best is None or lead > best[0]:
                    best = (lead, r.rank)
            slowest[best[1]] += 1
        per_step.append((n, durs, lead_at, mean_cls))
    compared = sum(1 for _, _, la, _ in per_step if any(x is not None for x in la))
    spreads = [mad([x[1] for x in v]) for v in leads.values() if len(v) >= 2]
    noise = statistics.median(spreads) if spreads else 0.0
    med_step = statistics.median(d for _, ds, _, _ in per_step for d in ds if d is not None) \
        if per_step else 0
    floor = max(STEP_SHARE * med_step, STEP_MIN_US)
    steps_out = []
    straggled: Dict[int, int] = {r.rank: 0 for r in ranks}
    who: Dict[int, int] = {}  # step -> its straggler
    for n, durs, lead_at, mean_cls in per_step:
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
    tested = max(1, sum(1 for v in leads.values() if len(v) >= MIN_STEPS))
    for r in ranks:
        v = leads[r.rank]
        if compared < MIN_STEPS or len(v) < MIN_STEPS:
            continue
        typical = typical_lead([x[1] for x in v])
        mean, se, n_eff = lead_t([x[1] for x in v])
        t = math.inf if se == 0 and mean > 0 else (mean / se if se > 0 else 0.0)
        p_mean = t_tail(t, n_eff - 1)
        p0 = chance[r.rank] / len(v)
        p_slowest = binom_tail(slowest[r.rank], len(v), p0)
        # evidence over the steps, either test at ALPHA for all the ranks
        # tested; or the lead is so large that it holds the others back in
        # half of the steps (a lead every other step, as prefetching
        # DataLoader workers make it)
        evidence = min(p_mean, p_slowest) <= ALPHA / tested or (
            typical >= NOISE_K * noise and straggled[r.rank] >= HALF * compared)
        # ... and the others waited for it, at least the floor: taking the
        # waits out may not make a straggler of a rank that waited for them
        # (a spin to a deadline, as a host's wait for its GPU, is not
        # stretched by the run queue: the rank the machine preempted there
        # only looks faster); a wall lead of a few us is noise, not a wait
        wall = typical_lead(walls[r.rank])
        if typical >= floor and mean >= floor and evidence and wall >= floor:
            held = [x for x in v if who.get(x[0]) == r.rank] or v
            s = _straggler(r, v, held, compared, ranks)
            s.update({"mean_lead_us": int(mean), "stderr_us": int(se),
                      "p_mean": p_mean,
                      "slowest_steps": slowest[r.rank], "p_slowest": p_slowest,
                      "chance_steps": round(p0 * len(v), 1), "wall_lead_us": int(wall)})
            stragglers.append(s)
    stragglers.sort(key=lambda s: (-s["mean_lead_us"], s["rank"]))
    return {
        "step_kind": kinds[0] if len(kinds) == 1 else kinds,
        "job_ids": sorted({r.main.get("job_id") for r in ranks if r.main.get("job_id")}),
        "rank_order": [r.rank for r in ranks],
        "ranks": [_rank_row(r, straggled[r.rank], slowest[r.rank]) for r in ranks],
        "steps": steps_out,
        "stragglers": stragglers,
        "noise_us": int(noise), "straggler_bound_us": int(floor),
        "median_step_us": int(med_step),
        "other_processes": [{"host": p["host"], "pid": p["pid"], "process_name":
                             p.get("process_name", "")} for p in loose],
        "alignment": align(results),
        "warnings": warnings,
    }


def _usual_waits(ranks: Sequence[Rank]) -> Dict[int, Optional[float]]:
    """Each rank's median run-queue wait over its steps that have one (None:
    none has): what a step of it without one is taken to have waited, so that
    one rank's missing counters do not leave every rank's wait in its step."""
    out: Dict[int, Optional[float]] = {}
    for r in ranks:
        known = [r.steps[i * FIELDS + WAIT] for i in range(r.nsteps)
                 if r.steps[i * FIELDS + WAIT] >= 0]
        out[r.rank] = statistics.median(known) if known else None
    return out


def _rank_row(r: Rank, straggler_steps: int, slowest_steps: int) -> Dict[str, Any]:
    m = r.main
    durs = [r.steps[i * FIELDS + 2] for i in range(r.nsteps)]
    by = [sum(r.steps[i * FIELDS + 3 + c] for i in range(r.nsteps)) for c in range(NCLS)]
    total = sum(by)
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
        "straggler_steps": straggler_steps, "slowest_steps": slowest_steps,
    }


def _keys(results: Iterable[Result], field: int, per: int) -> Dict[Tuple[str, str], float]:
    """(cat, name) -> time (field 5: self, 6: self in steps) per step, over results."""
    out: Dict[Tuple[str, str], float] = {}
    for res in results:
        for k in res.get("keys", ()):
            if k[field]:
                out[(k[0], k[1])] = out.get((k[0], k[1]), 0.0) + k[field] / max(per, 1)
    return out


def _io_bytes(results: Iterable[Result], key: Tuple[str, str]) -> int:
    return sum(k[7] for res in results for k in res.get("keys", ()) if (k[0], k[1]) == key)


def _class_keys(r: Rank, cls: int) -> Dict[Tuple[str, str], float]:
    """(cat, name) -> its self time in steps per step, for one class's events
    of the rank's main process."""
    per = max(r.nsteps, 1)
    return {(k[0], k[1]): k[6] / per for k in r.main.get("keys", ()) if k[2] == cls and k[6]}


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
        key = r.row(n)[3 + NCLS + cause]
        if key >= 0 and over[cause] > 0:
            picks[key] = picks.get(key, 0.0) + over[cause]
    keys = r.main.get("keys", [])
    cause_cat, cause_name, io = "", "(untraced)" if cause == OTHER else "", 0
    tops = [r.row(n)[3 + 2 * NCLS + cause] for n, _, _ in leads]
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
        cause_cat, cause_name = k[0], k[1]
        io = _io_bytes([r.main], (k[0], k[1]))
    out = {
        "rank": r.rank, "steps": len(held) if held is not leads else 0, "of_steps": compared,
        "excess_us": int(statistics.median(x[1] for x in held)),
        "cause_class": CLASSES[cause], "cause_cat": cause_cat, "cause_name": cause_name,
        "cause_excess_us": int(statistics.median(per_step)),
        "cause_io_bytes": io, "workers": None,
    }
    others = [o for o in ranks if o is not r and o.workers]
    if r.workers and others:  # what its workers spend more on than the other ranks' workers
        mine = _keys(r.workers, 5, r.nsteps)
        theirs = [_keys(o.workers, 5, o.nsteps) for o in others]
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


# ---- clock alignment ---------------------------------------------------------

def align(results: Iterable[Result]) -> Dict[str, Any]:
    """One offset per host (us, to subtract from its ts) from the ends of the
    collectives hosts share: the reference is the host of the lowest rank;
    each other host's offset is the median over the collectives it shares
    with an aligned host of the difference of their ends (each end the
    median over the host's files).  Residual: per collective seen in two or
    more files, max - min of its corrected ends."""
    files = [r for r in results if _ok(r)]
    ends: Dict[str, Dict[int, List[int]]] = {}
    for r in files:
        s = _int64s(r["sync"])
        host = ends.setdefault(r["host"], {})
        for i in range(0, len(s), 2):
            host.setdefault(s[i], []).append(s[i + 1])
    host_end = {h: {k: statistics.median(v) for k, v in e.items()} for h, e in ends.items()}
    drift = max((r["clock"][3] - r["clock"][2] for r in files if r["clock"][0]), default=0)
    out: Dict[str, Any] = {"hosts": sorted(ends), "reference": None, "offsets_us": {},
                           "matched": {}, "unaligned": [], "spread_us": None,
                           "collectives": 0, "clock_drift_us": drift}
    with_sync = [h for h in sorted(host_end) if host_end[h]]
    if not with_sync:
        out["unaligned"] = sorted(ends) if len(ends) > 1 else []
        return out
    # the reference: the host of the lowest rank, among the hosts whose clock is
    # set (one that reads 1970 must not take every other host back with it)
    set_clock = {h for h in with_sync if statistics.median(host_end[h].values()) >= PLAUSIBLE_US}
    ranked = sorted((r["host"] not in set_clock,
                     _own_rank(r) if _own_rank(r) is not None else 1 << 62, r["host"])
                    for r in files if host_end.get(r["host"]))
    ref = ranked[0][2]
    offsets = {ref: 0.0}
    matched = {ref: len(host_end[ref])}
    # Grow the aligned set one host at a time, each time by the pair (host,
    # aligned host) sharing the most collectives (ties: the first host in
    # name order, then the earliest aligned): Prim's way, each pair's count
    # taken once when its second host is aligned, so hosts cost their square,
    # not their cube.
    order = {h: i for i, h in enumerate(with_sync)}
    pending = [h for h in with_sync if h != ref]
    best: Dict[str, Tuple[int, str]] = {}  # host -> (common collectives, aligned host)

    def consider(g: str) -> None:
        keys_g = host_end[g].keys()
        for h in pending:
            n = len(host_end[h].keys() & keys_g)
            if n and (h not in best or n > best[h][0]):
                best[h] = (n, g)

    consider(ref)
    while best:
        h = max(best, key=lambda x: (best[x][0], -order[x]))
        n, g = best.pop(h)
        pending.remove(h)
        common_keys = host_end[h].keys() & host_end[g].keys()
        offsets[h] = offsets[g] + statistics.median(host_end[h][k] - host_end[g][k]
                                                    for k in common_keys)
        matched[h] = n
        consider(h)
    spreads = []
    by_key: Dict[int, List[float]] = {}
    for h, e in ends.items():
        if h in offsets:
            for k, v in e.items():
                by_key.setdefault(k, []).extend(x - offsets[h] for x in v)
    spreads = sorted(max(v) - min(v) for v in by_key.values() if len(v) >= 2)
    out.update(reference=ref, offsets_us={h: round(v) for h, v in sorted(offsets.items())},
               matched=matched, unaligned=[h for h in sorted(ends) if h not in offsets],
               collectives=len(spreads), warnings=_clock_warnings(files, offsets, by_key, ref))
    if spreads:
        out["spread_us"] = {"median": spreads[len(spreads) // 2],
                            "p95": spreads[min(len(spreads) - 1, int(0.95 * len(spreads)))],
                            "max": spreads[-1]}
    return out


def _clock_warnings(files: List[Result], offsets: Dict[str, float],
                    by_key: Dict[int, List[float]], ref: str) -> List[str]:
    """One warning per kind of absurd clock data: hosts a day or more off the
    reference (a clock never set reads 1970), and a file whose collectives
    end far from the same collectives elsewhere after alignment (its
    sequence numbers shifted: it counts its collectives differently)."""
    out = []
    far = sorted((h for h, v in offsets.items() if abs(v) >= DAY_US), key=lambda h: -abs(offsets[h]))
    if far:
        h = far[0]
        out.append(f"host {h}'s clock is {abs(offsets[h]) / DAY_US:,.0f} days "
                   f"{'behind' if offsets[h] < 0 else 'ahead of'} the reference host {ref}'s"
                   + (f" ({len(far)} hosts are a day or more off)" if len(far) > 1 else "")
                   + "; its times are moved by the offset")
    med = {k: statistics.median(v) for k, v in by_key.items() if len(v) >= 3}
    if len(med) < 3:
        return out
    # On one host (one clock) a rank whose collectives end a little late is
    # its own timing (a later completion), not a clock's: only a file off by
    # about one collective's gap (half the median gap between consecutive
    # collectives) counts its collectives differently.
    one_host = len({r["host"] for r in files if r["host"] in offsets}) < 2
    ends = sorted(med.values())
    gaps = [b - a for a, b in zip(ends, ends[1:]) if b > a]
    shift_floor = statistics.median(gaps) / 2 if one_host and gaps else 0
    devs = []  # (|median distance of a file's ends from the others'|, file)
    for r in files:
        if r["host"] not in offsets:
            continue
        s = _int64s(r["sync"])
        dev = [s[i + 1] - offsets[r["host"]] - med[s[i]]
               for i in range(0, len(s), 2) if s[i] in med]
        if len(dev) >= 3:
            devs.append((abs(statistics.median(dev)), r))
    if len(devs) < 3:
        return out
    typical = statistics.median(d for d, _ in devs)
    d, r = max(devs, key=lambda x: x[0])
    if d >= max(10 * typical, 1000, shift_floor):
        who = f"rank {_own_rank(r)}" if _own_rank(r) is not None else r["path"]
        out.append(f"{who}: its collectives end {common.fmt_us(d)} away from the same ones on "
                   "the other ranks (typical spread "
                   f"{common.fmt_us(typical)}): are its sequence numbers shifted?")
    return out


def describe_alignment(a: Dict[str, Any]) -> List[str]:
    """The lines merge, view and report print about the alignment."""
    lines = [f"warning: clock alignment: {w}" for w in a.get("warnings", [])]
    if a["reference"] is None:
        if len(a["hosts"]) > 1:
            lines.append(f"clock alignment: {len(a['hosts'])} hosts but no collectives with "
                         "group/seq args to align them on; times left as recorded")
        return lines
    if len(a["offsets_us"]) > 1:
        offs = ", ".join(f"{h} {v / 1e3:+.3f} ms ({a['matched'][h]} collectives)"
                         for h, v in a["offsets_us"].items() if h != a["reference"])
        lines.append(f"clock alignment: reference host {a['reference']}; offsets {offs}")
    if a["unaligned"]:
        lines.append("clock alignment: no collective shared with the others, left as "
                     f"recorded: {', '.join(a['unaligned'])}")
    if a["spread_us"]:
        sp = a["spread_us"]
        lines.append(f"collective ends after alignment: spread median "
                     f"{common.fmt_us(sp['median'])}, p95 {common.fmt_us(sp['p95'])}, "
                     f"max {common.fmt_us(sp['max'])} over {a['collectives']} collectives")
    if a["clock_drift_us"] >= 1000:
        lines.append(f"clock drift: the wall clock moved up to "
                     f"{common.fmt_us(a['clock_drift_us'])} against a trace clock during the run "
                     "(the `clock` events)")
    return lines


def file_offsets(results: Iterable[Result], a: Dict[str, Any]) -> Dict[str, int]:
    """path -> us to add to its ts."""
    return {r["path"]: -int(a["offsets_us"].get(r["host"], 0)) for r in results if _ok(r)}


# ---- text ----------------------------------------------------------------------

def _ms(us: Optional[float]) -> str:
    return "-" if us is None else f"{us / 1e3:.1f}"


def straggler_line(s: Dict[str, Any]) -> str:
    cause = LABELS[s["cause_class"]]
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
    parts.extend(describe_alignment(a["alignment"]))
    return "\n".join(parts)
