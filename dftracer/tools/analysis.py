"""Per-file analysis behind `dftracer report` (no plotting here).

`analyze_file` reads one trace through the C event reader
(`_core._EventReader`) and returns what the summary's per-group totals cannot
give: self time (an event's duration minus that of the events nested in it on
the same thread), I/O volume in time bins, the steps of a training loop and
the time spent waiting for data versus computing.  `merge` adds up the
per-file results; the report's totals per category and name come from
`dftracer summary`'s own aggregation (dftracer/tools/summary.py).

Memory: the events of one file are held per thread as arrays of integers
(about 60 bytes an event at the peak, with the sort order and self times) while
its nesting is worked out; files are analysed one per worker, so the peak is
set by the largest file, not by the run."""

from __future__ import annotations

import bisect
import re
from array import array
from typing import Any, Dict, List, Optional, Tuple

from dftracer import _core
from dftracer.tools import classes as _cls
from dftracer.tools import work
from dftracer.tools.line_keys import unescape
from dftracer.tools.summary import name_group

_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")

# The longest duration used (src/reader/reader.h, DFT_DUR_MAX_US; docs/cli.md,
# "Bad durations"): events whose dur is negative or longer, or whose end does
# not fit in 64 bits, are left out as they are by the summary pass.
DUR_MAX_US = 365 * 24 * 3600 * 1000000
_TS_MAX = 2**63 - 1

# the classes the report charts (reader/classify.c's data and compute)
WAIT, COMPUTE = 1, 2


def step_kind(cat: str, name: str) -> Optional[str]:
    """'iteration' (pipeline/iteration), 'profiler' (torch.profiler's
    ProfilerStep#N), 'train' (an ai.pipeline.train loop body), else None."""
    return _cls.step_kind(cat, name)


def event_class(cat: str, name: str) -> int:
    """WAIT: waiting for data; COMPUTE: computing (reader/classify.c's data
    and compute classes); else 0."""
    cls = _cls.event_class(cat, name)
    return WAIT if cls == "data" else COMPUTE if cls == "compute" else 0


class _Union:
    """A union of intervals: its length, and how much of [a, b) it covers."""

    def __init__(self) -> None:
        self.spans: List[Tuple[int, int]] = []
        self.merged: Optional[Tuple[List[int], List[int], List[int]]] = None

    def add(self, a: int, b: int) -> None:
        if b > a:
            self.spans.append((a, b))
            self.merged = None

    def _merge(self) -> Tuple[List[int], List[int], List[int]]:
        if self.merged is None:
            lo: List[int] = []
            hi: List[int] = []
            for a, b in sorted(self.spans):
                if hi and a <= hi[-1]:
                    hi[-1] = max(hi[-1], b)
                else:
                    lo.append(a)
                    hi.append(b)
            cum, t = [], 0
            for a, b in zip(lo, hi):
                t += b - a
                cum.append(t)
            self.merged = (lo, hi, cum)
        return self.merged

    def length(self) -> int:
        cum = self._merge()[2]
        return cum[-1] if cum else 0

    def _before(self, x: int) -> int:
        lo, hi, cum = self._merge()
        j = bisect.bisect_left(lo, x)
        return cum[j - 1] - max(0, hi[j - 1] - x) if j else 0

    def cover(self, a: int, b: int) -> int:
        return self._before(b) - self._before(a) if self.spans else 0


class _Thread:
    __slots__ = ("ts", "dur", "key")

    def __init__(self) -> None:
        self.ts = array("q")
        self.dur = array("q")
        self.key = array("q")


