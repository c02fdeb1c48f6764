"""Hang detection (docs/hang.md): which rank of a job is stuck, where, and
who waits for it, from the `open` and `stack` events of the ranks' traces
(docs/trace-format.md, "Open spans" and "Stacks").

Used live by `dftracer top` (fed line by line by the follower, now = the
wall clock) and after the job by `summary --ranks` and `report`, from the
hang state the C ranks pass keeps while it reads each file once
(src/reader/ranks_hang.c; now = the newest time any file was seen alive).
The rule:

* a rank *waits* when one of its threads is inside a collective (a `comm`
  span with `group` and `seq`) according to the newest snapshot of its
  trace; the collective waited for longest, (group, seq, name), is the one
  looked at;
* there is a hang when it has been waited for longer than `hang_after`
  seconds and some ranks of its group are not inside it: those are *stuck*
  (a rank of the job whose trace is missing counts as stuck too);
* a rank whose process is gone without finalizing (SIGKILL, the OOM killer,
  a segfault) is *dead*, and a hang by itself; one stopped by SIGSTOP is
  stuck (`top` only: it reads /proc);
* a stuck rank whose main process waits in a DataLoader `fetch` is waiting
  for a batch: its worker with open spans (or stacks) is named.

A long step that every rank computes together has nobody inside a
collective; a straggler that catches up leaves the collective, and the next
snapshot of every waiting rank says so (an empty `open` event), so neither
raises it.  When every rank of the group is inside the collective, nobody is
missing and nothing is reported."""

from __future__ import annotations

import linecache
import os
import re
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from dftracer.tools import dead_steps, hang_workers, liveness, memory
from dftracer.tools.line_keys import unescape

DEFAULT_AFTER = 60.0       # s: top's --hang-after
POST_MORTEM_AFTER = 2.0    # s: waits shorter than this when a job ended are not a hang
DEAD_GAP_US = int(liveness.RECENT_S * 1e6)  # after the job: silent this long before the newest: dead
MAX_FILES = 4096           # FH definitions kept per process: the newest 2048 to 4096
MAX_SPANS = 16             # spans kept per thread snapshot (the tracer writes at most 16)
MAX_THREADS = 64           # threads kept per process
MAX_LISTED = 8             # ranks named one by one in the one-line message
MAX_STUCK = 1024           # stuck ranks listed in the JSON (the rest are counted)
WORLD_CAP = 1 << 20        # a world size believed up to this
_CALL = re.compile(r"([A-Za-z_][\w.]*)\s*\(")
_GROUP_RANKS = re.compile(r"\[([\d,\-+]*)\]$")
_INTS = ("depth", "since", "seq", "step", "bucket")
_STRS = ("value", "span_cat", "group", "fhash")
from dftracer.tools.hang_workers import PASSIVE as _PASSIVE, batch_text as _batch_text

def _int(v: Any) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _span(args: Dict[str, Any]) -> Dict[str, Any]:
    """An open span's args kept with their documented types only (a `depth`
    written as a string is no depth): the rule never compares a str with an
    int."""
    out: Dict[str, Any] = {k: args[k] for k in _INTS if _int(args.get(k)) is not None}
    out.update((k, args[k]) for k in _STRS if isinstance(args.get(k), str))
    return out


def _frames(text: str) -> List[Dict[str, Any]]:
    frames = []
    for line in text.split("\n"):
        if not line:
            continue
        where, _, fn = line.rpartition(" ")
        path, _, ln = where.rpartition(":")
        frames.append({"file": path, "line": int(ln) if ln.isdigit() and len(ln) < 10 else 0,
                       "function": fn})
    return frames


