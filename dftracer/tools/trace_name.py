"""The trace file's name, "<stem>-<host>-<pid>[.<k>]-app.pfw[.gz]"
(docs/trace-format.md, "Files"), built and taken apart here only: the Python
twin of src/core/trace_name.c, which the tracer writes with.

A name cannot say by itself where the stem ends and the host begins when
both may hold "-": given the stem, `parse` splits exactly; without it, the
stem ends at the first "-" of the base name (hosts such as "ip-10-0-0-1" or
"node-17" are common, and the default stem, "trace", has none).  To ask
whether a name is a given host's, use `TraceName.on_host`, which needs no
split."""

from __future__ import annotations

import glob
import os
import re
from typing import NamedTuple, Optional

SUFFIXES = (".pfw", ".pfw.gz")
TAIL = "-app.pfw"
DEFAULT_STEM = "./trace"

# "<head>-<pid>[.<k>]-app.pfw[.gz]", head being "<stem>-<host>"
_NAME = re.compile(r"^(?P<head>.*-[^/]*)-(?P<pid>\d+)(?:\.(?P<k>\d+))?-app\.pfw(?:\.gz)?$")


class TraceName(NamedTuple):
    stem: str   # the stem's base name
    host: str
    pid: int
    k: int      # 0 for the plain name
    head: str   # "<stem>-<host>"

    def on_host(self, host: str) -> bool:
        """Whether this is a name host's processes write (host as in names)."""
        return self.head.endswith("-" + host)


def is_trace_name(path: str) -> bool:
    return path.endswith(SUFFIXES)


def stem(log_file: Optional[str]) -> str:
    """The stem of a log file (initialize_log's logfile, DFTRACER_LOG_FILE):
    without a trailing ".pfw.gz" or ".pfw"; "./trace" when none is given."""
    s = log_file or DEFAULT_STEM
    for ext in (".pfw.gz", ".pfw"):
        if s.endswith(ext):
            return s[: -len(ext)]
    return s


def host_name(name: Optional[str] = None) -> str:
    """The host as names carry it: gethostname() with "/" and whitespace as "_"."""
    if name is None:
        import socket  # here: 3 ms of every command's start, for the few that ask

        name = socket.gethostname()
    return re.sub(r"[/\s]", "_", name)


def hosts() -> set:
    """This host's names: as gethostname() gives it and as trace names carry it."""
    import socket

    return {socket.gethostname(), host_name()}


def build(stem_: str, host: str, pid: "int | str", k: int = 0, compressed: bool = True) -> str:
    """The name a process writes (k > 0: its k-th numbered name)."""
    num = f".{k}" if k else ""
    return f"{stem_}-{host}-{pid}{num}{TAIL}{'.gz' if compressed else ''}"


REQUEST_TAIL = "-stacks.req"


def request_path(trace_path: str) -> Optional[str]:
    """The stacks request file of a trace file: "<...>-stacks.req" beside
    "<...>-app.pfw[.gz]" (core/trace_name.c names it, core/stacks.c watches
    it), or None when trace_path is not a trace file's name."""
    for tail in (TAIL + ".gz", TAIL):
        if trace_path.endswith(tail) and len(trace_path) > len(tail):
            return trace_path[: -len(tail)] + REQUEST_TAIL
    return None


def pattern(stem_: str) -> str:
    """A glob matching every trace file written under stem_."""
    return glob.escape(stem_) + "-*" + TAIL + "*"


def parse(name: str, stem_: Optional[str] = None) -> Optional[TraceName]:
    """The parts of a trace file's name (a path: its base name), or None when
    it is not one.  stem_ (a path or base name) makes the split exact."""
    base = os.path.basename(name)
    m = _NAME.match(base)
    if not m:
        return None
    head = m.group("head")
    pid, k = int(m.group("pid")), int(m.group("k") or 0)
    if stem_ is not None:
        s = os.path.basename(stem_)
        if not head.startswith(s + "-"):
            return None
        return TraceName(s, head[len(s) + 1:], pid, k, head)
    cut = head.index("-")
    return TraceName(head[:cut], head[cut + 1:], pid, k, head)
