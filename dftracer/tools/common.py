"""Shared pieces of the subcommands: reporting bad files, formatting."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Dict, Iterable, List, Optional, Tuple

from dftracer.tools import paths as _paths

EXIT_OK, EXIT_PROBLEMS, EXIT_BAD_INPUT = 0, 1, 2


def command(sub: Any, name: str, epilog: str, paths: bool = True,
            **kw: Any) -> argparse.ArgumentParser:
    """A subcommand's parser as every command makes it: its examples as the
    epilog, kept as written, and (paths) the options of add_common."""
    p = sub.add_parser(name, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter,
                       **kw)
    if paths:
        add_common(p)
    return p


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATHS",
                        help="trace files, directories (searched for .pfw/.pfw.gz) or globs")
    parser.add_argument("-j", "--jobs", type=int, default=None,
                        help="worker processes (default: the usable CPU cores)")
    parser.add_argument("--dask", metavar="ADDRESS", default=None,
                        help="run the per-file work on the Dask cluster at this scheduler "
                             "address (e.g. tcp://host:8786)")
    parser.add_argument("--progress", dest="progress", action="store_const", const=True,
                        default=None, help="always show the progress bar")
    parser.add_argument("--no-progress", dest="progress", action="store_const", const=False,
                        help="never show the progress bar")


def distribution() -> str:
    """The name this package is installed under (for `pip install NAME[extra]`
    hints), or its default name when it runs from a source tree."""
    try:
        from importlib.metadata import packages_distributions

        names = packages_distributions().get("dftracer")
        if names:
            return names[0]
    except Exception:  # broken metadata
        pass
    return "dftracer-native"


# An extra's requirements as pyproject.toml declares them, for a package run
# from a source tree (no metadata); an installed one reads its own.
_EXTRAS = {"report": ["plotly>=5.0"], "top": ["rich>=13"], "view": ["viztracer>=1.0"],
           "dask": ["dask[distributed]>=2023.1"]}


def install_hint(extra: str) -> str:
    """`pip install ...` that works where this package is: the extra's own
    requirements (a clone's or a local wheel's `NAME[extra]` is not on any
    index), and the extra named for the reader."""
    reqs = list(_EXTRAS.get(extra, []))
    try:
        from importlib.metadata import requires

        marker = re.compile(r"""\s*;\s*extra\s*==\s*['"]%s['"]\s*$""" % re.escape(extra))
        found = [marker.sub("", r) for r in requires(distribution()) or () if marker.search(r)]
        reqs = found or reqs
    except Exception:  # not installed (a source tree), or broken metadata
        pass
    if not reqs:
        return f"pip install '{distribution()}[{extra}]'"
    return "pip install " + " ".join(f"'{r}'" for r in reqs) + f" (the '{extra}' extra)"


def expand_paths(args: argparse.Namespace) -> Tuple[List[str], int]:
    files, errors = _paths.expand(args.paths)
    for arg, msg in errors:
        err(f"{arg}: {msg}")
    return files, EXIT_BAD_INPUT if errors else EXIT_OK


# What must not reach a terminal raw: C0 controls, DEL, C1 controls (U+009B
# is a CSI too), the bidirectional overrides, line separators, and the lone
# surrogates that stand for undecodable bytes of a file name.
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                          r"\ud800-\udfff]")


def _escape(m: "re.Match[str]") -> str:
    c = ord(m.group())
    if 0xDC80 <= c <= 0xDCFF:  # os.fsdecode's stand-in for the byte c - 0xDC00
        return f"\\x{c - 0xDC00:02x}"
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: str) -> str:
    """text with every control character written as an escape (\\x1b,
    \\u202e): names, categories and paths from a trace or the command line
    never reach the terminal raw.  Every text output of the CLI goes through
    it (err, say, and the tables)."""
    return _UNPRINTABLE.sub(_escape, text)


def say(line: str, file: Any = None) -> None:
    """Prints one line of output (stdout unless file), control characters
    escaped."""
    print(printable(line), file=file or sys.stdout)


