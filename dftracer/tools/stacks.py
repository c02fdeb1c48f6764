"""dftracer stacks: the Python stacks of every thread of the live traced
processes whose traces are in DIR, on this host (docs/hang.md).

No signal is sent.  Each process is asked by a request file beside its trace,
"<...>-stacks.req" for "<...>-app.pfw[.gz]" (trace_name.request_path), made
anew for each request: the process's flusher thread looks at it at each wake
(every half DFTRACER_FLUSH_INTERVAL), reads the stacks without the GIL and
writes them into the process's own trace as `stack` events
(docs/trace-format.md, "Stacks").  This command reads them back from the new
end of each file and prints them.  Only processes that are alive and hold
their trace file open are waited for: nothing else can answer."""

from __future__ import annotations

import argparse
import contextlib
import json
import linecache
import os
import socket
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from dftracer.tools import common, hang, liveness, paths as _paths, trace_name
from dftracer.tools.line_keys import unescape

EXAMPLE = """example:
  dftracer stacks ./runs                  # every traced process of this host in ./runs
  dftracer stacks ./runs --json > stacks.json
  srun --overlap --ntasks-per-node=1 dftracer stacks ./runs   # every node of a Slurm job
"""


def add_parser(sub: Any) -> None:
    p = common.command(
        sub, "stacks", help="the Python stacks of every thread of the live traced processes here",
        description="Asks every live traced process of this host whose trace is under PATHS "
                    "for the Python stacks of all its threads (safe while a thread is blocked "
                    "in C: a collective, a read, a lock).  Each process writes them into its "
                    "own trace (`stack` events); they are printed per rank, innermost frame "
                    "last.",
        epilog=EXAMPLE, paths=False)
    p.add_argument("paths", nargs="+", metavar="PATHS",
                   help="trace files or directories (searched for .pfw/.pfw.gz)")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.add_argument("--timeout", type=float, default=5.0, metavar="S",
                   help="seconds to wait for the answers (default 5)")
    p.set_defaults(func=main)


def _on_this_host(name: trace_name.TraceName) -> bool:
    return any(name.on_host(h) for h in trace_name.hosts())


PID_MAX = liveness.PID_MAX  # a larger pid in a name is no process's


def _write_request(path: str, first_line: str = "stacks") -> Optional[str]:
    """Makes the request file of the trace at path anew (a new file renamed
    over the old one: the process sees it change however fine its
    filesystem's clock is).  first_line says what is asked: "stacks", or
    "capture [STEPS]" for a window (dftracer capture, docs/windows.md).
    None, or why it could not."""
    req = trace_name.request_path(path)
    if req is None:
        return "not a trace file's name"
    tmp = f"{req}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, f"{first_line}\nasked by pid {os.getpid()} at {time.time():.6f}\n"
                     .encode())
        finally:
            os.close(fd)
        os.replace(tmp, req)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return f"cannot write its request file {req}: {exc.strerror}"
    return None


def _holds(pid: int, path: str) -> bool:
    """Whether pid has path open (so the pid is the trace's writer, not a
    later process that got the same pid); True when that cannot be seen (a
    process of another user: asking it costs a file, nothing more)."""
    if not 0 < pid <= PID_MAX:
        return False
    want = os.path.realpath(path)
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except PermissionError:
        return os.path.exists(f"/proc/{pid}")
    except OSError:
        return False
    try:
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == want:
                    return True
            except OSError:
                continue
    except OSError:
        return False
    return False