class ProcHang:
    """What one process's trace says it is inside of (its newest `open`
    snapshot per thread) and its newest stacks; bounded as the C pass's
    state is (docs/hang.md)."""

    def __init__(self) -> None:
        self.rss_bytes: Optional[int] = None   # its newest resident memory (post mortem)
        self.rss_steps: List[Tuple[int, int]] = []  # (step, resident bytes) at step ends
        self.threads: Dict[int, Tuple[int, List[Dict[str, Any]]]] = {}
        self.stacks: Dict[int, Dict[str, Any]] = {}
        self.stack_key: Tuple[int, int] = (-1, -1)  # (at, req) of the stacks kept
        # FH hash -> path in two generations, as reader/ranks_hang.c keeps them
        self.files: Dict[str, str] = {}
        self.older_files: Dict[str, str] = {}
        self.last_at = 0       # newest trace-clock time the process wrote something at
        self.sigterm = False   # it wrote stacks at SIGTERM

    @classmethod
    def from_pass(cls, d: Dict[str, Any]) -> "ProcHang":
        """From the `hang` of a `_core._rank_file` result (reader/ranks_hang.c)."""
        st = cls()
        for tid, at, spans in d.get("threads", []):
            kept = []
            for s in spans:
                s = dict(s)
                for k in ("value", "span_cat", "group"):
                    if k in s:
                        s[k] = unescape(s[k])
                if "file" in s:
                    st.files[s["fhash"]] = unescape(s.pop("file"))
                kept.append(s)
            kept.sort(key=lambda s: s.get("depth", 0))
            st.threads[tid] = (at, kept)
        st.stack_key = (d.get("stack_at", -1), d.get("stack_req", 0))
        for s in d.get("stacks", []):
            st.stacks[s["tid"]] = {"name": unescape(s["name"]), "tid": s["tid"],
                                   "frames": _frames(unescape(s["frames"])), "why": s["why"] or None,
                                   "req": st.stack_key[1], "at": st.stack_key[0]}
        st.sigterm = bool(d.get("sigterm"))
        st.last_at = d.get("last_at") or 0
        st.rss_bytes = d.get("rss_bytes")
        st.rss_steps = list(d.get("rss_steps") or [])
        return st

    def observe(self, name: str, args: Dict[str, Any], tid: Any) -> None:
        """One metadata event as `top`'s follower reads it (the same rule as
        reader/ranks_hang.c)."""
        at, tid = _int(args.get("at")), _int(tid)
        if name == "open" and at is not None and tid is not None:
            self.last_at = max(self.last_at, at)
            cur = self.threads.get(tid)
            if cur is None:
                if len(self.threads) >= MAX_THREADS:
                    old = min(self.threads, key=lambda t: self.threads[t][0])
                    if self.threads[old][0] >= at:
                        return
                    del self.threads[old]
                cur = self.threads[tid] = (at, [])
            elif at > cur[0]:
                cur = self.threads[tid] = (at, [])
            elif at < cur[0]:
                return
            n = _int(args.get("n"))
            if n and n > 0 and isinstance(args.get("value"), str) and len(cur[1]) < MAX_SPANS:
                cur[1].append(_span(args))
                cur[1].sort(key=lambda s: s.get("depth", 0))
        elif name == "stack" and at is not None:
            self.last_at = max(self.last_at, at)
            if args.get("why") == "SIGTERM":
                self.sigterm = True
            req = _int(args.get("req")) or 0
            key = (at, req)  # the events of one answer share both
            if key != self.stack_key:
                if key < self.stack_key:
                    return  # an older answer
                self.stacks, self.stack_key = {}, key
            if len(self.stacks) >= MAX_THREADS:
                return
            frames = args.get("frames")
            self.stacks[tid if tid is not None else -1] = {
                "name": str(args.get("value", ""))[:256], "tid": tid,
                "frames": _frames(frames[-8192:] if isinstance(frames, str) else ""),
                "why": args.get("why") if isinstance(args.get("why"), str) else None,
                "req": req, "at": at}
        elif name == "FH":
            h, path = args.get("value"), args.get("name")
            if isinstance(h, str) and isinstance(path, str) and h not in self.older_files:
                if len(self.files) >= MAX_FILES // 2 and h not in self.files:
                    self.older_files, self.files = self.files, {}
                self.files.setdefault(h, path[:1024])
        elif name == "clock" and _int(args.get("value")) is not None:
            self.last_at = max(self.last_at, args["value"])

    def file_of(self, h: str) -> str:
        """The path an FH event gave hash h, else h itself."""
        return self.files.get(h) or self.older_files.get(h) or h

    def open_spans(self) -> List[Tuple[int, List[Dict[str, Any]]]]:
        """(tid, spans outermost first) of every thread with spans open."""
        return [(tid, spans) for tid, (_, spans) in sorted(self.threads.items()) if spans]


