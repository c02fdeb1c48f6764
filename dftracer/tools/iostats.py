"""I/O accounting (``dftracer summary --io``, the report's I/O section): per
file, per epoch, per rank with its DataLoader workers, and Darshan's
counters (docs/cli.md, "I/O").

The per-file work is ``_core._io_file`` (src/reader/iostats.c): per trace
file, per data file it touched, Darshan's POSIX_*/STDIO_* counters, the
bytes read (each byte once per open) and the byte ranges read per epoch;
and the file's epoch marks.  This module combines the trace files:

- epochs: a process's epochs start at its marks (--epoch-from's events,
  else the first ``dataloader/iter`` of each pass over a loader (its
  ``epoch`` arg: a validation loader's pass e runs in epoch e), else
  ``pipeline/iteration``'s ``epoch`` arg, else ai.pipeline's ``epoch``
  events); a process without marks (a DataLoader worker) takes its nearest
  ancestor's, so a worker's reads belong to the epoch of the loader that
  started it.  A trace file whose reads all fall in one epoch is read once;
  one whose reads span epochs (persistent workers, the main process) is read
  again with the epochs' bounds so that its reads are split by time.
- ranks: a process's rank is its own (the ``rank`` metadata or process
  name), else its nearest ancestor's; the processes under a rank's topmost
  process are that rank's workers, one entry per DataLoader worker id (the
  ``worker`` metadata event: without persistent_workers, worker 0 of every
  epoch is a new process) with the pids that were it.

Memory: per trace file, its data files' counters and byte ranges; never
events.  The same numbers whether the files were read locally or with --dask.
"""

from __future__ import annotations

import argparse
import json
import os
from array import array
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from dftracer import _core
from dftracer.tools import common, iofold, runner, work

MARK_KINDS = ("named", "iteration", "pipeline", "loader")  # src/reader/iostats.h, DFT_IO_MARK_*
BUCKETS = iofold.BUCKETS

Result = Dict[str, Any]
_ok = iofold.ok
_counters = iofold.counters
_add = iofold.add
_io_row = iofold.io_row
darshan_dict = iofold.darshan_dict


# ---- epochs ------------------------------------------------------------------

def _marks(r: Result, kind: int) -> List[Tuple[int, int]]:
    """(epoch, first ts) of one kind of marks, by ts."""
    return sorted(((e, ts) for k, e, ts in r.get("marks", ()) if k == kind),
                  key=lambda m: (m[1], m[0]))


def epoch_at(bounds: Sequence[Tuple[int, int]], ts: int) -> int:
    """The epoch in force at ts: the last bound at or before it, else the
    first (src/reader/iostats.c, slot_of, applies the same rule)."""
    epoch = bounds[0][0]
    for e, t in bounds:
        if t > ts:
            break
        epoch = e
    return epoch


def _parents(files: List[Result]) -> Dict[int, Optional[Result]]:
    by_proc = {(r["host"], r["pid"]): r for r in files}
    out: Dict[int, Optional[Result]] = {}
    for r in files:
        p = by_proc.get((r["host"], r.get("ppid", -1)))
        out[id(r)] = p if p is not r else None
    return out


def _ancestors(r: Result, parents: Dict[int, Optional[Result]]) -> Iterable[Result]:
    seen = 0
    while r is not None and seen < 32:
        yield r
        r = parents.get(id(r))  # type: ignore[assignment]
        seen += 1


def plan_epochs(files: List[Result], named: bool) -> Dict[int, List[Tuple[int, int]]]:
    """Per result (by id): the epoch bounds that apply to it ([] for none)."""
    # a loader's passes (`iter`), else iterations' epoch, else ai.pipeline's
    kinds = [MARK_KINDS.index(k) for k in (("named",) if named else
                                           ("loader", "iteration", "pipeline"))]
    kind = next((k for k in kinds if any(_marks(r, k) for r in files)), None)
    parents = _parents(files)
    plan: Dict[int, List[Tuple[int, int]]] = {}
    for r in files:
        bounds: List[Tuple[int, int]] = []
        if kind is not None:
            for a in _ancestors(r, parents):
                bounds = _marks(a, kind)
                if bounds:
                    break
        plan[id(r)] = bounds
    return plan


def _bounds_bytes(bounds: Sequence[Tuple[int, int]]) -> bytes:
    return array("q", [v for pair in bounds for v in pair]).tobytes()


def collect(args: argparse.Namespace, label: str = "io") -> Tuple[List[Result], int]:
    """The per-file results of the I/O pass over args.paths, each read
    epoch by epoch where its reads span epochs; bad files reported as
    summary's `collect` reports them."""
    paths, status = common.expand_paths(args)
    if not paths:
        return [], common.EXIT_BAD_INPUT
    results, st = read(paths, args, label)
    return results, max(status, st)


