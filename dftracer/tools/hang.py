"""Hang detection (docs/hang.md): which rank of a job is stuck, where, and
who waits for it, from the `open` and `stack` events of the ranks' traces
(docs/trace-format.md, "Open spans" and "Stacks").

Used live by `dftracer top` (fed by the follower, now = the wall clock) and
after the job by `summary --ranks` (each file scanned for its tracer
metadata, now = the newest time any file was seen alive).  The rule:

* a rank *waits* when one of its threads is inside a collective (a `comm`
  span with `group` and `seq`) according to the newest snapshot of its
  trace; the collective waited for longest, (group, seq, name), is the one
  looked at;
* there is a hang when it has been waited for longer than `hang_after`
  seconds and some ranks of its group are not inside it: those are *stuck*
  (a rank of the job whose trace is missing counts as stuck too).

A long step that every rank computes together has nobody inside a
collective; a straggler that catches up leaves the collective, and the next
snapshot of every waiting rank says so (an empty `open` event), so neither
raises it.  When every rank of the group is inside the collective, nobody is
missing and nothing is reported."""

from __future__ import annotations

import json
import linecache
import os
import re
import zlib
from typing import Any, Dict, Iterable, List, Optional, Tuple

from dftracer.tools import line_keys, rank_rule

DEFAULT_AFTER = 60.0       # s: top's --hang-after
POST_MORTEM_AFTER = 2.0    # s: waits shorter than this when a job ended are not a hang
MAX_FILES = 10000          # FH definitions kept per process (to name an open I/O call)
MAX_LISTED = 8             # ranks named one by one in the one-line message
_CALL = re.compile(r"([A-Za-z_][\w.]*)\s*\(")
_GROUP_RANKS = re.compile(r"\[([\d,\-+]*)\]$")


class ProcHang:
    """What one process's trace says it is inside of (its newest `open`
    snapshot per thread) and its newest stacks."""

    def __init__(self) -> None:
        self.threads: Dict[int, Tuple[int, List[Dict[str, Any]]]] = {}
        self.stacks: Dict[int, Dict[str, Any]] = {}
        self.stack_key: Tuple[int, int] = (-1, -1)  # (at, req) of the stacks kept
        self.files: Dict[str, str] = {}
        self.last_at = 0       # newest trace-clock time the process wrote something at

    def observe(self, name: str, args: Dict[str, Any], tid: Any) -> None:
        at = args.get("at")
        if name == "open" and isinstance(at, int) and isinstance(tid, int):
            self.last_at = max(self.last_at, at)
            cur = self.threads.get(tid)
            if cur is None or at > cur[0]:
                cur = self.threads[tid] = (at, [])
            elif at < cur[0]:
                return
            if isinstance(args.get("n"), int) and args["n"] > 0 and isinstance(args.get("value"), str):
                cur[1].append({k: args[k] for k in ("value", "span_cat", "since", "depth", "group",
                                                    "seq", "step", "fhash") if k in args})
                cur[1].sort(key=lambda s: s.get("depth", 0))
        elif name == "stack" and isinstance(at, int):
            self.last_at = max(self.last_at, at)
            req = args.get("req") if isinstance(args.get("req"), int) else 0
            key = (at, req)  # the events of one answer share both
            if key != self.stack_key:
                if at < self.stack_key[0]:
                    return  # an older answer
                self.stacks, self.stack_key = {}, key
            frames = []
            for line in str(args.get("frames", "")).split("\n"):
                if not line:
                    continue
                where, _, fn = line.rpartition(" ")
                path, _, ln = where.rpartition(":")
                frames.append({"file": path, "line": int(ln) if ln.isdigit() else 0, "function": fn})
            self.stacks[tid if isinstance(tid, int) else -1] = {
                "name": str(args.get("value", "")), "tid": tid, "frames": frames,
                "why": args.get("why"), "req": req, "at": at}
        elif name == "FH" and len(self.files) < MAX_FILES:
            if isinstance(args.get("value"), str) and isinstance(args.get("name"), str):
                self.files[args["value"]] = args["name"]
        elif name == "clock" and isinstance(args.get("value"), int):
            self.last_at = max(self.last_at, args["value"])

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

def _group_ranks(group: str, world: List[int]) -> List[int]:
    """The global ranks of a group named as the comm events name it: `world`,
    or `<name>[0-3]` / `<name>[0,2]`; a label cut short (`+N`) or unknown:
    the ranks seen."""
    if group == "world":
        return world
    m = _GROUP_RANKS.search(group)
    if not m or "+" in m.group(1):
        return world
    out: List[int] = []
    for part in m.group(1).split(","):
        if "-" in part:
            a, _, b = part.partition("-")
            if a.isdigit() and b.isdigit():
                out.extend(range(int(a), int(b) + 1))
        elif part.isdigit():
            out.append(int(part))
    return out or world