def state_of(p: Any) -> ProcHang:
    """The ProcHang kept on a top_figures.Process (made on first use)."""
    st = p.__dict__.get("hang_state")
    if st is None:
        st = p.__dict__["hang_state"] = ProcHang()
    return st


# ---- the rule -------------------------------------------------------------------

def _group_ranks(group: str, world_n: int) -> Optional[List[Tuple[int, int]]]:
    """The global ranks of a group named as the comm events name it, as
    half-open intervals within the job's [0, world_n): `world`, or
    `<name>[0-3]` / `<name>[0,2]`; a label cut short (`+N`) or unknown: None
    (the whole job).  A range is never expanded."""
    if group == "world":
        return None
    m = _GROUP_RANKS.search(group)
    if not m or "+" in m.group(1):
        return None
    out: List[Tuple[int, int]] = []
    for part in m.group(1).split(","):
        a, dash, b = part.partition("-")
        if not a.isdigit() or len(a) > 10 or (dash and (not b.isdigit() or len(b) > 10)):
            continue
        lo, hi = int(a), (int(b) if dash else int(a)) + 1
        if lo < min(hi, world_n):
            out.append((lo, min(hi, world_n)))
    if not out:
        return None
    out.sort()
    merged = [out[0]]
    for lo, hi in out[1:]:
        if lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def _in_group(group: str, rank: int, world_n: int) -> bool:
    """Whether rank is one of a group's ranks (`world`: every rank; a label
    cut short or unknown: none, as nothing can be said of it)."""
    if group == "world":
        return True
    spans = _group_ranks(group, world_n)
    return spans is not None and any(lo <= rank < hi for lo, hi in spans)


def _collective_wait(st: ProcHang) -> Optional[Dict[str, Any]]:
    """The innermost collective one of the process's threads is inside."""
    best = None
    for tid, spans in st.open_spans():
        for s in spans:
            if s.get("span_cat") == "comm" and isinstance(s.get("group"), str) and \
                    _int(s.get("seq")) is not None and _int(s.get("since")) is not None:
                if best is None or s["since"] < best["since"]:
                    best = dict(s, tid=tid)
    return best


def _source_call(path: str, line: int) -> Optional[str]:
    """The call on a source line (`time.sleep` in `time.sleep(3600)`), when
    the file can be read here."""
    try:
        text = linecache.getline(path, line).strip() if path and 0 < line < 1 << 24 else ""
    except (OSError, ValueError, UnicodeError, MemoryError):
        text = ""
    calls = [c for c in _CALL.findall(text[:1000]) if c not in ("if", "while", "for", "return", "with")]
    return calls[-1] if calls and len(calls) == 1 else (calls[0] if calls else None)


def _open_list(st: ProcHang, spans: List[Dict[str, Any]], now_us: int) -> List[Dict[str, Any]]:
    return [{"name": s.get("value"), "cat": s.get("span_cat"),
             "since_s": round((now_us - s["since"]) / 1e6, 3) if "since" in s else None,
             **{k: s[k] for k in ("group", "seq", "step", "bucket") if k in s},
             **({"file": st.file_of(s["fhash"])} if "fhash" in s else {})}
            for s in spans]


