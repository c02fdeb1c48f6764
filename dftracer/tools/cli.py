"""The ``dftracer`` command line: summary, report, merge, convert, validate, view, top, run (docs/cli.md)."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from dftracer import __version__


def build_parser() -> argparse.ArgumentParser:
    from dftracer.tools import merge, report, summary, top, validate, view

    parser = argparse.ArgumentParser(
        prog="dftracer",
        description="Read, summarise, check and merge dftracer traces (.pfw, .pfw.gz).",
        epilog="example:\n  dftracer summary ./traces\n\n"
               "Run 'dftracer COMMAND --help' for each command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"dftracer {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    summary.add_parser(sub)
    report.add_parser(sub)
    merge.add_parsers(sub)
    validate.add_parser(sub)
    view.add_parser(sub)
    top.add_parser(sub)
    # `run` has its own parser (dftracer/tools/run.py); listed here for --help.
    sub.add_parser("run", add_help=False,
                   help="run a command with tracing on in every Python process it starts")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:
        from dftracer.tools import run

        return run.main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. piped into head
        return 0
    except (OSError, RuntimeError) as exc:
        from dftracer.tools.common import err

        err(str(exc))
        return 2


if __name__ == "__main__":
    sys.exit(main())