def analyze_file(path: str, t0: int, bin_us: int) -> Dict[str, Any]:
    """One file's self times, I/O bins, steps and wait/compute split.

    t0 and bin_us place the I/O bins: bin b covers [t0 + b*bin_us,
    t0 + (b+1)*bin_us).  Never raises for a bad file (status as in
    dftracer.tools.work)."""
    try:
        reader = _core._EventReader(path)
    except OSError as exc:
        return work.failure(path, exc)
    keys: Dict[Tuple[str, str], int] = {}
    key_list: List[Tuple[str, str]] = []
    threads: Dict[Tuple[int, int], _Thread] = {}
    io_bins: Dict[Tuple[str, int], List[float]] = {}  # (cat, bin) -> [bytes, busy us]
    events = 0
    # (cat, name, pid, tid) -> (key index, the thread's three append methods)
    cache: Dict[Tuple[str, str, int, int], Tuple[int, Any, Any, Any]] = {}
    for batch in reader:
        events += len(batch)
        for cat, name, pid, tid, ts, dur, io in batch:
            if not 0 <= dur <= DUR_MAX_US or ts > _TS_MAX - dur:
                continue  # a bad duration: summary counts it, no time uses it
            ent = cache.get((cat, name, pid, tid))
            if ent is None:
                k = keys.get((cat, name))
                if k is None:
                    k = keys[(cat, name)] = len(key_list)
                    key_list.append((unescape(cat), unescape(name)))  # as summary shows them
                th = threads.get((pid, tid))
                if th is None:
                    th = threads[(pid, tid)] = _Thread()
                ent = cache[(cat, name, pid, tid)] = (k, th.ts.append, th.dur.append,
                                                      th.key.append)
            k, add_ts, add_dur, add_key = ent
            add_ts(ts)
            add_dur(dur)
            add_key(k)
            if io >= 0:
                _add_io(io_bins, cat, ts - t0, dur, io, bin_us)
    classes = [event_class(c, n) for c, n in key_list]
    steps_kind = [step_kind(c, n) for c, n in key_list]

    self_by_key: Dict[int, int] = {}
    self_by_pid_key: Dict[Tuple[int, int], int] = {}
    per_pid: Dict[int, Dict[str, int]] = {}
    steps: List[Dict[str, Any]] = []
    counters: Dict[Tuple[int, str], int] = {}
    comm_cls = [_cls.event_class(c, n) == "comm" for c, n in key_list]
    comm_of: Dict[int, _Union] = {}
    for (pid, tid), th in threads.items():  # the process's collectives, any thread
        u = comm_of.setdefault(pid, _Union())
        for t, d, k in zip(th.ts, th.dur, th.key):
            if comm_cls[k]:
                u.add(t, t + d)
    tops: Dict[int, _Union] = {}
    for (pid, tid), th in sorted(threads.items()):
        _sweep(pid, th, classes, steps_kind, key_list, self_by_key, self_by_pid_key,
               per_pid, steps, counters, comm_of.get(pid, _Union()),
               tops.setdefault(pid, _Union()))
    for pid, acc in per_pid.items():  # wall-clock time, not summed over threads
        acc["busy_us"] = tops[pid].length()
        acc["comm_us"] = comm_of[pid].length() if pid in comm_of else 0
    return {
        "path": path, "status": reader.status, "message": reader.message, "events": events,
        "self_by_name": [(key_list[k][0], key_list[k][1], v) for k, v in self_by_key.items()],
        "self_by_pid_cat": _by_pid_cat(self_by_pid_key, key_list),
        "io_bins": [(c, b, v[0], v[1]) for (c, b), v in io_bins.items()],
        "per_pid": per_pid,
        "steps": steps,
    }


def _add_io(bins: Dict[Tuple[str, int], List[float]], cat: str, start: int, dur: int,
            nbytes: int, bin_us: int) -> None:
    """Spreads an I/O event's bytes and time over the bins it overlaps."""
    first = start // bin_us
    if dur <= 0:
        v = bins.setdefault((cat, first), [0, 0])
        v[0] += nbytes
        return
    last = (start + dur - 1) // bin_us
    if last == first:
        v = bins.setdefault((cat, first), [0, 0])
        v[0] += nbytes
        v[1] += dur
        return
    end = start + dur
    for b in range(first, last + 1):
        lo = max(start, b * bin_us)
        hi = min(end, (b + 1) * bin_us)
        v = bins.setdefault((cat, b), [0, 0])
        v[0] += nbytes * (hi - lo) / dur
        v[1] += hi - lo


def _by_pid_cat(self_by_pid_key: Dict[Tuple[int, int], int],
                key_list: List[Tuple[str, str]]) -> List[Tuple[int, str, int]]:
    out: Dict[Tuple[int, str], int] = {}
    for (pid, k), v in self_by_pid_key.items():
        key = (pid, key_list[k][0])
        out[key] = out.get(key, 0) + v
    return [(pid, cat, v) for (pid, cat), v in out.items()]