def _where(p: Dict[str, Any], st: ProcHang, now_us: int) -> Dict[str, Any]:
    """Where a stuck process is: its open spans (the thread that has the
    most), its stack's innermost frame of that thread, and the call."""
    spans_by_tid = st.open_spans()
    main_tid = p.get("pid")
    tid, spans = (None, [])
    if spans_by_tid:
        tid, spans = max(spans_by_tid, key=lambda ts: (len(ts[1]), ts[0] == main_tid))
    out: Dict[str, Any] = {
        "rank": p["rank"], "pid": p.get("pid"), "host": p.get("host"), "path": p.get("path"),
        "state": p.get("state"), "tid": tid, "open": _open_list(st, spans, now_us),
        "last_event_ts": p.get("last_ts") or None,
        "file": None, "line": None, "function": None, "call": None, "thread": None,
    }
    if p.get("last_step") is not None:
        out["last_step"] = p["last_step"]
    if "last_step_written" in p:  # a dead rank's, raised by its peers' collectives
        out["last_step_written"] = p["last_step_written"]
    if st.rss_bytes is not None:  # a dead rank's memory: was it growing? (docs/hang.md)
        out["rss_bytes"] = st.rss_bytes
        pts = sorted(st.rss_steps)[-memory.CREEP_MIN_STEPS:]
        if len(pts) >= 3:
            out["growth_bytes_per_step"] = int(memory.theil_sen(pts))
    stack = None
    if st.stacks:
        stack = st.stacks.get(tid) if tid is not None else None
        if stack is None:
            stack = st.stacks.get(main_tid) or next(iter(st.stacks.values()))
    if stack and stack["frames"]:
        f = stack["frames"][-1]
        out.update(file=f["file"], line=f["line"], function=f["function"], thread=stack["name"],
                   call=_source_call(f["file"], f["line"]))
    inner = spans[-1] if spans else None
    if inner is not None and inner.get("span_cat") not in _PASSIVE:
        out["call"] = str(inner.get("value")) + (f" {out['open'][-1]['file']}" if "fhash" in inner else "")
    return out


def _pick_main(procs: List[Dict[str, Any]]) -> Tuple[Dict[int, Dict[str, Any]], int]:
    """Per rank, its main process (the file of that rank whose parent is not
    a process of the same rank on its host, and that wrote no `worker` event:
    DataLoader workers carry their parent's rank) with its workers; and the
    job's world size."""
    by_key = {(p.get("host"), p.get("pid")): p for p in procs}
    mains: Dict[int, List[Dict[str, Any]]] = {}
    workers: List[Dict[str, Any]] = []
    sizes: Dict[int, int] = {}
    for p in procs:
        r = p.get("rank")
        if _int(r) is None or r < 0:
            continue
        ws = _int(p.get("world_size"))
        if ws is not None and ws > 0:
            sizes[min(ws, WORLD_CAP)] = sizes.get(min(ws, WORLD_CAP), 0) + 1
        parent = by_key.get((p.get("host"), p.get("ppid"))) if p.get("ppid") else None
        if parent is not None and parent is not p and parent.get("rank") == r:
            workers.append(dict(p, parent=parent))
        elif p.get("worker") is not None:  # a worker whose parent's trace is not here
            workers.append(dict(p, parent=None))
        else:
            mains.setdefault(r, []).append(p)
    by_rank: Dict[int, Dict[str, Any]] = {}
    for r, ps in mains.items():
        # two processes say they are rank r: the one in a collective, else the
        # first (the parent of a worker whose trace has no ppid)
        by_rank[r] = dict(max(ps, key=lambda p: (_collective_wait(p["hang"]) is not None,
                                                 -(p.get("pid") or 0))), workers=[])
    for w in workers:
        m = by_rank.get(w["rank"])
        if m is not None and (w["parent"] is None or m.get("pid") == w["parent"].get("pid")):
            m["workers"].append(w)
    # the world size most processes wrote (ties: the smaller): one file's
    # 2147483647 does not make two billion ranks missing
    world = min(sizes, key=lambda ws: (-sizes[ws], ws)) if sizes else 0
    return by_rank, world


