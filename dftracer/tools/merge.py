"""dftracer merge / convert: many traces into one file for Perfetto or chrome://tracing."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import tempfile
import zlib
from typing import Any, Dict, List, Optional, Set, Tuple

from dftracer.tools import clock_align, common, line_keys, runner, work

MERGE_EXAMPLE = """example:
  dftracer merge ./traces -o run1.pfw.gz      # then open run1.pfw.gz in ui.perfetto.dev
"""
CONVERT_EXAMPLE = """example:
  dftracer convert ./traces --format chrome -o run1.json.gz
"""


def add_parsers(sub: Any) -> None:
    p = common.command(
        sub, "merge", help="merge traces into one .pfw.gz that Perfetto loads",
        description="Writes the events of all traces into one file in the trace format "
                    "(docs/trace-format.md): hashes resolved to strings (hhash -> host, "
                    "fhash -> file, ...), one process name per process with its host, pid "
                    "and rank, pids that collide across hosts renumbered, and the clocks of "
                    "different hosts aligned on the collectives their ranks share.",
        epilog=MERGE_EXAMPLE)
    p.add_argument("-o", "--output", required=True, metavar="OUT.pfw.gz",
                   help="output file (gzip unless the name ends in .pfw)")
    add_align_option(p)
    p.set_defaults(func=main, fmt="pfw")
    c = common.command(
        sub, "convert", help="convert traces into one Chrome trace JSON object",
        description="Writes one complete JSON object {traceEvents, distributedInfo, ...} for "
                    "chrome://tracing, Perfetto and Holistic Trace Analysis, with the same "
                    "resolution of hashes and process names as merge.",
        epilog=CONVERT_EXAMPLE)
    c.add_argument("--format", choices=["chrome"], default="chrome",
                   help="output format (chrome: the Trace Event Format JSON object)")
    c.add_argument("-o", "--output", required=True, metavar="OUT.json.gz",
                   help="output file (gzip unless the name ends in .json)")
    add_align_option(c)
    c.set_defaults(func=main, fmt="chrome")


def add_align_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-align", action="store_true",
                   help="keep each host's times as recorded (default: hosts are aligned on "
                        "the ends of the collectives their ranks took part in together)")


def _member(text: str, compress: bool) -> bytes:
    data = text.encode("utf-8")
    if not compress:
        return data
    comp = zlib.compressobj(1, zlib.DEFLATED, 31)
    return comp.compress(data) + comp.flush()


def assign_pids(infos: List[Dict[str, Any]]) -> List[Tuple[int, int]]:
    """(old, new) pid per file: a pid already taken by another host (or file)
    gets a fresh number, so every traced process stays its own in the viewer."""
    taken: Dict[int, Tuple[str, str]] = {}
    top = max([i["pid"] for i in infos if isinstance(i.get("pid"), int)] + [0])
    out = []
    for info in infos:
        pid = info.get("pid") if isinstance(info.get("pid"), int) else 0
        owner = (info.get("host", ""), info["path"])
        new = pid
        if pid in taken and taken[pid] != owner:
            top += 1
            new = top
        taken[new] = owner
        out.append((pid, new))
    return out


def process_label(info: Dict[str, Any], pid: int) -> str:
    """`<exec> [host H, pid P, rank R, worker W, child of pid Q]`: a DataLoader
    worker says which worker of which rank it is (never a rank of its own)."""
    name = info.get("process_name") or os.path.basename(info["path"])
    bits = [f"host {info.get('host') or '?'}", f"pid {info.get('pid')}"]
    if info.get("rank") is not None:
        bits.append(f"rank {info['rank']}")
    if info.get("worker") is not None:
        bits.append(f"worker {info['worker']}")
    if info.get("parent") is not None:
        bits.append(f"child of pid {info['parent']}")
    return f"{name} [{', '.join(bits)}]"


def sort_index(info: Dict[str, Any]) -> int:
    """Perfetto's process order: ranks by number, each followed by its
    workers, then the processes of no rank (a launcher)."""
    rank, worker = info.get("rank"), info.get("worker")
    base = (rank + 1) * 1000 if rank is not None else 10 ** 9
    return base + (worker + 1 if worker is not None else 0)


def identity(s: Dict[str, Any], procs: Set[Tuple[Any, Any]]) -> Dict[str, Any]:
    """Who wrote a file, from its ranks pass (src/reader/identity.c, read
    over the whole file): host, pid, process name, the rank by the rule
    (own_rank: the last valid `rank` event, else the process name's), a
    DataLoader worker's id and, for a process started by another input's
    process (procs: the inputs' (host, pid)), that parent.  None for what the
    file does not say."""
    def known(key: str) -> Any:
        v = s.get(key, -1)
        return v if isinstance(v, int) and v >= 0 else None

    ppid = known("ppid")
    return {"path": s["path"], "host": s.get("host", ""), "pid": known("pid"),
            "process_name": s.get("process_name", ""), "rank": known("own_rank"),
            "worker": known("worker"),
            "parent": ppid if ppid is not None and (s.get("host"), ppid) in procs else None}


def unusable(s: Dict[str, Any]) -> Optional[str]:
    """Why merge cannot take a file (missing, unreadable, not a trace, or
    corrupt before its first event), or None: a corrupt file's events up to
    the corruption are merged, and the rewrite names it."""
    st = s.get("status")
    if st in ("ok", "truncated"):
        if s.get("events", 0) == 0 and not s.get("bad_lines", 0):
            return "not a dftracer trace (no event line)"
        return common.not_a_trace(s)
    if st == "corrupt" and s.get("events", 0) > 0:
        return None
    return common.describe(s)


def main(args: argparse.Namespace) -> int:
    files, status = common.expand_paths(args)
    if not files:
        return common.EXIT_BAD_INPUT
    out_path = args.output
    plain = out_path.endswith(".pfw" if args.fmt == "pfw" else ".json")
    real_out = os.path.realpath(out_path)
    files = [f for f in files if os.path.realpath(f) != real_out]
    # One scan, then the rewrite: each file read twice.  The scan (the ranks
    # pass without its records) gives each file's identity and sync points.
    syncs = runner.run(work.sync_points, files, jobs=args.jobs, dask=args.dask,
                       label="scan", progress=args.progress)
    bad = [(s["path"], why) for s in syncs for why in [unusable(s)] if why]
    for path, why in bad:
        common.err(f"{path}: {why}")
    if bad:
        return common.EXIT_BAD_INPUT
    procs = {(s.get("host"), s.get("pid")) for s in syncs if s.get("status") in ("ok", "truncated")}
    infos = [identity(s, procs) for s in syncs]
    offsets: Dict[str, int] = {}
    if not getattr(args, "no_align", False):
        alignment = clock_align.align(syncs)
        offsets = clock_align.file_offsets(syncs, alignment)
        for line in clock_align.describe_alignment(alignment):
            common.err(line)
    pid_maps = assign_pids(infos)
    out_dir = os.path.dirname(os.path.abspath(out_path))
    parts_dir = tempfile.mkdtemp(prefix=".dftracer-merge-", dir=out_dir)
    try:
        parts = [os.path.join(parts_dir, f"{n:06d}.part") for n in range(len(files))]
        items = [(f, part, args.fmt, pid_map, (2 * len(files), k), offsets.get(f, 0))
                 for k, (f, part, pid_map) in enumerate(zip(files, parts, pid_maps))]
        results = runner.run(_rewrite, items, jobs=args.jobs, dask=args.dask,
                             label=args.fmt == "pfw" and "merge" or "convert",
                             progress=args.progress)
        status = max(status, common.report_file_status(results))
        common.report_bad_lines(results)
        names = []
        for info, (_old, new) in zip(infos, pid_maps):
            names.append({"id": len(names) + 1, "name": "process_name", "cat": "dftracer",
                          "pid": new, "tid": new, "ph": "M",
                          "args": {"name": process_label(info, new)}})
            names.append({"id": len(names) + 1, "name": "process_sort_index", "cat": "dftracer",
                          "pid": new, "tid": new, "ph": "M",
                          "args": {"name": "process_sort_index", "value": sort_index(info),
                                   "sort_index": sort_index(info)}})
        marks = getattr(args, "marks", None)  # view's HANG: before every process's events
        if marks:
            new_pid = {os.path.realpath(f): new for f, (_old, new) in zip(files, pid_maps)}
            names.extend(marks(lambda path: new_pid.get(os.path.realpath(path))))
        lines = [line_keys.dumps(e, ensure_ascii=False) for e in names]
        if args.fmt == "pfw":
            header = "[\n" + "".join(line + "\n" for line in lines)
            footer = ""
        else:
            nums = sorted({i["rank"] for i in infos if i.get("rank") is not None})
            dist = {"backend": "dftracer", "rank": nums[0] if len(nums) == 1 else 0,
                    "world_size": max(len(nums), 1), "ranks": nums,
                    "hosts": sorted({i.get("host", "") for i in infos})}
            header = '{"traceEvents":[\n' + ",\n".join(lines)
            footer = ('\n],"displayTimeUnit":"ms","distributedInfo":' +
                      json.dumps(dist, separators=(",", ":")) +
                      ',"otherData":{"generator":"dftracer convert","files":' +
                      str(len(files)) + "}}\n")
        tmp = out_path + ".tmp"
        with open(tmp, "wb") as out:
            out.write(_member(header, not plain))
            for part in parts:
                if not os.path.exists(part):
                    continue
                with open(part, "rb") as f:
                    if plain:
                        with gzip.open(f) as g:  # parts are gzip members
                            shutil.copyfileobj(g, out, 1 << 20)
                    else:
                        shutil.copyfileobj(f, out, 1 << 20)
            if footer:
                out.write(_member(footer, not plain))
        os.replace(tmp, out_path)
    finally:
        shutil.rmtree(parts_dir, ignore_errors=True)
    events = sum(r.get("events", 0) for r in results)
    common.err(f"wrote {out_path}: {events:,} events from {len(files)} files")
    return status


def _rewrite(item: Tuple[str, str, str, Tuple[int, int], Tuple[int, int], int]) -> Dict[str, Any]:
    path, part, fmt, pid_map, ids, ts_offset = item
    return work.rewrite_file(path, part, fmt, pid_map, ids, ts_offset)