def _ppid(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _events_from(path: str, offset: int) -> List[Dict[str, Any]]:
    """The `stack` events written after offset (a gzip member boundary when it
    was the file's size; a member torn or still being written ends the
    reading), as {tid, args}: the C reader's (_core._stack_events)."""
    from dftracer import _core

    try:
        evs = _core._stack_events(path, offset)
    except (OSError, MemoryError):
        return []
    for ev in evs:
        a = ev["args"]
        a["value"], a["frames"] = unescape(a["value"]), unescape(a["frames"])
    return evs


def _rank(path: str) -> Tuple[Optional[int], Optional[str]]:
    """(rank, host) of the trace: the ranks pass's identity (src/reader/identity.c,
    the rank rule), without its records."""
    from dftracer.tools import work

    r = work.sync_points(path)
    rank = r.get("own_rank", -1)
    return (rank if rank >= 0 else None), r.get("host") or None


def _frames(args: Dict[str, Any]) -> List[Dict[str, Any]]:
    st = hang.ProcHang()
    st.observe("stack", args, 0)
    return st.stacks[0]["frames"] if st.stacks else []


def ask(files: List[str], timeout: float) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """(answers, not asked): one dict per process asked, with its threads."""
    asked: List[Dict[str, Any]] = []
    skipped: List[Dict[str, Any]] = []
    for path in files:
        m = trace_name.parse(path)
        if not m or not _on_this_host(m):
            continue  # not a trace; another node's: its own `dftracer stacks` asks it
        pid = m.pid
        if not _holds(pid, path):
            continue  # ended, or the trace of an earlier process with the same pid
        rank, host = _rank(path)
        p = {"rank": rank, "pid": pid, "host": host or m.host, "path": path,
             "ppid": _ppid(pid), "threads": []}
        try:
            p["offset"] = os.path.getsize(path)
        except OSError as exc:
            skipped.append(dict(p, why=f"cannot read its trace: {exc.strerror}"))
            continue
        why = _write_request(path)
        if why:
            skipped.append(dict(p, why=why))
            continue
        asked.append(p)
    deadline = time.monotonic() + timeout
    waiting = list(asked)
    while waiting and time.monotonic() < deadline:
        time.sleep(0.1)
        for p in list(waiting):
            evs = _events_from(p["path"], p["offset"])
            if not evs:
                continue
            req = max(_int(e["args"].get("req")) for e in evs)
            mine = [e for e in evs if _int(e["args"].get("req")) == req]
            n = _int(mine[0]["args"].get("n", len(mine)))
            if len(mine) >= n:
                mine.sort(key=lambda e: _int(e["args"].get("k")))
                p["threads"] = [{"name": e["args"].get("value", ""), "tid": e.get("tid"),
                                 "frames": _frames(e["args"])} for e in mine]
                waiting.remove(p)
    for p in waiting:
        if not os.path.exists(f"/proc/{p['pid']}"):
            p["why"] = "ended before it answered"
        else:
            p["why"] = (f"no answer within {timeout:g} s (a process traced by an older "
                        f"dftracer, or whose tracer's flusher is not running: see docs/hang.md)")
    for p in asked:
        p.pop("offset", None)
    return asked, skipped


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def request(path: str, pid: int) -> bool:
    """Asks one process for its stacks without waiting for them: only a live
    process of this host that holds path open.  True when asked."""
    m = trace_name.parse(path)
    if not m or not _on_this_host(m) or m.pid != pid or not _holds(pid, path):
        return False
    return _write_request(path) is None


def _order(p: Dict[str, Any]) -> Tuple[Any, ...]:
    return (p["rank"] is None, p["rank"] if p["rank"] is not None else 0, p["pid"])


def main(args: argparse.Namespace) -> int:
    if not args.timeout > 0:
        common.err(f"--timeout must be > 0 (got {args.timeout:g})")
        return common.EXIT_BAD_INPUT
    files, errors = _paths.expand(args.paths)
    status = common.EXIT_OK
    for path, msg in errors:
        common.err(f"{path}: {msg}")
        status = common.EXIT_BAD_INPUT
    answers, skipped = ask(files, args.timeout)
    rank_of = {p["pid"]: p["rank"] for p in answers}
    for p in answers:  # a rank's DataLoader workers carry its rank
        if p["rank"] is not None and rank_of.get(p.get("ppid")) == p["rank"]:
            p["worker_of"] = p["ppid"]
    # the workers and the processes without a rank (a launcher) come after the ranks
    ranks = sorted((p for p in answers if p["rank"] is not None and not p.get("worker_of")),
                   key=_order)
    others = sorted((p for p in answers if p not in ranks), key=_order)
    if args.json:
        json.dump({"processes": ranks, "others": others, "not_asked": skipped}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        text = render(ranks, others, skipped)
        if text:  # nothing to show: only the line below
            print(text)
    if not answers and not skipped:
        common.err(f"no live traced process of this host ({socket.gethostname()}) writes to "
                   f"{' '.join(args.paths)}")
        return max(status, common.EXIT_BAD_INPUT)
    return status


def render(ranks: List[Dict[str, Any]], others: List[Dict[str, Any]],
           skipped: List[Dict[str, Any]]) -> str:
    out: List[str] = []
    for p in ranks + others:
        who = f"rank {p['rank']}" if p["rank"] is not None else "no rank"
        if p.get("worker_of"):
            who += f", worker of {p['worker_of']}"
        out.append(f"== {who}: pid {p['pid']} on {common.printable(p['host'] or '?')} "
                   f"({common.printable(p['path'])})")
        if p.get("why"):
            out.append(f"   {p['why']}")
        for t in p["threads"]:
            out.append(f"  Thread {common.printable(str(t['name']))} (tid {t['tid']}), "
                       f"innermost last:")
            if not t["frames"]:
                out.append("    <no Python frame>")
            for f in t["frames"]:
                out.append(f"    File \"{common.printable(f['file'])}\", line {f['line']}, "
                           f"in {common.printable(f['function'])}")
                src = linecache.getline(f["file"], f["line"]).strip()
                if src:
                    out.append(f"      {common.printable(src)}")
        out.append("")
    for p in skipped:
        out.append(f"== pid {p['pid']} ({common.printable(p['path'])}): {p['why']}")
    return "\n".join(out).rstrip("\n")


def ask_stacks(fol: Any, h: Optional[Dict[str, Any]]) -> None:
    """When top sees a hang, asks each stuck rank of this host that has no
    stacks taken since the hang began for them (`dftracer stacks`' request,
    once per process and hang): the next refresh then shows its file and
    line."""
    if not h:
        return
    asked = fol.__dict__.setdefault("hang_asked", set())
    whom = [s for s in h["stuck"] if s.get("state") not in ("dead", "stopped")]
    for s in h["stuck"]:
        b = s.get("batch_wait") or {}
        if b.get("worker"):  # the worker a rank waits for
            whom.append(b["worker"])
        else:  # none shows a sample: ask those not seen parked, to tell by their stacks
            whom += [w for w in b.get("workers", []) if w.get("parked") is not True]
    for s in whom:
        pid, path = s.get("pid"), s.get("path")
        if not pid or not path or s.get("file") or (pid, h["since_ts"]) in asked:
            continue
        asked.add((pid, h["since_ts"]))
        request(path, pid)