def _mark_dead(by_rank: Dict[int, Dict[str, Any]], world_n: int) -> None:
    """After the job: a rank whose trace ends with neither `end` nor SIGTERM
    stacks, and whose process is gone (tools/liveness.py: not running, not
    stopped), died, when the job's other ranks say they were still alive
    after it: one of them ended (finalized, or asked to stop: SIGTERM stacks
    or an `end` that names its signal) or still runs, or
    wrote DEAD_GAP_US later.  (A job killed whole by SIGKILL leaves every
    rank without both: then nobody is named dead.)  A dead rank's last step
    is raised to what its peers' collectives say it finished
    (tools/dead_steps.py): its own trace lost its last flush interval."""
    alive_after = {r for r, p in by_rank.items()
                   if p["state"] in ("finished", "running", "stopped") or p["hang"].sigterm
                   or p.get("end_signal")}
    newest = max((p.get("last_ts") or 0 for p in by_rank.values()), default=0)
    for r, p in by_rank.items():
        if r in alive_after:
            continue
        if alive_after or newest - (p.get("last_ts") or 0) > DEAD_GAP_US:
            p["state"] = "dead"
    peers = list(by_rank.values())
    for r, p in by_rank.items():
        if p["state"] != "dead":
            continue
        s = dead_steps.last_step(p, peers, lambda g, r=r: _in_group(g, r, world_n))
        own = p.get("last_step")
        if s is not None and (own is None or s > own):
            p["last_step_written"], p["last_step"] = own, s


def detect(procs: Iterable[Dict[str, Any]], now_us: int, hang_after: float,
           after_job: bool = False) -> Optional[Dict[str, Any]]:
    """The hang object (docs/hang.md), or None.  procs: one dict per traced
    process of the job with rank, pid, ppid, host, path, state (running,
    silent, finished, stopped, dead, exited), world_size, last_ts, worker,
    last_step and `hang` (its ProcHang).  after_job: the job's files are
    complete, and a rank that ended without a trace of its end is dead."""
    by_rank, world_size = _pick_main(list(procs))
    if not by_rank:
        return None
    world_n = max(max(by_rank) + 1, world_size)
    if after_job:
        _mark_dead(by_rank, world_n)
    dead = sorted(r for r, p in by_rank.items() if p.get("state") == "dead")
    waits: Dict[Tuple[str, int, str], List[Tuple[int, int]]] = {}
    for r, p in by_rank.items():
        if p.get("state") == "finished":
            continue
        w = _collective_wait(p["hang"])
        if w is not None:
            waits.setdefault((w["group"], w["seq"], w["value"]), []).append((r, w["since"]))
    key: Optional[Tuple[str, int, str]] = None
    waiting_ranks: List[int] = []
    stuck_ranks: List[int] = []
    stuck_count = 0
    since = None
    w0: Dict[str, Any] = {}
    if waits:
        key, waiting = min(waits.items(), key=lambda kv: min(s for _, s in kv[1]))
        w0 = _collective_wait(by_rank[waiting[0][0]]["hang"]) or {}  # a DDP bucket's index
        since = min(s for _, s in waiting)
        waiting_ranks = sorted(r for r, _ in waiting)
        if (now_us - since) / 1e6 >= hang_after:
            inside = set(waiting_ranks)
            for lo, hi in _group_ranks(key[0], world_n) or [(0, world_n)]:
                stuck_count += hi - lo - sum(1 for r in inside if lo <= r < hi)
                r = lo
                while r < hi and len(stuck_ranks) < MAX_STUCK:
                    if r not in inside:
                        stuck_ranks.append(r)
                    r += 1
    if not stuck_ranks:  # no hang by the rule: a dead rank is one by itself
        key, waiting_ranks, stuck_count = None, [], len(dead)
        stuck_ranks = dead[:MAX_STUCK]
        if not dead:
            return None
        since = min(by_rank[r].get("last_ts") or now_us for r in dead)
    stuck = []
    for r in stuck_ranks:
        p = by_rank.get(r)
        if p is None:
            stuck.append({"rank": r, "pid": None, "host": None, "path": None, "state": "no trace",
                          "open": [], "file": None, "line": None, "function": None, "call": None})
            continue
        info = _where(p, p["hang"], now_us)
        w = _collective_wait(p["hang"])
        if w is not None:
            info["in_collective"] = {"name": w["value"], "group": w["group"], "seq": w["seq"]}
        batch = hang_workers.batch_wait(p, now_us, _where)
        if batch is not None:
            info["batch_wait"] = batch
        stuck.append(info)
    hang = {
        "stuck_ranks": stuck_ranks, "waiting_ranks": waiting_ranks,
        "collective": key[2] if key else None, "group": key[0] if key else None,
        "seq": key[1] if key else None,
        **({"bucket": w0["bucket"]} if key and isinstance(w0.get("bucket"), int) else {}),
        "since_s": round((now_us - since) / 1e6, 1), "since_ts": since, "hang_after_s": hang_after,
        "stuck": stuck, "dead_ranks": dead,
        "stopped_ranks": sorted(r for r, p in by_rank.items() if p.get("state") == "stopped"),
    }
    if stuck_count > len(stuck_ranks):
        hang["stuck_more"] = stuck_count - len(stuck_ranks)
    hang["message"] = message(hang)
    return hang


