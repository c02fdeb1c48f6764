"""Reading and checking trace files against docs/trace-format.md (test helper)."""

from __future__ import annotations

import glob
import gzip
import json
import os
import re
import subprocess
import sys
import textwrap
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

HASH_RE = re.compile(r"^[0-9a-f]{16}$")

# ---- the test extension -------------------------------------------------------
#
# _dftracer_testcore is dftracer._core built from the same sources with its test
# and benchmark hooks (src/testing/, docs/architecture.md).  It is never in the
# wheel: the Makefile's test targets build it next to the package under test and
# put it on PYTHONPATH, with DFTRACER_REQUIRE_TESTCORE=1, which makes its absence
# a failure; elsewhere the tests that need it skip.
TESTCORE = "_dftracer_testcore"
REQUIRE_TESTCORE = os.environ.get("DFTRACER_REQUIRE_TESTCORE") == "1"  # read before _clean_env
TESTCORE_BUILD = ("DFTRACER_BUILD_TESTCORE=1 python setup.py build_ext --inplace "
                  "(make test-dev does it)")
# Prepended to a subprocess's code: the dftracer package runs on the test
# extension in place of dftracer._core, so the hooks act on the tracer it uses.
USE_TESTCORE = (f"import sys, {TESTCORE}\n"
                f"sys.modules['dftracer._core'] = {TESTCORE}\n")


def get_testcore():
    """The test extension module; skips the calling test (fails under
    DFTRACER_REQUIRE_TESTCORE=1) when it is not built."""
    import importlib

    try:
        return importlib.import_module(TESTCORE)
    except ImportError as e:
        if REQUIRE_TESTCORE:
            raise AssertionError(f"DFTRACER_REQUIRE_TESTCORE=1 but {TESTCORE} is not importable: "
                                 f"{e}") from e
        import pytest

        pytest.skip(f"the test extension {TESTCORE} is not built: {TESTCORE_BUILD}")
EVENT_KEYS_X = ["id", "name", "cat", "pid", "tid", "ts", "dur", "ph"]
EVENT_KEYS_M = ["id", "name", "cat", "pid", "tid", "ph"]
META_NAMES = {"HH", "FH", "SH", "CM", "thread_name", "process_name", "process_sort_index", "rank",
              "worker", "clock", "open", "stack", "memory"}


@dataclass
class Trace:
    path: str
    events: List[Dict[str, Any]] = field(default_factory=list)

    def of(self, ph: str = "X", cat: Optional[str] = None, name: Optional[str] = None):
        return [
            e
            for e in self.events
            if e["ph"] == ph
            and (cat is None or e["cat"] == cat)
            and (name is None or e["name"] == name)
        ]

    def user_events(self):
        """Complete events other than the tracer's own start/end (a program's
        event may have category "dftracer" too)."""
        return [e for e in self.events if e["ph"] == "X" and
                not (e["cat"] == "dftracer" and e["name"] in ("start", "end"))]

    def hashes(self, kind: str) -> Dict[str, str]:
        return {e["args"]["value"]: e["args"]["name"] for e in self.of("M", name=kind)}


def whole_members_text(path: str) -> str:
    """The text of every whole gzip member of path, leaving out a torn last one
    (docs/trace-format.md: a process killed inside a member's write() leaves
    it torn; one never precedes another member) or a zero-filled tail."""
    data = open(path, "rb").read()
    out = []
    while data and data.strip(b"\0"):
        assert data[:2] == b"\x1f\x8b", f"{path}: {len(data)} bytes left that are no gzip member"
        d = zlib.decompressobj(31)
        text = d.decompress(data)
        if not d.eof:  # torn: the last bytes of the file
            break
        out.append(text)
        data = d.unused_data
    return b"".join(out).decode("utf-8")


def read_lines(path: str, torn_tail: bool = False) -> List[str]:
    if torn_tail and path.endswith(".gz"):
        return whole_members_text(path).split("\n")
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:  # type: ignore[operator]
        return f.read().split("\n")


def read_trace(path: str, check: bool = True, require_end: bool = True,
               torn_tail: bool = False) -> Trace:
    """Decodes every member, parses every line and checks the format.
    torn_tail: the process may have been killed inside a write(), so a torn
    last member is left out (every member before it must be whole)."""
    lines = read_lines(path, torn_tail)
    assert lines[0] == "[", f"{path}: first line is {lines[0]!r}, not '['"
    assert lines[-1] == "", f"{path}: last line is not newline-terminated"
    trace = Trace(path)
    for i, line in enumerate(lines[1:-1], start=2):
        ev = json.loads(line)
        trace.events.append(ev)
        if check:
            check_event(ev, f"{path}:{i}")
    if check:
        check_trace(trace, require_end)
    return trace