def read(paths: List[str], args: argparse.Namespace, label: str = "io") -> Tuple[List[Result], int]:
    """The I/O pass over paths (collect's work, for the report too): the
    results, a `Reads` list whose `fold` holds their data files' counters
    summed per path (each result's "files" become (row, slots) pairs as it
    arrives, so no trace's per-file counters are kept)."""
    status = 0
    epoch_from = getattr(args, "epoch_from", None)
    if args.dask:  # a dask worker has a cwd of its own: relative paths name other files there
        paths = [os.path.abspath(p) for p in paths]
    fold = iofold.Fold()
    results = Reads(runner.run(work.io_file, [(p, None) for p in paths], jobs=args.jobs,
                               dask=args.dask, label=label, progress=args.progress,
                               extra=(epoch_from,), on_result=lambda _i, r: fold.add(r)))
    results.fold = fold
    status = max(status, common.check_results(results))
    files = [r for r in results if _ok(r)]
    plan = plan_epochs(files, bool(epoch_from))
    if epoch_from and not any(_marks(r, 0) for r in files):
        common.err(f"warning: --epoch-from {epoch_from}: no such events; no epochs")
    redo = [i for i, r in enumerate(results) if _ok(r) and r["read_ts"] and plan[id(r)]
            and epoch_at(plan[id(r)], r["read_ts"][0]) != epoch_at(plan[id(r)], r["read_ts"][1])]
    if redo:
        items = [(results[i]["path"], _bounds_bytes(plan[id(results[i])])) for i in redo]
        first = {}
        for i in redo:  # the first pass's per-file data is not kept while the second runs
            r = results[i]
            first[i] = (r, r.pop("files"), plan.pop(id(r)))

        def again_add(k: int, r: Result) -> None:
            # the counters were folded from the first pass: only a data file
            # it did not see (a trace still being written) adds its own
            fold.add(r, seen={iofold.row_of(f) for f in first[redo[k]][1]})

        again = runner.run(work.io_file, items, jobs=args.jobs, dask=args.dask,
                           label=label + " (by epoch)", progress=args.progress,
                           extra=(epoch_from,), on_result=again_add)
        for i, r in zip(redo, again):
            old, files, bounds = first.pop(i)
            if _ok(r):
                r["split"] = True
                _core._io_add(r["io_total"], old["io_total"])
                results[i] = r
            else:
                old["files"] = files
                r = old
            plan[id(r)] = bounds
    for r in results:
        if not _ok(r):
            continue
        bounds = plan.get(id(r)) or []
        r["epochs_from"] = bounds
        if not r.get("split") and bounds and r["read_ts"]:  # its reads' one epoch
            r["epoch"] = epoch_at(bounds, r["read_ts"][0])
    return results, status


class Reads(list):  # type: ignore[type-arg]
    """read()'s results, with the Fold of their counters."""

    fold: iofold.Fold


# ---- combining -----------------------------------------------------------------