def _ranks_text(ranks: List[int], more: int = 0) -> str:
    shown = ", ".join(str(r) for r in ranks[:MAX_LISTED])
    more += len(ranks) - MAX_LISTED if len(ranks) > MAX_LISTED else 0
    return shown + (f" and {more} more" if more > 0 else "")


def _frame_text(s: Dict[str, Any]) -> str:
    where = ""
    if s.get("file"):
        where = f" in {os.path.basename(str(s['file']))}:{s['line']}"
        if s.get("call"):
            where += f" ({s['call']})"
        elif s.get("function"):
            where += f" ({s['function']})"
    elif s.get("call"):
        where = f" in {s['call']}"
    return where


def _stuck_text(s: Dict[str, Any]) -> str:
    """What follows `rank N` for a stuck rank (a dead one's memory last)."""
    text = _stuck_where(s)
    if s.get("state") == "dead" and s.get("rss_bytes") is not None:
        text += f" ({memory.size_text(s['rss_bytes'])}"
        g = s.get("growth_bytes_per_step")
        if g is not None and g >= memory.CREEP_BYTES_PER_STEP:
            text += f", growing {memory.size_text(g)} a step"
        text += ")"
    return text


def _stuck_where(s: Dict[str, Any]) -> str:
    state = s.get("state")
    if state == "dead":
        where = " dead (gone without finalizing)"
    elif state == "stopped":
        where = " stopped by a signal (SIGSTOP: state T)"
    elif s.get("batch_wait"):
        return _batch_text(s["batch_wait"])
    else:
        where = " stopped"
    where += _frame_text(s) if state not in ("dead", "stopped") or s.get("file") else ""
    if state == "no trace":
        where += " (no trace file)"
    ic = s.get("in_collective")
    if ic:
        where += f" inside {ic['name']} #{ic['seq']} ({ic['group']})"
    # a dead rank whose trace lost steps: its newest snapshot is older than them
    raised = "last_step_written" in s
    for o in reversed(s.get("open", []) if not raised else []):
        if o.get("name") == "iteration" and "step" in o:
            return where + f" during iteration {o['step']}"
    inner = [o for o in s.get("open", []) if o.get("cat") in _PASSIVE and not raised]
    if inner:
        return where + f" during {inner[-1]['name']}"
    if state == "dead" and s.get("last_step") is not None:
        where += f" after step {s['last_step']}"
        if raised:
            own = s["last_step_written"]
            where += (f" (by its peers' collectives; its trace ends after step {own})"
                      if own is not None else " (by its peers' collectives; its trace has no step)")
    return where


