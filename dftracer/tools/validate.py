"""dftracer validate: check trace files against docs/trace-format.md."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict

from dftracer.tools import common, runner, work

EXAMPLE = """example:
  dftracer validate ./traces
  dftracer validate run1/trace-node17-4242-app.pfw.gz --json

exit status: 0 every file is valid (a truncated tail, an empty file or a
missing end event are warnings), 1 some file breaks the format, 2 a file is missing, corrupt
or not a trace."""


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
    return "truncated" if st == "truncated" else "ok"


def main(args: argparse.Namespace) -> int:
    files, status = common.expand_paths(args)
    if not files:
        return common.EXIT_BAD_INPUT
    results = runner.run(work.validate_file, files, jobs=args.jobs, dask=args.dask,
                         label="validate", progress=args.progress)
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
                common.say(f"OK         {path}: {fmt}, {r['events']:,} events, {r['members']} gzip "
                      f"members{end}")
        elif v == "empty":
            common.say(f"EMPTY      {path}: no events (the process wrote nothing)")
        elif v == "truncated":
            common.say(f"TRUNCATED  {path}: {fmt}, {r['events']:,} readable events; {r['message']}")
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