def _merge(ivs: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    ivs.sort()
    out: List[Tuple[int, int]] = []
    for s, e in ivs:
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def _length(ivs: List[Tuple[int, int]]) -> int:
    return sum(e - s for s, e in ivs)


def _overlap(a: List[Tuple[int, int]], b: List[Tuple[int, int]]) -> int:
    i = j = total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _pairs(ivs: Sequence[int]) -> List[Tuple[int, int]]:
    return list(zip(ivs[0::2], ivs[1::2]))


def analyze(results: Iterable[Result]) -> Dict[str, Any]:
    """The dict `summary --io --json` prints (docs/cli.md, "I/O"); its
    "files" is an iofold.FileRows (a sequence whose rows are made as they
    are read)."""
    fold = getattr(results, "fold", None)
    files = [r for r in results if _ok(r)]
    if fold is None:  # the results of _io_file as they came
        fold = iofold.Fold()
        for r in files:
            fold.add(r)
    epochs: Dict[int, Dict[str, Any]] = {}
    job = list(iofold.ZERO)
    per_proc: Dict[int, Any] = {}
    parents = _parents(files)
    rank_of: Dict[int, Optional[int]] = {}
    for r in files:
        # the nearest ancestor's own_rank: the rank rule as the C pass applied it
        rank_of[id(r)] = next((k for k in (a.get("own_rank", -1) for a in _ancestors(r, parents))
                               if k >= 0), None)
    procs: Dict[Tuple[str, int], int] = {}
    for r in files:
        procs.setdefault((r["host"], r["pid"]), len(procs))
    known = [k for k in rank_of.values() if k is not None]
    low = min(known, default=0)
    span = max(known, default=0) - low + 1
    by_proc, by_rank = set(), set()  # (row, process) and (row, rank) pairs as ints
    for r in files:
        per_proc[id(r)] = r["io_total"]
        _add(job, r["io_total"])
        proc, rank = procs[(r["host"], r["pid"])], rank_of[id(r)]
        for packed in r["files"]:
            row, slots = iofold.unpack_slots(packed, r.get("epoch"))
            by_proc.add(row * len(procs) + proc)
            if rank is not None:
                by_rank.add(row * span + rank - low)
            for epoch, nbytes, unplaced, ivs in slots:
                if epoch is None:
                    continue
                e = epochs.setdefault(epoch, {"bytes": 0, "unplaced": 0, "paths": {},
                                              "loaders": {}})
                e["bytes"] += nbytes
                key = _loader_key(r)
                e["loaders"][key] = e["loaders"].get(key, 0) + nbytes
                e["unplaced"] += unplaced
                have = e["paths"].get(row)
                if have is None:
                    e["paths"][row] = ivs
                else:
                    have.extend(ivs)
    by_epoch = []
    before: Dict[int, Any] = {}  # per row, the ranges earlier epochs read (flat int64s)
    for epoch in sorted(epochs):
        e = epochs.pop(epoch)
        unique = reread = 0
        for row, ivs in e["paths"].items():
            merged = _merge(_pairs(ivs))
            unique += _length(merged)
            prev = before.get(row)
            if prev:
                prev = _pairs(prev)
                reread += _overlap(merged, prev)
                merged = _merge(prev + merged)
            before[row] = array("q", (v for iv in merged for v in iv))
        by_epoch.append({"epoch": epoch, "bytes_read": e["bytes"],
                         "unique_bytes": unique + e["unplaced"], "reread_bytes": reread,
                         "files": len(e["paths"]), "unplaced_bytes": e["unplaced"],
                         "by_loader": [{"loader": k[2], "bytes_read": v} for k, v in
                                       sorted(e["loaders"].items())]})
    before.clear()
    out_files = iofold.file_rows(fold, by_proc, max(1, len(procs)), by_rank, low, span, job)
    return {
        "files": out_files,
        "by_epoch": by_epoch,
        "by_rank": _by_rank(files, parents, rank_of, per_proc),
        "darshan": darshan_dict(job),
        "totals": dict(_io_row(job), files=len(out_files), processes=len(files)),
    }


def _loader_key(r: Result) -> Tuple[int, int, str]:
    """Whose reads a process's are, for by_epoch's by_loader, as (order,
    number, label): any process but a DataLoader worker is "main" (a rank
    reading for itself, a loader without workers), first; a worker's reads
    are its loader's, by the number its parent gave the loader and its
    dataset's class ("loader 1 (ImageFolder)"), by number; a worker that was
    not forked cannot know the number ("loader ?"), last."""
    if r.get("worker", -1) < 0:
        return (0, 0, "main")
    n, ds = r.get("loader", -1), r.get("dataset") or ""
    name = f"loader {n}" if n >= 0 else "loader ?"
    label = f"{name} ({ds})" if ds else name
    return (1, n, label) if n >= 0 else (2, 0, label)


def _by_rank(files: List[Result], parents: Dict[int, Optional[Result]],
             rank_of: Dict[int, Optional[int]], per_proc: Dict[int, List[int]]) -> List[Dict[str, Any]]:
    """One row per rank (or per process tree without a rank) with its workers:
    the processes under the rank's topmost process (a forked worker writes
    its parent's rank too), one entry per DataLoader worker."""
    roots: Dict[Any, Result] = {}
    members: Dict[Any, List[Result]] = {}
    for r in files:
        k = rank_of[id(r)]
        top = r
        for a in _ancestors(r, parents):
            if k is not None and rank_of[id(a)] != k:
                break
            top = a
        key: Any = k if k is not None else ("tree", top["host"], top["pid"])
        members.setdefault(key, []).append(r)
        if top is r and (key not in roots or k is None):
            roots[key] = r
    rows = []
    for key, group in members.items():
        main = roots.get(key) or group[0]
        total = list(iofold.ZERO)
        for r in group:
            _add(total, per_proc[id(r)])
        if not any(total[iofold.IDX[n]] for n in ("bytes_read", "bytes_written", "meta_ops")):
            continue
        row = {"rank": key if isinstance(key, int) else None, "host": main["host"],
               "pid": main["pid"], "process_name": main.get("process_name", "")}
        row.update(_io_row(total))
        row["own"] = _io_row(per_proc[id(main)])
        row["workers"] = _workers([w for w in group if w is not main], per_proc)
        rows.append(row)
    rows.sort(key=lambda x: (x["rank"] is None, x["rank"] or 0, x["host"], x["pid"]))
    return rows


def _workers(procs: List[Result], per_proc: Dict[int, List[int]]) -> List[Dict[str, Any]]:
    """One entry per DataLoader worker: the processes that were worker N of
    the loaders one process started (a `worker` metadata event with id N,
    the same parent), over all epochs; a process without a worker id is an
    entry of its own."""
    groups: Dict[Any, List[Result]] = {}
    for w in sorted(procs, key=lambda w: (w["host"], w["pid"])):
        wid = w.get("worker", -1)
        key = (w["host"], w.get("ppid", -1), wid) if wid >= 0 else (w["host"], w["pid"])
        groups.setdefault(key, []).append(w)
    out = []
    for group in groups.values():
        first = group[0]
        wid = first.get("worker", -1)
        c = list(iofold.ZERO)
        for w in group:
            _add(c, per_proc[id(w)])
        entry: Dict[str, Any] = {
            "worker": wid if wid >= 0 else None,
            "num_workers": max((w.get("num_workers", -1) for w in group), default=-1),
            "host": first["host"], "pid": first["pid"], "pids": [w["pid"] for w in group]}
        if entry["num_workers"] < 0:
            entry["num_workers"] = None
        entry.update(_io_row(c))
        out.append(entry)
    out.sort(key=lambda e: (e["worker"] is None, e["worker"] or 0, e["host"], e["pid"]))
    return out


def worker_label(w: Dict[str, Any]) -> str:
    """`worker N (pids a, b)` or, without a worker id, `host:pid`."""
    if w.get("worker") is None:
        return f"{w['host']}:{w['pid']}"
    pids = ", ".join(str(p) for p in w["pids"])
    return f"worker {w['worker']} ({w['host']}: {'pid' if len(w['pids']) == 1 else 'pids'} {pids})"


# ---- output ------------------------------------------------------------------

def write_json(a: Dict[str, Any], out: Any) -> None:
    """The JSON of `summary --io --json`: one list entry a line, through
    json's C encoder (indent= would take the pure-Python one: minutes for a
    few hundred thousand files)."""
    # each entry written as it is encoded: the text of every file at once
    # (a few KiB each) was as large as the rows themselves
    out.write("{")
    for n, (key, value) in enumerate(a.items()):
        out.write(("\n" if n == 0 else ",\n") + f" {json.dumps(key)}: ")
        if isinstance(value, iofold.FileRows) and not len(value):
            out.write("[]")  # no data file: the rows are no JSON value themselves
        elif isinstance(value, (list, iofold.FileRows)) and len(value):
            out.write("[")
            for i, v in enumerate(value):
                out.write(("\n  " if i == 0 else ",\n  ") + json.dumps(v))
            out.write("\n ]")
        else:
            out.write(json.dumps(value))
    out.write("\n}\n")


def _files_table(rows: List[Dict[str, Any]], title: str, total: int) -> str:
    more = f" (top {len(rows)} of {total})" if len(rows) < total else ""
    body = [[common.printable(f["path"]), f"{f['opens']:,}", f"{f['reads']:,}",
             common.fmt_bytes(f["bytes_read"]), f"{f['writes']:,}",
             common.fmt_bytes(f["bytes_written"]), common.fmt_us(f["read_time_us"]),
             common.fmt_us(f["write_time_us"]), common.fmt_us(f["meta_time_us"]),
             f"{f['seq_reads']:,}/{f['consec_reads']:,}", str(f["processes"])] for f in rows]
    return f"\n{title}{more}\n" + common.table(
        ["path", "opens", "reads", "read", "writes", "written", "read time", "write time",
         "meta time", "seq/consec", "procs"], body, range(1, 11))


def render(a: Dict[str, Any], top: int) -> str:
    t = a["totals"]
    parts = [f"I/O: {t['files']:,} files, {t['processes']} processes, {t['reads']:,} reads "
             f"({common.fmt_bytes(t['bytes_read'])}), {t['writes']:,} writes "
             f"({common.fmt_bytes(t['bytes_written'])}), {t['meta_ops']:,} metadata calls; "
             f"time in reads {common.fmt_us(t['read_time_us'])}, writes "
             f"{common.fmt_us(t['write_time_us'])}, metadata {common.fmt_us(t['meta_time_us'])}"]
    files = a["files"]
    n = len(files) if top <= 0 else top
    parts.append(_files_table(files[:n], "Top files by bytes", len(files)))
    parts.append(_files_table(files.by_time(n), "Top files by time", len(files)))
    hist = files.read_sizes()
    parts.append("\nRead sizes (calls): " + ", ".join(f"{b} {v:,}" for b, v in hist.items() if v)
                 if any(hist.values()) else "\nRead sizes: no reads")
    if a["by_epoch"]:
        body = []
        for e in a["by_epoch"]:
            body.append([str(e["epoch"]), common.fmt_bytes(e["bytes_read"]),
                         common.fmt_bytes(e["unique_bytes"]),
                         common.fmt_bytes(e["reread_bytes"]), f"{e['files']:,}"])
            loaders = e.get("by_loader", [])
            if len(loaders) > 1:  # indented: whose reads they were
                body += [[f"  {x['loader']}", common.fmt_bytes(x["bytes_read"]), "", "", ""]
                         for x in loaders]
        parts.append("\nBy epoch (re-read: bytes an earlier epoch read too: cacheable; "
                     "indented: by loader)\n" +
                     common.table(["epoch", "read", "unique", "re-read", "files"], body,
                                  range(1, 5)))
    else:
        parts.append("\nBy epoch: no epochs found (no iteration/epoch events; "
                     "--epoch-from NAME names others)")
    body = []
    for r in a["by_rank"]:
        label = str(r["rank"]) if r["rank"] is not None else "-"
        body.append([label, f"{r['host']}:{r['pid']}", "rank" if r["rank"] is not None
                     else "process", f"{r['reads']:,}", common.fmt_bytes(r["bytes_read"]),
                     common.fmt_us(r["read_time_us"]), common.fmt_bytes(r["bytes_written"])])
        for w in r["workers"]:
            body.append(["", f"  {worker_label(w)}", "worker", f"{w['reads']:,}",
                         common.fmt_bytes(w["bytes_read"]), common.fmt_us(w["read_time_us"]),
                         common.fmt_bytes(w["bytes_written"])])
    if body:
        parts.append("\nBy rank, with its workers (rows: the rank and everything it started; "
                     "indented: each worker)\n" + common.table(
                         ["rank", "process", "", "reads", "read", "read time", "written"],
                         body, [3, 4, 5, 6]))
    d = a["darshan"]
    shown = [f"{k}={v:.6f}" if isinstance(v, float) else f"{k}={v:,}" for k, v in d.items() if v]
    parts.append("\nDarshan counters (whole job)\n  " + "\n  ".join(shown))
    return "\n".join(parts)


def html_section(a: Dict[str, Any], top: int) -> List[Tuple[str, List[str], List[List[str]]]]:
    """The report's I/O section as (title, headers, rows) tables (the numbers
    of `summary --io`)."""
    t = top if top > 0 else len(a["files"])
    out = [("I/O: top files by bytes",
            ["path", "opens", "reads", "read", "writes", "written", "read time", "meta time"],
            [[f["path"], f"{f['opens']:,}", f"{f['reads']:,}", common.fmt_bytes(f["bytes_read"]),
              f"{f['writes']:,}", common.fmt_bytes(f["bytes_written"]),
              common.fmt_us(f["read_time_us"]), common.fmt_us(f["meta_time_us"])]
             for f in a["files"][:t]])]
    if a["by_epoch"]:
        rows = []
        for e in a["by_epoch"]:
            rows.append([str(e["epoch"]), common.fmt_bytes(e["bytes_read"]),
                         common.fmt_bytes(e["unique_bytes"]), common.fmt_bytes(e["reread_bytes"])])
            loaders = e.get("by_loader", [])
            if len(loaders) > 1:  # whose reads they were, as `summary --io` shows them
                rows += [[f"  {x['loader']}", common.fmt_bytes(x["bytes_read"]), "", ""]
                         for x in loaders]
        out.append(("I/O by epoch", ["epoch", "read", "unique", "re-read"],
                    rows))
    rows = []
    for r in a["by_rank"]:
        rows.append([str(r["rank"]) if r["rank"] is not None else "-", f"{r['host']}:{r['pid']}",
                     f"{r['reads']:,}", common.fmt_bytes(r["bytes_read"]),
                     common.fmt_us(r["read_time_us"])])
        rows += [["", worker_label(w) if w.get("worker") is not None
                  else f"worker {w['host']}:{w['pid']}", f"{w['reads']:,}",
                  common.fmt_bytes(w["bytes_read"]), common.fmt_us(w["read_time_us"])]
                 for w in r["workers"]]
    out.append(("I/O by rank, with its workers", ["rank", "process", "reads", "read",
                                                  "read time"], rows))
    return out