def message(h: Dict[str, Any]) -> str:
    """The one line: `hang: rank 2 stopped in hang_job.py:22 (time.sleep) during
    iteration 12; ranks 0, 1, 3 waited 41.2 s in all_reduce #12 (world)`."""
    stuck = h["stuck"]
    more = h.get("stuck_more", 0)
    if len(stuck) == 1 and not more:
        head = f"rank {stuck[0]['rank']}{_stuck_text(stuck[0])}"
    else:
        parts = [f"rank {s['rank']}{_stuck_text(s)}" for s in stuck[:MAX_LISTED]]
        more_parts = len(stuck) - MAX_LISTED + more
        verb = "dead" if all(s.get("state") == "dead" for s in stuck) else "stopped"
        head = f"ranks {_ranks_text(h['stuck_ranks'], more)} {verb}: " + "; ".join(parts) + \
            (f"; and {more_parts} more" if more_parts > 0 else "")
    if h["collective"] is None:
        return f"hang: {head}"
    w = h["waiting_ranks"]
    who = f"rank {w[0]}" if len(w) == 1 else f"ranks {_ranks_text(w)}"
    bucket = f"DDP bucket {h['bucket']}, " if "bucket" in h else ""
    return (f"hang: {head}; {who} waited {h['since_s']:.1f} s in "
            f"{h['collective']} #{h['seq']} ({bucket}{h['group']})")


# ---- live: dftracer top ------------------------------------------------------------

def from_follower(fol: Any, now_s: float, hang_after: float) -> Optional[Dict[str, Any]]:
    """The hang among the files `dftracer top` follows."""
    procs = []
    for path, f in fol.files.items():
        p = f.proc
        st = p.__dict__.get("hang_state") or ProcHang()
        state = fol.state(f, now_s)
        if state == "finished" and p.end_signal:
            state = "exited"  # its `end` names the signal that ended it: asked to stop
        elif state != "finished":
            live = liveness.proc_state(p.host, p.pid, fol.newest_us(f))
            if live == "stopped":
                state = "stopped"
            elif live == "gone" and not st.sigterm and \
                    (f.size <= f.offset or f.stuck_at is not None):
                state = "dead"  # and all of its file was read: no `end` is still to come
        procs.append({"rank": p.rank, "pid": p.pid, "ppid": p.ppid, "host": p.host, "path": path,
                      "state": state, "world_size": p.world_size, "last_ts": p.head,
                      "worker": p.worker, "last_step": p.step, "hang": st,
                      "end_signal": p.end_signal})
    return detect(procs, int(now_s * 1e6), hang_after)


# ---- after the job: summary --ranks, report ------------------------------------------

def _last_step(r: Dict[str, Any]) -> Optional[int]:
    steps = r.get("steps")  # a _core.RankSteps: named int64 columns
    number = getattr(steps, "number", None)
    if not isinstance(number, bytes) or len(number) < 8 or len(number) % 8:
        return None
    return memoryview(number).cast("q")[-1]