def parent_and_child(traces: List["Trace"]) -> Tuple["Trace", "Trace"]:
    """The traces of a process and of the child it forked: the child's
    `start` event names the other's pid as its ppid (not the smaller pid:
    pids wrap on a machine that has started many processes)."""
    a, b = traces

    def pid_ppid(t: "Trace") -> Tuple[int, int]:
        (start,) = [e for e in t.events if e["ph"] == "X" and e["name"] == "start"]
        return start["pid"], start["args"].get("ppid", -1)

    (pa, ppa), (pb, ppb) = pid_ppid(a), pid_ppid(b)
    assert (ppb == pa) != (ppa == pb), f"not a parent and its child: {pa}/{ppa}, {pb}/{ppb}"
    return (a, b) if ppb == pa else (b, a)


def check_event(ev: Dict[str, Any], where: str) -> None:
    ph = ev.get("ph")
    assert ph in ("X", "i", "C", "M"), f"{where}: bad ph {ph!r}"
    keys = list(ev.keys())
    expect = EVENT_KEYS_M if ph == "M" else EVENT_KEYS_X if ph == "X" else EVENT_KEYS_X[:6] + ["ph"]
    assert keys[: len(expect)] == expect, f"{where}: keys {keys} do not start with {expect}"
    assert isinstance(ev["id"], int) and ev["id"] >= 1, where
    assert isinstance(ev["name"], str) and isinstance(ev["cat"], str), where
    assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int), where
    if ph != "M":
        assert isinstance(ev["ts"], int) and ev["ts"] > 1_500_000_000_000_000, where
    if ph == "X":
        assert isinstance(ev["dur"], int) and ev["dur"] >= 0, where
    if ph == "i":
        assert ev.get("s") == "t", where
    if ph == "M":
        assert ev["cat"] == "dftracer" and ev["name"] in META_NAMES, where
        assert set(ev["args"]) >= {"name", "value"}, where
    args = ev.get("args")
    if args is not None:
        assert isinstance(args, dict), where
        if "hhash" in args:
            assert HASH_RE.match(args["hhash"]), where
        if ph in ("X", "i") and "hhash" in args and "level" in args:
            assert isinstance(args["level"], int) and args["level"] >= 1, where
            assert isinstance(args["p_idx"], int), where


def check_trace(trace: Trace, require_end: bool = True) -> None:
    ids = [e["id"] for e in trace.events]
    assert len(ids) == len(set(ids)), f"{trace.path}: duplicate ids"
    hh = trace.of("M", name="HH")
    assert len(hh) == 1, f"{trace.path}: {len(hh)} HH events"
    assert HASH_RE.match(hh[0]["args"]["value"])
    starts = trace.of("X", cat="dftracer", name="start")
    assert len(starts) == 1, f"{trace.path}: {len(starts)} start events"
    defined = {e["args"]["value"] for e in trace.events if e["ph"] == "M" and e["name"] in ("HH", "FH", "SH")}
    for kind in ("FH", "SH"):
        values = [e["args"]["value"] for e in trace.of("M", name=kind)]
        assert len(values) == len(set(values)), f"{trace.path}: {kind} defined twice"
    for e in trace.events:
        args = e.get("args") or {}
        for key in ("hhash", "fhash", "cmd_hash", "exec_hash", "cwd"):
            if key in args and isinstance(args[key], str) and HASH_RE.match(args[key]):
                assert args[key] in defined, f"{trace.path}: {key} {args[key]} undefined"
    if require_end:
        ends = trace.of("X", cat="dftracer", name="end")
        assert len(ends) == 1, f"{trace.path}: {len(ends)} end events"
        assert trace.events[-1] is ends[0], f"{trace.path}: end is not the last line"
        assert ends[0]["args"]["num_events"] == len(trace.events) - 1


def find_traces(directory: str, stem: str = "trace") -> List[str]:
    return sorted(glob.glob(os.path.join(directory, f"{stem}-*-app.pfw*")))


def validate(*paths: str) -> List[Dict[str, Any]]:
    """Runs the real `dftracer validate --json` on paths: one result per file
    ("verdict" is "ok", "empty", "truncated", "invalid", ...)."""
    proc = subprocess.run([sys.executable, "-m", "dftracer", "validate", "--json", *paths],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def run_python(code: str, env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None,
               check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs code in a fresh interpreter with DFTRACER_* taken only from env."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    full.update(env or {})
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc
