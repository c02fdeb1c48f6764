"""dftracer capture: asks every live traced process of this host whose trace
is in DIR for a full-detail window over its next steps (docs/windows.md).

No signal is sent: the request is the file `dftracer stacks` writes beside
each trace ("<...>-stacks.req", trace_name.request_path), whose first line
says "capture STEPS" instead of "stacks".  The process's flusher sees it at
its next wake (every half DFTRACER_FLUSH_INTERVAL), and the window opens at
the end of the step in progress: the sampler at the window's rate for the
next STEPS steps, then one `window` event with trigger "request"
(docs/trace-format.md).  This command does not wait for the window:
`dftracer summary --windows DIR` lists it once written."""

from __future__ import annotations

import argparse
import json
import socket
import sys
from typing import Any, Dict, List

from dftracer.tools import common, paths as _paths, stacks, trace_name

EXAMPLE = """example:
  dftracer capture ./runs              # a window over the next steps of every rank here
  dftracer capture ./runs --steps 10   # over the next 10 steps
"""


def add_parser(sub: Any) -> None:
    p = common.command(
        sub, "capture", help="open a full-detail window in the live traced processes here",
        description="Asks every live traced process of this host whose trace is under PATHS "
                    "to open a window of full detail (the stack sampler at the window's rate) "
                    "over its next steps; each writes a `window` event with trigger "
                    "\"request\" when the window closes.",
        epilog=EXAMPLE, paths=False)
    p.add_argument("paths", nargs="+", metavar="PATHS",
                   help="trace files or directories (searched for .pfw/.pfw.gz)")
    p.add_argument("--steps", type=int, default=None, metavar="N",
                   help="steps the window holds (default: DFTRACER_WINDOW_STEPS of each "
                        "process, 3)")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.set_defaults(func=main)


def ask(files: List[str], steps: int) -> Dict[str, List[Dict[str, Any]]]:
    """Writes the request of each live process of this host that holds its
    trace open: {"asked": [...], "not_asked": [...]}."""
    first = f"capture {steps}" if steps else "capture"
    asked: List[Dict[str, Any]] = []
    skipped: List[Dict[str, Any]] = []
    for path in files:
        m = trace_name.parse(path)
        if not m or not stacks._on_this_host(m):
            continue  # not a trace; another node's
        if not stacks._holds(m.pid, path):
            continue  # ended, or an earlier process's trace with the same pid
        p = {"pid": m.pid, "path": path}
        why = stacks._write_request(path, first)
        if why:
            skipped.append(dict(p, why=why))
        else:
            asked.append(p)
    return {"asked": asked, "not_asked": skipped}


def main(args: argparse.Namespace) -> int:
    if args.steps is not None and not 1 <= args.steps < 1000000:
        common.err(f"--steps must be 1 to 999999 (got {args.steps})")
        return common.EXIT_BAD_INPUT
    files, errors = _paths.expand(args.paths)
    status = common.EXIT_OK
    for path, msg in errors:
        common.err(f"{path}: {msg}")
        status = common.EXIT_BAD_INPUT
    out = ask(files, args.steps or 0)
    if args.json:
        json.dump(out, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for p in out["asked"]:
            print(f"asked pid {p['pid']} ({common.printable(p['path'])})")
        for p in out["not_asked"]:
            print(f"not asked: pid {p['pid']} ({common.printable(p['path'])}): {p['why']}")
    if not out["asked"] and not out["not_asked"]:
        common.err(f"no live traced process of this host ({socket.gethostname()}) writes to "
                   f"{' '.join(args.paths)}")
        return max(status, common.EXIT_BAD_INPUT)
    return status if out["asked"] else max(status, common.EXIT_PROBLEMS)
