"""dftracer validate: check trace files against docs/trace-format.md."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, List, Optional, Set, Tuple

from dftracer.tools import common, liveness, runner, work
from dftracer.tools.trace_name import is_trace_name

EXAMPLE = """example:
  dftracer validate ./traces
  dftracer validate run1/trace-node17-4242-app.pfw.gz --json

A dftracer 2.x fork child (pydftracer's "-fork" files) uses hashes its
parent's file defined before the fork: give both files (or the folder), or
the child alone with its parent's file beside it; a child whose parent's file
is nowhere to be found gets NO PARENT, a warning.

exit status: 0 every file is valid (a truncated tail, an empty file, a
missing end event or a fork child's missing parent are warnings), 1 some file
breaks the format, 2 a file is missing, corrupt or not a trace."""


def add_parser(sub: Any) -> None:
    p = common.command(
        sub, "validate", help="check that traces decode and follow the trace format",
        description="Checks every file: every gzip member decodes, every line is JSON, ids "
                    "are unique, the metadata (HH, process_name, start, end, hash "
                    "definitions) is complete.  Says which format a file is: dftracer's, "
                    "dftracer merge's output, or dftracer 2.x's (pydftracer 2.0.6), each "
                    "checked against its own rules; every problem names the rule it "
                    "breaks.  A torn last member (a crashed process) is reported with the "
                    "number of readable events.",
        epilog=EXAMPLE)
    p.add_argument("--json", action="store_true", help="one JSON object per file on stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="print only files with problems")
    p.set_defaults(func=main)


# The formats validate tells apart (docs/trace-format.md, "Valid files").
FORMATS = {
    "dftracer": "dftracer trace",
    "dftracer-merged": "dftracer merge output",
    "dftracer-2.x": "dftracer 2.x trace (pydftracer 2.0.6 / dftracer 2.2.0)",
}


def describe_format(r: Dict[str, Any]) -> str:
    return FORMATS.get(r.get("format") or "", "")


# --- rule 4 across files: a dftracer 2.x fork child and its ancestors -------

# How far up a child's ancestors the walk goes (a fork of a fork of ...).
MAX_ANCESTORS = 64
FORK_SUFFIXES = ("-fork.pfw", "-fork.pfw.gz")


def is_fork_child_name(path: str) -> bool:
    """dftracer 2.x names a forked child's file "...-fork.pfw[.gz]"."""
    return path.endswith(FORK_SUFFIXES)


class _Ident:
    """Who wrote a dftracer 2.x file: its parent is the file of (host, ppid)
    that started last before it."""

    def __init__(self, path: str, r: Dict[str, Any]) -> None:
        self.path = path
        self.real = os.path.realpath(path)
        self.host: str = r.get("host") or ""
        self.pid: int = r.get("pid", -1)
        self.ppid: int = r.get("ppid", -1)
        self.start_ts: int = r.get("start_ts", -1)


class _Lineage:
    """The 2.x files known: the files given, and those found beside a child
    (read only up to their start event), by (host, pid)."""

    def __init__(self, results: List[Dict[str, Any]], args: argparse.Namespace) -> None:
        self.args = args
        self.by_proc: Dict[Tuple[str, int], List[_Ident]] = {}
        self.known: Set[str] = set()
        self.scanned: Set[str] = set()
        for r in results:
            self.known.add(os.path.realpath(r["path"]))
            if r.get("format") == "dftracer-2.x" and r.get("pid", -1) >= 0:
                self._add(_Ident(r["path"], r))

    def _add(self, who: _Ident) -> None:
        self.by_proc.setdefault((who.host, who.pid), []).append(who)

    def run(self, func: Any, items: List[Any], label: str) -> List[Dict[str, Any]]:
        return runner.run(func, items, jobs=self.args.jobs, dask=self.args.dask, label=label,
                          progress=self.args.progress)

    def scan_beside(self, children: List[_Ident]) -> None:
        """Reads the identity of the trace files in each child's folder that
        were not given."""
        folders = {os.path.dirname(c.real) for c in children} - self.scanned
        self.scanned |= folders
        found = []
        for d in sorted(folders):
            try:
                names = sorted(os.listdir(d))
            except OSError:
                continue
            for name in names:
                p = os.path.join(d, name)
                if is_trace_name(name) and p not in self.known and os.path.isfile(p):
                    self.known.add(p)
                    found.append(p)
        if not found:
            return
        for r in self.run(work.defined_hashes, [(p, ()) for p in found], "validate: beside"):
            if r.get("status") in ("ok", "truncated") and r.get("numeric_ph") and \
                    r.get("pid", -1) >= 0:
                self._add(_Ident(r["path"], r))

    def parent(self, child: _Ident) -> Optional[_Ident]:
        """The file of the process that started child: same host, its pid
        child's ppid, started before it (the latest such, when a pid was
        reused)."""
        best = None
        for c in self.by_proc.get((child.host, child.ppid), []):
            if c.real == child.real:
                continue
            if c.start_ts >= 0 and child.start_ts >= 0 and c.start_ts > child.start_ts:
                continue
            if best is None or c.start_ts > best.start_ts:
                best = c
        return best


def check_inherited_hashes(results: List[Dict[str, Any]], args: argparse.Namespace) -> None:
    """Rule 4 for every file: each hash it uses is defined in it or, for a
    dftracer 2.x file, in the file of an ancestor (its parent, theirs, ...)
    found among the files given or beside it (docs/trace-format.md, "Valid
    files").  Sets undefined, inherited and ancestors on each result, adds
    the rule 4 problem for a hash defined nowhere, and parent_missing when
    the walk stopped at a fork child whose parent's file is not there."""
    lineage = None
    walks = []  # [result, remaining hashes, the file whose parent is sought]
    for r in results:
        undefined = r.pop("undefined_hashes", None) or []
        r["undefined"] = len(undefined)
        r["inherited"] = 0
        r["ancestors"] = []
        if undefined and r.get("format") == "dftracer-2.x" and r.get("pid", -1) >= 0:
            if lineage is None:
                lineage = _Lineage(results, args)
            walks.append([r, set(undefined), _Ident(r["path"], r)])
        elif undefined:
            _undefined_problem(r, len(undefined))
    for _ in range(MAX_ANCESTORS):
        if not walks or lineage is None:
            break
        if any(lineage.parent(w[2]) is None for w in walks):
            lineage.scan_beside([w[2] for w in walks if lineage.parent(w[2]) is None])
        asked: Dict[str, Set[int]] = {}
        going = []
        for w in walks:
            r, remaining, cur = w
            parent = lineage.parent(cur)
            seen = {a["path"] for a in r["ancestors"]} | {r["path"]}
            if parent is None or parent.path in seen:
                _walk_ended(r, len(remaining), cur, parent is None)
                continue
            asked.setdefault(parent.path, set()).update(remaining)
            going.append((w, parent))
        paths = sorted(asked)
        found = dict(zip(paths, lineage.run(work.defined_hashes,
                                            [(p, sorted(asked[p])) for p in paths],
                                            "validate: parents")))
        walks = []
        for w, parent in going:
            r, remaining, _ = w
            got = remaining & set(found[parent.path].get("defined") or ())
            remaining -= got
            r["inherited"] += len(got)
            r["ancestors"].append({"path": parent.path, "pid": parent.pid, "hashes": len(got)})
            if remaining:
                walks.append([r, remaining, parent])
    for r, remaining, cur in walks:  # MAX_ANCESTORS deep and more to go
        _walk_ended(r, len(remaining), cur, False)


def _walk_ended(r: Dict[str, Any], left: int, last: _Ident, no_parent: bool) -> None:
    """left hashes of r are defined in no file of its line up to last: a
    warning when last is a fork child whose parent's file is not there (it
    may define them), else a broken rule 4."""
    if no_parent and is_fork_child_name(last.path):
        r["parent_missing"] = {"pid": last.ppid, "child": last.path, "hashes": left}
    else:
        _undefined_problem(r, left)


def _undefined_problem(r: Dict[str, Any], left: int) -> None:
    where = ", in it nor in its ancestors' files" if r.get("ancestors") else ""
    r.setdefault("problems", []).append(
        f"{left} hash values used but never defined{where} (rule 4: every hash defined once)")
    r["problem_count"] = r.get("problem_count", 0) + 1


def inherited_note(r: Dict[str, Any]) -> str:
    """"; 3 hashes defined by its parent's file P (pid 12)", or ""."""
    if not r.get("inherited"):
        return ""
    files = ", ".join(f"{a['path']} (pid {a['pid']})" for a in r["ancestors"] if a["hashes"])
    whose = "its parent's file" if len(r["ancestors"]) == 1 else "its ancestors' files"
    return f"; {r['inherited']} hashes defined by {whose} {files}"


def parent_missing_note(r: Dict[str, Any]) -> str:
    m = r["parent_missing"]
    whose = ("its parent" if m["child"] == r["path"]
             else f"the parent of {os.path.basename(m['child'])}")
    more = " more" if r.get("inherited") else ""
    return (f"{m['hashes']}{more} hashes it uses are defined nowhere here: a dftracer 2.x "
            f"fork child uses those its parent defined before the fork, and the file of pid "
            f"{m['pid']} ({whose}) is neither among the files given nor beside it; validate "
            "them together to check them")


def verdict(r: Dict[str, Any]) -> str:
    st = r.get("status")
    if st in ("missing", "error", "corrupt"):
        return st
    if r.get("lines", 0) > 0 and r.get("events", 0) == 0 and (
            not r.get("header") or r.get("bad_lines", 0) > 0):
        return "not-a-trace"
    if r.get("problem_count"):
        return "invalid"
    if r.get("events", 0) == 0 and st == "ok":
        return "empty"
    if st == "truncated":
        return "truncated"
    return "parent-missing" if r.get("parent_missing") else "ok"


def main(args: argparse.Namespace) -> int:
    files, status = common.expand_paths(args)
    if not files:
        return common.EXIT_BAD_INPUT
    results = runner.run(work.validate_file, files, jobs=args.jobs, dask=args.dask,
                         label="validate", progress=args.progress)
    check_inherited_hashes(results, args)
    for r in results:
        v = r["verdict"] = verdict(r)
        if v in ("missing", "error", "corrupt", "not-a-trace"):
            status = common.EXIT_BAD_INPUT
        elif v == "invalid":
            status = max(status, common.EXIT_PROBLEMS)
        if args.json:
            json.dump(r, sys.stdout)
            sys.stdout.write("\n")
            continue
        path = r["path"]
        fmt = describe_format(r)
        if v == "ok":
            if not args.quiet:
                end = "" if r["finalized"] else " (no end event: the process did not finalize)"
                if liveness.end_signal(r):  # whole all the same: its end then the signal
                    end = f" (then ended by {liveness.signal_name(r['end_signal'])})"
                common.say(f"OK         {path}: {fmt}, {r['events']:,} events, {r['members']} gzip "
                      f"members{end}{inherited_note(r)}")
        elif v == "parent-missing":
            common.say(f"NO PARENT  {path}: {fmt}, {r['events']:,} events{inherited_note(r)}; "
                       + parent_missing_note(r))
        elif v == "empty":
            common.say(f"EMPTY      {path}: no events (the process wrote nothing)")
        elif v == "truncated":
            missing = f"; {parent_missing_note(r)}" if r.get("parent_missing") else ""
            common.say(f"TRUNCATED  {path}: {fmt}, {r['events']:,} readable events; {r['message']}"
                       f"{inherited_note(r)}{missing}")
        elif v == "not-a-trace":
            common.say(f"ERROR      {path}: not a dftracer trace ({'; '.join(r['problems'][:2])})")
        elif v in ("missing", "error"):
            common.say(f"ERROR      {path}: {common.describe(r)}")
        elif v == "corrupt":
            common.say(f"CORRUPT    {path}: {r['message']}; {r.get('events', 0):,} events readable "
                  "before it")
        else:
            common.say(f"INVALID    {path}: {fmt}, {r['problem_count']} problems in {r['events']:,} "
                  "events")
            for msg in r["problems"]:
                common.say(f"  {msg}")
            if r["problem_count"] > len(r["problems"]):
                common.say(f"  ... {r['problem_count'] - len(r['problems'])} more")
    if not args.json and len(results) > 1:
        counts: Dict[str, int] = {}
        for r in results:
            counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
        common.say(f"{len(results)} files: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    return status