def _collective_wait(st: ProcHang) -> Optional[Dict[str, Any]]:
    """The innermost collective one of the process's threads is inside."""
    best = None
    for tid, spans in st.open_spans():
        for s in spans:
            if s.get("span_cat") == "comm" and isinstance(s.get("group"), str) and \
                    isinstance(s.get("seq"), int) and isinstance(s.get("since"), int):
                if best is None or s["since"] < best["since"]:
                    best = dict(s, tid=tid)
    return best


def _source_call(path: str, line: int) -> Optional[str]:
    """The call on a source line (`time.sleep` in `time.sleep(3600)`), when
    the file can be read here."""
    text = linecache.getline(path, line).strip() if path and line > 0 else ""
    calls = [c for c in _CALL.findall(text) if c not in ("if", "while", "for", "return", "with")]
    return calls[-1] if calls and len(calls) == 1 else (calls[0] if calls else None)


def _where(p: Dict[str, Any], st: ProcHang, now_us: int) -> Dict[str, Any]:
    """Where a stuck rank is: its open spans (the thread that has the most),
    its stack's innermost frame of that thread, and the call."""
    spans_by_tid = st.open_spans()
    main_tid = p.get("pid")
    tid, spans = (None, [])
    if spans_by_tid:
        tid, spans = max(spans_by_tid, key=lambda ts: (len(ts[1]), ts[0] == main_tid))
    out: Dict[str, Any] = {
        "rank": p["rank"], "pid": p.get("pid"), "host": p.get("host"), "path": p.get("path"),
        "state": p.get("state"), "tid": tid,
        "open": [{"name": s.get("value"), "cat": s.get("span_cat"),
                  "since_s": round((now_us - s["since"]) / 1e6, 3) if isinstance(s.get("since"), int) else None,
                  **{k: s[k] for k in ("group", "seq", "step") if k in s},
                  **({"file": st.files.get(s["fhash"], s["fhash"])} if "fhash" in s else {})}
                 for s in spans],
        "last_event_ts": p.get("last_ts") or None,
        "file": None, "line": None, "function": None, "call": None, "thread": None,
    }
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
    if inner is not None and inner.get("span_cat") not in ("pipeline", "compute", "dataloader"):
        out["call"] = inner.get("value") + (f" {out['open'][-1]['file']}" if "fhash" in inner else "")
    return out


def detect(procs: Iterable[Dict[str, Any]], now_us: int, hang_after: float) -> Optional[Dict[str, Any]]:
    """The hang object (docs/hang.md), or None.  procs: one dict per traced
    process of the job with rank, pid, host, path, state, world_size, last_ts
    and `hang` (its ProcHang)."""
    by_rank: Dict[int, Dict[str, Any]] = {}
    world_size = 0
    for p in procs:
        r = p.get("rank")
        if not isinstance(r, int) or r < 0:
            continue
        if isinstance(p.get("world_size"), int):
            world_size = max(world_size, p["world_size"])
        old = by_rank.get(r)
        # a rank's DataLoader workers carry its rank: the process that is in
        # collectives (else the first one, the parent) stands for it
        if old is None or (_collective_wait(p["hang"]) and not _collective_wait(old["hang"])) or \
                (not _collective_wait(old["hang"]) and (p.get("pid") or 0) < (old.get("pid") or 0)):
            by_rank[r] = p
    if not by_rank:
        return None
    waits: Dict[Tuple[str, int, str], List[Tuple[int, int]]] = {}
    for r, p in by_rank.items():
        if p.get("state") == "finished":
            continue
        w = _collective_wait(p["hang"])
        if w is not None:
            waits.setdefault((w["group"], w["seq"], w["value"]), []).append((r, w["since"]))
    if not waits:
        return None
    key, waiting = min(waits.items(), key=lambda kv: min(s for _, s in kv[1]))
    since = min(s for _, s in waiting)
    since_s = (now_us - since) / 1e6
    if since_s < hang_after:
        return None
    world = sorted(set(by_rank) | set(range(world_size)))
    members = _group_ranks(key[0], world)
    waiting_ranks = sorted(r for r, _ in waiting)
    stuck_ranks = [r for r in members if r not in waiting_ranks]
    if not stuck_ranks:
        return None
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
        stuck.append(info)
    hang = {
        "stuck_ranks": stuck_ranks, "waiting_ranks": waiting_ranks,
        "collective": key[2], "group": key[0], "seq": key[1],
        "since_s": round(since_s, 1), "since_ts": since, "hang_after_s": hang_after,
        "stuck": stuck,
    }
    hang["message"] = message(hang)
    return hang


