"""The ``dftracer`` command line: summary, report, diff, merge, convert, validate, view, top, stacks, capture, whatif, run (docs/cli.md)."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from dftracer import __version__


def version_line() -> str:
    """``dftracer --version``: the version and what the writer deflates with
    (the line encoder, and the deflate library the build found: docs/performance.md)."""
    from dftracer import _core

    name, version, _level = _core._compression_backend()
    note = "" if name == "isal" else "; no ISA-L at build time: slower under a flood of events"
    return f"dftracer {__version__} (deflate: line encoder + {name} {version}{note})"


# Each command's module, imported only when its command runs (or for --help):
# `dftracer summary` need not load the report's, the viewer's and diff's code.
COMMANDS = {"summary": "summary", "report": "report", "diff": "diff", "merge": "merge",
            "convert": "merge", "validate": "validate", "view": "view", "top": "top",
            "stacks": "stacks", "capture": "capture", "whatif": "whatif"}


def build_parser(command: Optional[str] = None) -> argparse.ArgumentParser:
    """The parser of every command, or of `command` alone when it is one."""
    import importlib

    wanted = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    mods = {m: importlib.import_module("dftracer.tools." + m) for m in wanted}
    parser = argparse.ArgumentParser(
        prog="dftracer",
        description="Trace Python programs (run) and read, summarise, check, merge and view "
                    "their traces (.pfw, .pfw.gz): live (top, stacks) or afterwards.",
        epilog="example:\n  dftracer summary ./traces\n\n"
               "Run 'dftracer COMMAND --help' for each command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=version_line())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, mod in mods.items():
        (mod.add_parsers if name == "merge" else mod.add_parser)(sub)
    # `run` has its own parser (dftracer/tools/run.py); listed here for --help.
    sub.add_parser("run", add_help=False,
                   help="run a command with tracing on in every Python process it starts")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:
        from dftracer.tools import run

        return run.main(argv[1:])
    parser = build_parser(argv[0] if argv else None)
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
