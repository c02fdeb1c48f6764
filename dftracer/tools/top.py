"""dftracer top: a live view of a running job's traces (docs/cli.md).

    dftracer top [PATHS...]               full-screen view, refreshed every second
    dftracer top --once [--json] PATHS    one snapshot, as a table or as JSON
    dftracer run --top -- CMD             the view of CMD's traces while it runs

The reading is dftracer/tools/follow.py's (incremental) and the figures
kept per process dftracer/tools/top_figures.py's (bounded); the live view is
dftracer/tools/top_view.py's (the `top` extra: rich)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

from dftracer.tools import common, follow, hang, stacks, trace_name

EXTRA = "top"
EXIT_MISSING_EXTRA = 3

EXAMPLE = """example:
  dftracer top runs/                      # while the job runs; q quits
  dftracer top --once --json runs/ > now.json
  dftracer run --top --log-file runs/train -- python train.py
"""



def add_parser(sub: Any) -> None:
    p = common.command(
        sub, "top", help="a live view of a running job: per process rates, steps, shares, I/O",
        description="Follows growing trace files and shows, refreshed every second, one row "
                    "per process (events/s, current step and step times, share of time by "
                    "category, I/O MB/s, state) and the top functions of the last --window "
                    "seconds.  Files are read incrementally (only new complete gzip members). "
                    "The live view needs the 'top' extra (rich); --once works without it.",
        epilog=EXAMPLE, paths=False)
    p.add_argument("paths", nargs="*", metavar="PATHS",
                   help="trace files, directories (searched for .pfw/.pfw.gz) or globs "
                        "(default: the directory of $DFTRACER_LOG_FILE, else the current one)")
    p.add_argument("--window", type=float, default=10.0, metavar="S",
                   help="seconds the rates, shares and top functions cover (default 10)")
    p.add_argument("--interval", type=float, default=1.0, metavar="S",
                   help="seconds between refreshes (default 1)")
    p.add_argument("--flush-interval", metavar="S", default=None,
                   help="the traced job's DFTRACER_FLUSH_INTERVAL: a process is silent after 3 of "
                        "them without new data (default: $DFTRACER_FLUSH_INTERVAL, else 1)")
    p.add_argument("--step", metavar="NAME", default=None,
                   help="the event name that marks a step (default: pipeline/iteration, "
                        "ProfilerStep#N, pipeline/train.block, else args.step)")
    p.add_argument("--sort", choices=SORTS, default="rank", help="row order (default rank)")
    p.add_argument("--top", type=int, default=None, metavar="N",
                   help="top functions listed (default: what fits; 20 with --once)")
    p.add_argument("--hang-after", type=float, default=hang.DEFAULT_AFTER, metavar="S",
                   help="report a hang when ranks have waited in a collective that others of "
                        "its group are not in for longer than S seconds (default 60; docs/hang.md)")
    p.add_argument("--once", action="store_true",
                   help="read the files once, print one snapshot and exit")
    p.add_argument("--json", action="store_true", help="with --once: the snapshot as JSON")
    p.set_defaults(func=main)


def default_paths(env: Optional[Dict[str, str]] = None) -> List[str]:
    """Where `dftracer run` (and a traced program) writes: the directory of
    DFTRACER_LOG_FILE, else the current directory."""
    env = os.environ if env is None else env
    log = env.get("DFTRACER_LOG_FILE")
    if log:
        return [os.path.dirname(os.path.abspath(log)) or "."]
    return ["."]


def flush_interval(arg: Optional[str]) -> float:
    """--flush-interval, else $DFTRACER_FLUSH_INTERVAL (one warning line when
    unusable), else 1 s."""
    if arg is not None:
        value, why = follow.parse_interval(arg)
        if why:
            raise ValueError(f"--flush-interval {arg!r} {why} (0.01-3600, or 0/off)")
        return value
    env = os.environ.get("DFTRACER_FLUSH_INTERVAL")
    value, why = follow.parse_interval(env)
    if why:
        common.err(f"warning: DFTRACER_FLUSH_INTERVAL={env!r} {why}; using {value:g}")
    return value


# ---- formatting ----------------------------------------------------------------

# The rows both screens show (the --once table here, the live view in
# top_view.py) are top_rows.py's, below both.
from dftracer.tools.top_rows import (  # noqa: E402
    RIGHT, ROW_HEADERS, SORTS, headline, render_text, row_cells, sort_rows)


# ---- the command -----------------------------------------------------------------

def make_follower(args: argparse.Namespace, paths: List[str],
                  ignore: Optional[Dict[str, Tuple[float, int]]] = None) -> follow.Follower:
    if not args.window > 0:
        raise ValueError(f"--window must be > 0 (got {args.window:g})")
    if not getattr(args, "hang_after", 0) >= 0:
        raise ValueError(f"--hang-after must be >= 0 seconds (got {args.hang_after:g})")
    if not args.interval > 0:
        raise ValueError(f"--interval must be > 0 (got {args.interval:g})")
    return follow.Follower(paths, window=max(int(round(args.window)), 1),
                           flush_interval=flush_interval(args.flush_interval),
                           step_name=args.step, ignore=ignore)


def missing_extra_message() -> str:
    return (f"the live view of dftracer top needs rich, which is not installed: "
            f"{common.install_hint(EXTRA)} "
            f"(dftracer top --once [--json] works without it)")


def have_rich() -> bool:
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def main(args: argparse.Namespace) -> int:
    paths = args.paths or default_paths()
    try:
        fol = make_follower(args, paths)
    except ValueError as exc:
        common.err(str(exc))
        return common.EXIT_BAD_INPUT
    if args.json and not args.once:
        common.err("--json needs --once (the live view is for a terminal)")
        return common.EXIT_BAD_INPUT
    if args.once:
        fol.refresh()
        status = common.EXIT_OK
        for arg, msg in fol.finder.errors:
            common.err(f"{arg}: {msg}")
            status = common.EXIT_BAD_INPUT
        if not fol.files:
            return status
        snap = fol.snapshot(top=20 if args.top is None else args.top)
        snap["hang"] = hang.from_follower(fol, snap["time"], args.hang_after)
        stacks.ask_stacks(fol, snap["hang"])  # for the next look (the live view's next refresh)
        if args.json:
            snap["paths"] = paths
            json.dump(snap, sys.stdout, indent=1)
            sys.stdout.write("\n")
        else:
            print(render_text(snap, args.sort))
        return status
    if not have_rich():
        common.err(missing_extra_message())
        return EXIT_MISSING_EXTRA
    if not sys.stdout.isatty():
        common.err("the live view needs a terminal (standard output is not one); "
                   "use --once for one snapshot, --once --json for scripts")
        return common.EXIT_BAD_INPUT
    from dftracer.tools import top_view

    top_view.live(fol, paths, interval=args.interval, sort=args.sort, top_n=args.top,
                  hang_after=args.hang_after)
    return common.EXIT_OK


# ---- dftracer run --top ------------------------------------------------------------

class RunView:
    """`dftracer run --top`: the view of the run's own trace files while the
    command runs.  The command's stdout and stderr go to a log file next to
    the traces (the view owns the terminal), its stdin is /dev/null (the view
    reads the keys); at the end the last lines of that log are printed."""

    TAIL_LINES = 10
    # the table printed when the command ends: rank host pid name state events
    # step median note (the rates of a finished run say little)
    FINAL_COLUMNS = (0, 1, 2, 3, 4, 5, 7, 9, 18, 19)

    def __init__(self, stem: str, before: Dict[str, Tuple[float, int]]) -> None:
        self.stem = stem
        self.before = before
        self.log_path = f"{stem}-{trace_name.host_name()}-{os.getpid()}-output.log"
        self.log: Any = None
        self.stdin: Any = None

    @classmethod
    def create(cls, stem: str, before: Dict[str, Tuple[float, int]]) -> Optional["RunView"]:
        """The view, or None (with one line on stderr saying why) when it
        cannot be shown: no terminal, or rich missing."""
        if not have_rich():
            sys.stderr.write(f"dftracer run: --top: {missing_extra_message()}; "
                             "running without the view\n")
            return None
        if not sys.stdout.isatty():
            sys.stderr.write("dftracer run: --top: standard output is not a terminal; "
                             "running without the view\n")
            return None
        return cls(stem, before)

    def popen_args(self) -> Dict[str, Any]:
        self.log = open(self.log_path, "wb")
        self.stdin = open(os.devnull, "rb")
        return {"stdin": self.stdin, "stdout": self.log, "stderr": self.log}

    def watch(self, proc: Any) -> None:
        """Shows the view until the command ends (or q)."""
        from dftracer.tools import top_view

        ns = argparse.Namespace(window=10.0, interval=1.0, flush_interval=None, step=None)
        fol = make_follower(ns, [trace_name.pattern(self.stem)], ignore=self.before)
        pattern = os.path.join(os.path.relpath(os.path.dirname(self.stem)),
                               os.path.basename(self.stem) + "-*")
        try:
            ended = top_view.live(fol, [pattern], interval=1.0, proc=proc, output=self.log_path)
        except Exception as exc:  # the view must never cost the run: it goes on without it
            sys.stderr.write(f"dftracer run: --top: the view stopped ({type(exc).__name__}: "
                             f"{exc}); the command (pid {proc.pid}) goes on, its output goes to "
                             f"{self.log_path}\n")
            return
        if not ended:
            sys.stderr.write(f"dftracer run: view closed; the command (pid {proc.pid}) goes on, "
                             f"its output goes to {self.log_path}\n")
            return
        fol.refresh()
        snap = fol.snapshot(top=0)
        cols = self.FINAL_COLUMNS
        rows = [[row_cells(p)[i] for i in cols] for p in sort_rows(snap["processes"], "rank")[:20]]
        more = len(snap["processes"]) - len(rows)
        sys.stderr.write(f"dftracer run: {headline(snap)}\n"
                         + common.table([ROW_HEADERS[i] for i in cols], rows,
                                        [k for k, i in enumerate(cols) if i in RIGHT]) + "\n"
                         + (f"  ... and {more} more\n" if more > 0 else ""))

    def close(self) -> None:
        if self.log is None:
            return
        self.log.close()
        self.stdin.close()
        try:
            if os.path.getsize(self.log_path) == 0:  # nothing to point at
                os.unlink(self.log_path)
                return
        except OSError:
            pass
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(os.path.getsize(self.log_path) - 65536, 0))
                tail = f.read().decode("utf-8", "replace").splitlines()[-self.TAIL_LINES:]
        except OSError:
            tail = []
        sys.stderr.write(f"dftracer run: the command's output (stdout and stderr) is in "
                         f"{self.log_path}" + (", its last lines:\n" if tail else "\n"))
        for line in tail:
            sys.stderr.write(f"  | {line}\n")