def _ranks_text(ranks: List[int]) -> str:
    shown = ", ".join(str(r) for r in ranks[:MAX_LISTED])
    more = len(ranks) - MAX_LISTED
    return shown + (f" and {more} more" if more > 0 else "")


def _stuck_text(s: Dict[str, Any]) -> str:
    where = ""
    if s.get("file"):
        where = f" in {os.path.basename(s['file'])}:{s['line']}"
        if s.get("call"):
            where += f" ({s['call']})"
        elif s.get("function"):
            where += f" ({s['function']})"
    elif s.get("call"):
        where = f" in {s['call']}"
    elif s.get("state") == "no trace":
        where = " (no trace file)"
    ic = s.get("in_collective")
    if ic:
        where += f" inside {ic['name']} #{ic['seq']} ({ic['group']})"
    for o in reversed(s.get("open", [])):
        if o.get("name") == "iteration" and "step" in o:
            where += f" during iteration {o['step']}"
            break
    else:
        inner = [o for o in s.get("open", []) if o.get("cat") in ("pipeline", "compute", "dataloader")]
        if inner:
            where += f" during {inner[-1]['name']}"
    return where


def message(h: Dict[str, Any]) -> str:
    """The one line: `hang: rank 2 stopped in hang_job.py:22 (time.sleep) during
    iteration 12; ranks 0, 1, 3 waited 41.2 s in all_reduce #12 (world)`."""
    stuck = h["stuck"]
    if len(stuck) == 1:
        head = f"rank {stuck[0]['rank']} stopped{_stuck_text(stuck[0])}"
    else:
        parts = [f"rank {s['rank']}{_stuck_text(s)}" for s in stuck[:MAX_LISTED]]
        more = len(stuck) - MAX_LISTED
        head = f"ranks {_ranks_text(h['stuck_ranks'])} stopped: " + "; ".join(parts) + \
            (f"; and {more} more" if more > 0 else "")
    w = h["waiting_ranks"]
    who = f"rank {w[0]}" if len(w) == 1 else f"ranks {_ranks_text(w)}"
    return (f"hang: {head}; {who} waited {h['since_s']:.1f} s in "
            f"{h['collective']} #{h['seq']} ({h['group']})")


# ---- live: dftracer top ------------------------------------------------------------

def from_follower(fol: Any, now_s: float, hang_after: float) -> Optional[Dict[str, Any]]:
    """The hang among the files `dftracer top` follows."""
    procs = []
    for path, f in fol.files.items():
        p = f.proc
        st = p.__dict__.get("hang_state") or ProcHang()
        procs.append({"rank": p.rank, "pid": p.pid, "host": p.host, "path": path,
                      "state": fol.state(f, now_s), "world_size": p.world_size,
                      "last_ts": p.head, "hang": st})
    return detect(procs, int(now_s * 1e6), hang_after)


# ---- after the job: summary --ranks ----------------------------------------------

_META = b'"cat":"dftracer"'