def err(msg: str) -> None:
    print(f"dftracer: {printable(msg)}", file=sys.stderr)


LINE_MAX_TEXT = "16 MiB"  # src/reader/reader.h DFT_RD_LINE_MAX; docs/trace-format.md


def long_line_message(first: int, count: int) -> str:
    """The words every command uses for lines skipped as over the line limit."""
    more = f" (and {count - 1} more such lines)" if count > 1 else ""
    return f"line {first}: longer than the {LINE_MAX_TEXT} line limit; skipped{more}"


def report_file_status(results: Iterable[Dict[str, Any]]) -> int:
    """Prints a line per file that did not read cleanly; returns the exit status
    those files call for (a truncated tail and skipped over-long lines are
    only warnings)."""
    status = EXIT_OK
    for r in results:
        if r.get("long_lines"):
            err(f"warning: {r['path']}: "
                f"{long_line_message(r['first_long_line'], r['long_lines'])}")
        st = r.get("status")
        if st == "truncated":
            err(f"warning: {r['path']}: truncated tail ({r['message']}); "
                f"{r.get('events', 0)} readable events used")
        elif st != "ok":
            err(f"{r['path']}: {describe(r)}")
            status = EXIT_BAD_INPUT
    return status


def report_bad_lines(results: Iterable[Dict[str, Any]]) -> None:
    """One warning per file with lines that do not parse (over-long lines are
    reported by report_file_status)."""
    for r in results:
        n = r.get("bad_lines", 0) - r.get("long_lines", 0)
        if n > 0 and r.get("status") in ("ok", "truncated") and r.get("first_bad_line"):
            err(f"warning: {r['path']}: {n} lines do not parse (first: line "
                f"{r['first_bad_line']}: {r['first_bad']}); skipped")


def check_results(results: List[Dict[str, Any]]) -> int:
    """Reports the files of per-file results that could not be read, are no
    traces (marked "error") or hold bad lines; returns the exit status."""
    status = report_file_status(results)
    for r in results:
        why = not_a_trace(r)
        if why:
            err(f"{r['path']}: {why}")
            r["status"] = "error"
            status = EXIT_BAD_INPUT
    report_bad_lines(results)
    return status


def describe(r: Dict[str, Any]) -> str:
    st = r.get("status")
    if st == "missing":
        return "no such file"
    if st == "corrupt":
        return f"corrupt: {r['message']} (after {r.get('events', 0)} events)"
    return r.get("message") or str(st)


def not_a_trace(r: Dict[str, Any]) -> Optional[str]:
    """Why a summarized file is not a trace, or None."""
    if r.get("status") not in ("ok", "truncated"):
        return None
    if r.get("events", 0) == 0 and r.get("bad_lines", 0) > 0:
        if not r.get("first_bad_line"):  # only over-long lines
            return f"not a dftracer trace ({long_line_message(r['first_long_line'], 1)})"
        return (f"not a dftracer trace (line {r.get('first_bad_line')}: "
                f"{r.get('first_bad')})")
    return None


def fmt_us(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.0f} us" if us == int(us) else f"{us:.1f} us"


def fmt_bytes(n: int, coarse: bool = False) -> str:
    """Bytes in binary units, the one rule of every command: `512 B`,
    `1.5 KiB`, ... `2.0 TiB` ("-" for none), the tables' figures; coarse:
    `1.2 GiB`, else whole MiB (`20 MiB`), the figures inside a sentence (the
    memory reports', the hang line's: memory.size_text)."""
    if coarse:
        return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"
    if n <= 0:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def table(headers: List[str], rows: List[List[str]], right: Iterable[int]) -> str:
    """The rows under the headers in aligned columns, every cell printable()."""
    right = set(right)
    rows = [[printable(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: List[str]) -> str:
        return "  ".join(c.rjust(widths[i]) if i in right else c.ljust(widths[i])
                         for i, c in enumerate(cells)).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out.extend(line(r) for r in rows)
    return "\n".join(out)
