"""An unusable DFTRACER_ENABLE or DFTRACER_INIT is not silent (issue 71):
a process started with either gets one warning line naming the variable,
its value and the value used instead, and traces as that value says.  The
start-up .pth line is run as site runs it (site.addsitedir on a folder that
holds a copy), so the whole path is the installed one."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

import dftracer
from tracefile import find_traces, read_trace

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOME = os.path.dirname(os.path.dirname(os.path.abspath(dftracer.__file__)))
WARNING = re.compile(r"^dftracer: warning: (DFTRACER_[A-Z_]+)='([^']*)' (.*); using (\S+)$")

# the program: its site folder's .pth runs first, then a read and, when asked,
# the pydftracer-style start of a trace in function mode
PROGRAM = """
import os, site, sys
site.addsitedir(sys.argv[1])
with open(os.path.join(sys.argv[1], "data.txt"), "w") as f:
    f.write("payload")
with open(os.path.join(sys.argv[1], "data.txt")) as f:
    assert f.read() == "payload"
if sys.argv[2] == "function":
    from dftracer.python import dftracer
    log = dftracer.initialize_log(os.environ["OUT_LOG"], None, -1)
    with open(os.path.join(sys.argv[1], "data.txt")) as f:
        f.read()
    log.finalize()
print("program ran")
"""


def _run(tmp_path, env, mode="none"):
    site_dir = tmp_path / "site"
    site_dir.mkdir(exist_ok=True)
    shutil.copy(os.path.join(ROOT, "dftracer-preload.pth"), site_dir)
    full = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    full.update(env)
    # python -S has no site-packages: the folder dftracer is imported from
    # here (the installed package's, or the source tree's in place), never
    # the source tree itself (an installed run's tree has no extension)
    full["PYTHONPATH"] = os.pathsep.join(p for p in (HOME, os.environ.get("PYTHONPATH")) if p)
    full["DFTRACER_LOG_FILE"] = str(tmp_path / "pre")
    full["OUT_LOG"] = str(tmp_path / "fn")
    full["DFTRACER_DATA_DIR"] = str(site_dir)
    proc = subprocess.run([sys.executable, "-S", "-c", PROGRAM, str(site_dir), mode],
                          env=full, cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "program ran\n"  # the program's output is its own
    return proc


def _warnings(stderr):
    lines = [ln for ln in stderr.splitlines() if ln.startswith("dftracer:")]
    parsed = [WARNING.match(ln) for ln in lines]
    assert all(parsed), lines  # every dftracer line on stderr is a warning of the rule's form
    return [m.groups() for m in parsed]


def test_enable_maybe_warns_once_and_traces_nothing(tmp_path):
    proc = _run(tmp_path, {"DFTRACER_ENABLE": "maybe", "DFTRACER_INIT": "PRELOAD"})
    (var, value, why, used), = _warnings(proc.stderr)
    assert (var, value, used) == ("DFTRACER_ENABLE", "maybe", "0") and "boolean" in why
    assert find_traces(str(tmp_path), "pre") == []  # off, as the warning says


def test_enable_maybe_in_function_mode_warns_once(tmp_path):
    """pydftracer's API reads DFTRACER_ENABLE in Python and the core reads it
    again at initialize_log: one line for both (the core's table)."""
    proc = _run(tmp_path, {"DFTRACER_ENABLE": "maybe"}, mode="function")
    assert [w[:2] + w[3:] for w in _warnings(proc.stderr)] == [("DFTRACER_ENABLE", "maybe", "0")]
    assert find_traces(str(tmp_path), "fn") == []


@pytest.mark.parametrize("value", ["BOGUS", "preloadd"])
@pytest.mark.parametrize("mode", ["none", "function"])
def test_init_bogus_warns_once_and_is_function_mode(tmp_path, value, mode):
    """FUNCTION is the value used: nothing traces from start-up (said at
    start-up, whether or not the program starts a trace itself), and the
    program's own initialize_log traces (its read is in the file) without a
    second line."""
    proc = _run(tmp_path, {"DFTRACER_ENABLE": "1", "DFTRACER_INIT": value}, mode=mode)
    (var, got, why, used), = _warnings(proc.stderr)
    assert (var, got, used) == ("DFTRACER_INIT", value, "FUNCTION") and "PRELOAD" in why
    assert find_traces(str(tmp_path), "pre") == []
    paths = find_traces(str(tmp_path), "fn")
    if mode == "none":
        assert paths == []
        return
    assert len(paths) == 1
    trace = read_trace(paths[0])
    names = trace.hashes("FH")
    reads = [e for e in trace.of(cat="POSIX", name="read")
             if names.get(e["args"].get("fhash"), "").endswith("data.txt")]
    assert len(reads) >= 1, trace.of(cat="POSIX")


def test_usable_values_say_nothing(tmp_path):
    proc = _run(tmp_path, {"DFTRACER_ENABLE": "yes", "DFTRACER_INIT": "preload"})
    assert _warnings(proc.stderr) == []
    paths = find_traces(str(tmp_path), "pre")
    assert len(paths) == 1  # traced from start-up
    assert read_trace(paths[0]).events


def test_off_says_nothing_whatever_init_holds(tmp_path):
    """DFTRACER_ENABLE off: the .pth line imports nothing, so an INIT nobody
    reads is not warned about (a process that never traces pays nothing)."""
    proc = _run(tmp_path, {"DFTRACER_ENABLE": "off", "DFTRACER_INIT": "BOGUS"})
    assert _warnings(proc.stderr) == []
    assert find_traces(str(tmp_path), "pre") == []