def scan(path: str, limit: int = 0) -> Dict[str, Any]:
    """Reads one trace file for what the rule needs: its tracer metadata
    (rank, host, open spans, stacks, end).  Only lines of category dftracer are
    parsed; a torn last member ends the scan; limit > 0: only that many bytes
    of the file are read."""
    st = ProcHang()
    out: Dict[str, Any] = {"path": path, "rank": None, "rank_source": "", "world_size": None,
                           "host": None, "pid": None, "state": "exited", "last_ts": 0, "hang": st}

    def lines(text: bytes) -> None:
        for line in text.split(b"\n"):
            if _META not in line:
                continue
            try:
                ev = json.loads(line.strip(b" \t\r,"))
            except ValueError:
                continue
            if not isinstance(ev, dict):
                continue
            name, args = ev.get("name"), ev.get("args") if isinstance(ev.get("args"), dict) else {}
            if out["pid"] is None and isinstance(ev.get("pid"), int):
                out["pid"] = ev["pid"]
            if name == "end":
                out["state"] = "finished"
            elif name == "HH" and isinstance(args.get("name"), str):
                out["host"] = args["name"]
            elif name == "process_name" and isinstance(args.get("name"), str):
                r = rank_rule.rank_of_process_name(args["name"])
                if r is not None and not out["rank_source"]:
                    out["rank"] = r
            elif name == "rank" and rank_rule.rank_of_value(args.get("value")) is not None:
                dist = args.get("source") == "torch.distributed"
                if out["rank_source"] != "torch.distributed" and (dist or not out["rank_source"]):
                    out["rank"] = rank_rule.rank_of_value(args.get("value"))
                    out["rank_source"] = "torch.distributed" if dist else "rank"
                ws = rank_rule.count_of_value(args.get("world_size"), 1)
                if ws is not None:
                    out["world_size"] = ws
            elif isinstance(name, str):
                st.observe(name, args, ev.get("tid"))
            if isinstance(ev.get("ts"), int):
                out["last_ts"] = max(out["last_ts"], ev["ts"] + (ev.get("dur") or 0))

    try:
        with open(path, "rb") as fh:
            if path.endswith(".gz"):
                d = zlib.decompressobj(31)
                carry = b""
                left = limit if limit > 0 else -1
                while left != 0:
                    data = fh.read(1 << 20 if left < 0 else min(left, 1 << 20))
                    if not data:
                        break
                    left = left - len(data) if left > 0 else left
                    while data:
                        try:
                            text = d.decompress(data)
                        except zlib.error:
                            data = b""
                            break
                        cut = (carry + text).rfind(b"\n") + 1
                        buf = carry + text
                        lines(buf[:cut])
                        carry = buf[cut:]
                        if d.eof:
                            data = d.unused_data
                            d = zlib.decompressobj(31)
                        else:
                            data = b""
                lines(carry)
            else:
                lines(fh.read(limit if limit > 0 else -1))
    except OSError:
        pass
    out["last_ts"] = max(out["last_ts"], st.last_at)
    return out


def post_mortem(paths: List[str], hang_after: float = 0.0) -> Optional[Dict[str, Any]]:
    """The hang the files of a finished (or killed) job show, now being the
    newest time any of them was seen alive.  hang_after defaults to 0: a job
    that ended with ranks inside a collective that others never reached hung."""
    procs = [scan(p) for p in paths]
    now = max((p["last_ts"] for p in procs), default=0)
    return detect(procs, now, hang_after)


# ---- marks: dftracer view ----------------------------------------------------------

MARK_ID = (1 << 53) - 1  # an id no tracer writes (ids count up from 1)


def mark_file(path: str, h: Dict[str, Any]) -> None:
    """Appends to a trace file (.pfw.gz: one gzip member; .pfw: one line) a
    global instant event `HANG` at the moment the first rank began to wait,
    which Perfetto draws across every track, with the message and the
    ranks in its args."""
    ev = {"id": MARK_ID, "name": "HANG", "cat": "hang", "pid": 0, "tid": 0,
          "ts": h["since_ts"], "ph": "i", "s": "g",
          "args": {"message": h["message"], "stuck_ranks": h["stuck_ranks"],
                   "waiting_ranks": h["waiting_ranks"], "collective": h["collective"],
                   "group": h["group"], "seq": h["seq"], "since_s": h["since_s"]}}
    import gzip

    try:  # a stuck rank's pid (a killed process has no `end` the mark would follow)
        with (gzip.open if path.endswith(".gz") else open)(path, "rb") as fh:
            head = fh.read(1 << 16)
        pids = [s["pid"] for s in h["stuck"] if s.get("pid")]
        pids = [p for p in pids if b'"pid":%d,' % p in head] or \
            [int(m) for m in re.findall(rb'"pid":(\d+)', head)[:1]]
        if pids:
            ev["pid"] = ev["tid"] = pids[0]
    except (OSError, EOFError, zlib.error):
        pass
    line = (line_keys.dumps(ev) + "\n").encode("utf-8")
    with open(path, "ab") as fh:
        fh.write(gzip.compress(line) if path.endswith(".gz") else line)


# ---- live: the stuck ranks' stacks, asked for once ---------------------------------

def ask_stacks(fol: Any, h: Optional[Dict[str, Any]]) -> None:
    """When top sees a hang, asks each stuck rank of this host that has no
    stacks taken since the hang began for them (`dftracer stacks`' request,
    once per process and hang): the next refresh then shows its file and
    line."""
    if not h:
        return
    from dftracer.tools import stacks

    asked = fol.__dict__.setdefault("hang_asked", set())
    for s in h["stuck"]:
        pid, path = s.get("pid"), s.get("path")
        if not pid or not path or s.get("file") or (pid, h["since_ts"]) in asked:
            continue
        asked.add((pid, h["since_ts"]))
        stacks.request(path, pid)