def _sweep(pid: int, th: _Thread, classes: List[int], kinds: List[Optional[str]],
           key_list: List[Tuple[str, str]], self_by_key: Dict[int, int],
           self_by_pid_key: Dict[Tuple[int, int], int], per_pid: Dict[int, Dict[str, int]],
           steps: List[Dict[str, Any]], counters: Dict[Tuple[int, str], int],
           comm: "_Union", tops: "_Union") -> None:
    """Nesting on one thread: events sorted by start (longest first); an event
    lies inside the innermost open event that contains it entirely."""
    ts, dur, key = th.ts, th.dur, th.key
    n = len(ts)
    order = array("q", bytes(8 * n))
    _core._sort_spans(ts, dur, order)  # by start, longest first
    selfs = array("q", dur)
    step_of = array("q", [-1]) * n
    acc = per_pid.setdefault(pid, {"wait_us": 0, "compute_us": 0, "busy_us": 0, "comm_us": 0})
    # stack entries: [end, index, inside-wait, inside-compute, step]
    stack: List[List[int]] = []
    last_train_wait = -1  # index of the latest `train.iter` (waiting for a train step)
    for i in order:
        end = ts[i] + dur[i]
        while stack and stack[-1][0] < end:
            stack.pop()
        k = key[i]
        cls = classes[k]
        if stack:
            parent = stack[-1]
            selfs[parent[1]] -= dur[i]
            in_wait, in_compute, step = parent[2], parent[3], parent[4]
        else:
            tops.add(ts[i], end)
            in_wait = in_compute = 0
            step = -1
        # time waiting inside a compute range counts as waiting, not computing
        if cls == WAIT and not in_wait:
            acc["wait_us"] += dur[i]
            if in_compute:
                acc["compute_us"] -= dur[i]
        elif cls == COMPUTE and not in_compute and not in_wait:
            # waiting for a collective inside compute (backward, optimizer.step) is comm
            acc["compute_us"] += dur[i] - comm.cover(ts[i], end)
        kind = kinds[k]
        if kind is not None and step == -1:
            number = _step_number(key_list[k][1], kind, pid, counters)
            wait_before = 0
            if kind == "train" and last_train_wait >= 0:
                wait_before = dur[last_train_wait]
                last_train_wait = -1
            step = len(steps)
            steps.append({"pid": pid, "kind": kind, "step": number, "ts": ts[i],
                          "dur_us": dur[i], "wait_before_us": wait_before, "by_cat": {}})
        elif key_list[k] == ("pipeline", "train.iter"):
            last_train_wait = i
        step_of[i] = step
        stack.append([end, i, in_wait or cls == WAIT, in_compute or cls == COMPUTE, step])
    for i in range(n):
        s = selfs[i]
        if s < 0:  # overlapping children (several writers on one tid)
            s = 0
        k = key[i]
        self_by_key[k] = self_by_key.get(k, 0) + s
        pk = (pid, k)
        self_by_pid_key[pk] = self_by_pid_key.get(pk, 0) + s
        st = step_of[i]
        if st >= 0:
            cat = key_list[k][0]
            if kinds[k] is not None:
                cat = "untraced"  # step time no traced event covers
            elif cat == "PP":  # torch.profiler: its data loading apart from its ops
                cat = "PP data loading" if classes[k] == WAIT else "PP ops"
            by_cat = steps[st]["by_cat"]
            by_cat[cat] = by_cat.get(cat, 0) + s


def _step_number(name: str, kind: str, pid: int, counters: Dict[Tuple[int, str], int]) -> int:
    """ProfilerStep#N: N; a train loop's body: its position (0-based) among the
    process's train steps."""
    n = counters.get((pid, kind), 0)
    counters[(pid, kind)] = n + 1
    if kind == "profiler":
        m = _STEP_RE.match(name)
        if m:
            return int(m.group(1))
    return n


def merge(results: List[Dict[str, Any]], hosts: Dict[str, str],
          group_numbered: bool = True) -> Dict[str, Any]:
    """Adds up analyze_file results; hosts maps each path to its host (from
    the summary) so that processes are told apart by (host, pid).  With
    group_numbered, self times by name are grouped as the summary's by-name
    table is (ProfilerStep#*); steps keep their numbers."""
    self_by_name: Dict[Tuple[str, str], int] = {}
    self_by_proc_cat: Dict[Tuple[str, int, str], int] = {}
    io: Dict[Tuple[str, int], List[float]] = {}
    per_proc: Dict[Tuple[str, int], Dict[str, int]] = {}
    steps: List[Dict[str, Any]] = []
    for r in results:
        if r.get("status") not in ("ok", "truncated", "corrupt"):
            continue
        host = hosts.get(r["path"], "")
        for cat, name, v in r["self_by_name"]:
            key = (cat, name_group(name) if group_numbered else name)
            self_by_name[key] = self_by_name.get(key, 0) + v
        for pid, cat, v in r["self_by_pid_cat"]:
            k = (host, pid, cat)
            self_by_proc_cat[k] = self_by_proc_cat.get(k, 0) + v
        for cat, b, nbytes, busy in r["io_bins"]:
            v = io.setdefault((cat, b), [0, 0])
            v[0] += nbytes
            v[1] += busy
        for pid, acc in r["per_pid"].items():
            p = per_proc.setdefault((host, pid), {"wait_us": 0, "compute_us": 0, "busy_us": 0,
                                                  "comm_us": 0})
            for k2, v2 in acc.items():
                p[k2] = p.get(k2, 0) + v2
        for s in r["steps"]:
            steps.append(dict(s, host=host))
    return {
        "self_by_name": [{"cat": c, "name": n, "self_us": v}
                         for (c, n), v in sorted(self_by_name.items(), key=lambda x: -x[1])],
        "self_by_process_cat": [{"host": h, "pid": p, "cat": c, "self_us": v}
                                for (h, p, c), v in sorted(self_by_proc_cat.items())],
        "io_bins": [{"cat": c, "bin": b, "bytes": v[0], "busy_us": v[1]}
                    for (c, b), v in sorted(io.items(), key=lambda x: (x[0][1], x[0][0]))],
        "wait_compute": [dict(host=h, pid=p, **v) for (h, p), v in sorted(per_proc.items())],
        "steps": sorted(steps, key=lambda s: (s["host"], s["pid"], s["kind"], s["ts"])),
    }
