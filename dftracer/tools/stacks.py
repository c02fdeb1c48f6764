"""dftracer stacks: the Python stacks of every thread of the live traced
processes whose traces are in DIR, on this host (docs/hang.md).

Each process is asked with the tracer's request signal (SIGRTMAX-3): its
handler only wakes the tracer's flusher thread, which reads the stacks
without the GIL and writes them into the process's own trace as `stack`
events (docs/trace-format.md, "Stacks").  This command reads them back from
the new end of each file and prints them.  Only processes that are alive,
hold their trace file open and handle the signal are asked: a signal the
process does not handle would kill it."""

from __future__ import annotations

import argparse
import json
import linecache
import os
import socket
import sys
import time
import zlib
from typing import Any, Dict, List, Optional, Tuple

from dftracer.tools import common, hang, paths as _paths, trace_name

EXAMPLE = """example:
  dftracer stacks ./runs                  # every traced process of this host in ./runs
  dftracer stacks ./runs --json > stacks.json
  srun --overlap --ntasks-per-node=1 dftracer stacks ./runs   # every node of a Slurm job
"""

HEAD_BYTES = 4 << 20   # compressed bytes read from a file's start to find its rank


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


def _handles(pid: int, sig: int) -> bool:
    """Whether pid catches signal sig (/proc/PID/status SigCgt)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (OSError, ValueError):
        pass
    return False


def _holds(pid: int, path: str) -> bool:
    """Whether pid has path open (so the pid is the trace's writer, not a
    later process that got the same pid)."""
    want = os.path.realpath(path)
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
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
    was the file's size; a member torn or still being written is skipped)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return []
    text = b""
    if path.endswith(".gz"):
        while data:
            start = data.find(b"\x1f\x8b\x08")
            if start < 0:
                break
            d = zlib.decompressobj(31)
            try:
                text += d.decompress(data[start:])
            except zlib.error:
                data = data[start + 3:]
                continue
            if not d.eof:
                break
            data = d.unused_data
    else:
        text = data
    out = []
    for line in text.split(b"\n"):
        if b'"name":"stack"' not in line:
            continue
        try:
            ev = json.loads(line.strip(b" \t\r,"))
        except ValueError:
            continue
        if isinstance(ev, dict) and ev.get("name") == "stack" and isinstance(ev.get("args"), dict):
            out.append(ev)
    return out


def _rank(path: str) -> Tuple[Optional[int], Optional[str]]:
    """(rank, host) from the head of the trace (its header and rank events)."""
    info = hang.scan(path, limit=HEAD_BYTES)
    return info["rank"], info["host"]


def _frames(args: Dict[str, Any]) -> List[Dict[str, Any]]:
    st = hang.ProcHang()
    st.observe("stack", args, 0)
    return st.stacks[0]["frames"] if st.stacks else []


def ask(files: List[str], timeout: float) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """(answers, not asked): one dict per process asked, with its threads."""
    from dftracer import _core

    sig = int(_core._STACKS_SIGNAL)
    asked: List[Dict[str, Any]] = []
    skipped: List[Dict[str, Any]] = []
    for path in files:
        m = trace_name.parse(path)
        if not m:
            continue
        pid = m.pid
        why = None
        if not _on_this_host(m):
            continue  # another node's: its own `dftracer stacks` asks it
        if not os.path.exists(f"/proc/{pid}"):
            continue  # ended
        if not _holds(pid, path):
            continue  # the trace of an earlier process with the same pid
        if not _handles(pid, sig):
            why = "does not handle the request signal (SIGRTMAX-3): not asked"
        rank, host = _rank(path)
        p = {"rank": rank, "pid": pid, "host": host or m.host, "path": path,
             "ppid": _ppid(pid), "threads": []}
        if why:
            skipped.append(dict(p, why=why))
            continue
        try:
            p["offset"] = os.path.getsize(path)
            os.kill(pid, sig)
        except OSError as exc:
            skipped.append(dict(p, why=f"cannot signal it: {exc.strerror}"))
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
            req = max(e["args"].get("req", 0) for e in evs)
            mine = [e for e in evs if e["args"].get("req", 0) == req]
            n = mine[0]["args"].get("n", len(mine))
            if len(mine) >= n:
                mine.sort(key=lambda e: e["args"].get("k", 0))
                p["threads"] = [{"name": e["args"].get("value", ""), "tid": e.get("tid"),
                                 "frames": _frames(e["args"])} for e in mine]
                waiting.remove(p)
    for p in waiting:
        p["why"] = f"no answer within {timeout:g} s"
    for p in asked:
        p.pop("offset", None)
    return asked, skipped


def request(path: str, pid: int) -> bool:
    """Asks one process for its stacks without waiting for them: only a live
    process of this host that holds path open and handles the signal."""
    from dftracer import _core

    m = trace_name.parse(path)
    sig = int(_core._STACKS_SIGNAL)
    if not m or not _on_this_host(m) or m.pid != pid or \
            not _holds(pid, path) or not _handles(pid, sig):
        return False
    try:
        os.kill(pid, sig)
    except OSError:
        return False
    return True


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
        print(render(ranks, others, skipped))
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