def procs_of(results: Iterable[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One process per result of the ranks pass (`_core._rank_file`), with
    the hang state the pass kept and its rank by the one rule (the C pass's
    identity: the last valid `rank` event, else the process name); its
    state `finished` (`end`), `running` or `stopped` (no `end` yet, and its
    process still runs: tools/liveness.py) or `exited` (asked to stop: an
    `end` that names the signal that ended it, SIGTERM stacks, or gone)."""
    procs = []
    for r in results:
        if not isinstance(r.get("hang"), dict):
            continue  # unreadable
        st = ProcHang.from_pass(r["hang"])
        rank = r.get("own_rank", -1)  # the rank rule, as reader/identity.c applied it
        rank = rank if _int(rank) is not None and rank >= 0 else None
        end = r.get("end_max", 0) if r.get("has_ts") else 0
        ppid, ws, worker = r.get("ppid", -1), r.get("world_size", -1), r.get("worker", -1)
        pid = r.get("pid") if r.get("pid", -1) >= 0 else None
        last_ts = max(end, st.last_at)
        signalled = liveness.end_signal(r)
        # an `end` that names a signal was written as the signal ended the
        # process (a launcher killing a hung job's ranks): asked to stop
        state = "finished" if r.get("finalized") and not signalled else "exited"
        if state == "exited" and not st.sigterm and not signalled:
            # no end yet: still running? (tools/liveness.py)
            live = liveness.process_state(r.get("host") or None, pid, r.get("path"), last_ts)
            state = "exited" if live == "gone" else live
        procs.append({"rank": rank, "pid": pid,
                      "ppid": ppid if ppid >= 0 else None, "host": r.get("host") or None,
                      "path": r.get("path"), "world_size": ws if ws > 0 else None,
                      "state": state, "worker": worker if worker >= 0 else None,
                      "end_signal": signalled,
                      "last_step": _last_step(r), "last_ts": last_ts, "hang": st,
                      "step_kind": r.get("step_kind"), "last_sync": r.get("last_sync") or [],
                      "_steps_raw": r.get("steps")})
    return procs


def post_mortem(results: List[Dict[str, Any]], hang_after: float = 0.0) -> Optional[Dict[str, Any]]:
    """The hang the files of a finished (or killed) job show, from the ranks
    pass's results, now being the newest time any of them was seen alive.
    hang_after defaults to 0: a job that ended with ranks inside a
    collective that others never reached hung."""
    procs = procs_of(results)
    now = max((p["last_ts"] for p in procs), default=0)
    return detect(procs, now, hang_after, after_job=True)


def dead_last_steps(results: List[Dict[str, Any]]) -> Dict[str, int]:
    """{path: the last step it finished} of each dead rank of the ranks
    pass's results, as the post mortem counts it (its peers' collectives
    raise its own trace's count: tools/dead_steps.py).  For the memory
    report of a job with a killed rank."""
    by_rank, world_size = _pick_main(procs_of(results))
    if not by_rank:
        return {}
    _mark_dead(by_rank, max(max(by_rank) + 1, world_size))
    return {p["path"]: p["last_step"] for p in by_rank.values()
            if p["state"] == "dead" and p.get("last_step") is not None}


# ---- marks: dftracer view ----------------------------------------------------------

MARK_ID = (1 << 53) - 1  # an id no tracer writes (ids count up from 1)


def mark_event(h: Dict[str, Any], pid_of: Callable[[str], Optional[int]]) -> Dict[str, Any]:
    """The global instant event `HANG` at the moment the first rank began
    to wait, which Perfetto draws across every track, with the message and
    the ranks in its args; on the track of the first stuck rank with a file
    (pid_of: a source file's path -> its pid in the merged file).  `merge`
    writes it before every process's events, so that each `end` stays its
    process's last event (docs/trace-format.md, rule 5): a rank its launcher
    killed has one (its signal in it)."""
    ev = {"id": MARK_ID, "name": "HANG", "cat": "hang", "pid": 0, "tid": 0,
          "ts": h["since_ts"], "ph": "i", "s": "g",
          "args": {"message": h["message"], "stuck_ranks": h["stuck_ranks"],
                   "waiting_ranks": h["waiting_ranks"], "collective": h["collective"],
                   "group": h["group"], "seq": h["seq"], "since_s": h["since_s"]}}
    pids = [pid for s in h["stuck"] if s.get("path")
            for pid in [pid_of(s["path"])] if pid is not None]
    if pids:
        ev["pid"] = ev["tid"] = pids[0]
    return ev
