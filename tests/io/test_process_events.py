"""fork, exec, posix_spawn and wait as POSIX events (docs/io-tracing.md,
"Processes"), as the reference writes them: DFAnalyzer's DLIO preset counts
`fork` for its "Data Loader Fork" layer, and a reader joins a child to its
parent by fork's `ret` (or posix_spawn's `child_pid`) and the child's
`start` `ppid`."""

from __future__ import annotations

import glob
import gzip
import json
import os
import subprocess
import sys

import pytest

from tracefile import find_traces, read_trace, run_python

REFERENCE = os.environ.get("DFTRACER_REFERENCE_PYTHON")

# Forks a child that writes a file and exits with 3, runs a program through
# subprocess (vfork and exec in CPython), forks a child that execs, spawns
# one with posix_spawn, and tries to exec a file that does not exist.
PROGRAM = """
import os, subprocess, sys
from dftracer.python import dftracer
log = dftracer.initialize_log(logfile=sys.argv[1], data_dir=sys.argv[2], process_id=-1)
pid = os.fork()
if pid == 0:
    with open(os.path.join(sys.argv[2], "child.txt"), "w") as f:
        f.write("x")
    os._exit(3)
print("forked", pid, os.waitpid(pid, 0)[1])
subprocess.run(["/bin/true"], check=True)
pid = os.fork()
if pid == 0:
    os.execv("/bin/true", ["/bin/true", "from the child"])
print("exec child", pid, os.waitpid(pid, 0)[1])
pid = os.posix_spawn("/bin/true", ["/bin/true", "spawned"], dict(os.environ))
print("spawned", pid, os.waitpid(pid, 0)[1])
try:
    os.execv("/nonexistent/prog", ["prog"])
except OSError as e:
    print("exec failed", e.errno)
log.finalize()
"""


def _run(tmp_path, **env):
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    data = tmp_path / "data"
    data.mkdir()
    proc = run_python(f"import runpy, sys; sys.argv = [{str(prog)!r}, {str(tmp_path / 'trace.pfw')!r}, "
                      f"{str(data)!r}]; runpy.run_path(sys.argv[0], run_name='__main__')",
                      env={"DFTRACER_ENABLE": "1", **env}, cwd=str(tmp_path))
    out = {}
    for line in proc.stdout.splitlines():  # "forked PID STATUS", "exec child PID STATUS", ...
        key = next(k for k in ("forked", "exec child", "spawned", "exec failed")
                   if line.startswith(k + " "))
        out[key] = line[len(key):].split()
    traces = [read_trace(p, require_end=False) for p in find_traces(str(tmp_path))]
    by_pid = {}
    for t in traces:
        (start,) = [e for e in t.events if e["ph"] == "X" and e["name"] == "start"]
        by_pid[start["pid"]] = (t, start["args"]["ppid"])
    return out, by_pid


def _posix(trace, *names):
    return [e for e in trace.of("X", cat="POSIX") if e["name"] in names]


def test_fork_exec_spawn_and_wait_are_recorded_in_the_right_files(tmp_path):
    out, by_pid = _run(tmp_path)
    parent_pid = os.getpid()  # the runner's child is the parent: find it by ppid
    (parent,) = [pid for pid, (_, ppid) in by_pid.items() if ppid == parent_pid] or [None]
    assert parent is not None, by_pid
    trace, _ = by_pid[parent]
    forked = int(out["forked"][0])
    exec_child = int(out["exec child"][0])
    spawned = int(out["spawned"][0])
    # The parent's fork events: one per os.fork (not the vfork of
    # subprocess), ret = the child's pid, which each child's start names.
    forks = _posix(trace, "fork")
    assert [e["args"]["ret"] for e in forks] == [forked, exec_child]
    assert set(forks[0]["args"]) >= {"hhash", "level", "p_idx", "ret"}
    assert by_pid[forked][1] == parent and by_pid[exec_child][1] == parent
    # Each child writes its own events, never a fork event of its own.
    child, _ = by_pid[forked]
    assert not _posix(child, "fork") and [e["name"] for e in _posix(child, "write")] == ["write"]
    # The child that execs: its execv written before the new program ran.
    (execv,) = _posix(by_pid[exec_child][0], "execv")
    files = by_pid[exec_child][0].hashes("FH")
    assert files[execv["args"]["fhash"]] == "/bin/true"
    assert execv["args"]["arg0"] == "/bin/true" and execv["args"]["arg1"] == "from the child"
    assert execv["dur"] == 0 and "ret" not in execv["args"]
    # posix_spawn: the child's pid, ret 0; the spawned program is not traced.
    # (From 3.13 subprocess itself spawns with posix_spawn where the libc
    # can close descriptors in file actions: /bin/true with no arg1.)
    spawns = _posix(trace, "posix_spawn")
    (spawn,) = [e for e in spawns if e["args"].get("child_pid") == spawned]
    others = [e for e in spawns if e is not spawn]
    assert len(others) <= 1 and all(e["args"]["arg0"] == "/bin/true" and "arg1" not in e["args"]
                                    and e["args"]["ret"] == 0 for e in others), others
    assert spawn["args"]["child_pid"] == spawned and spawn["args"]["ret"] == 0
    assert spawn["args"]["arg1"] == "spawned" and spawned not in by_pid
    # waitpid: one per reap, with the pid asked, ret the pid reaped and its
    # wait status (exit code 3 is status 768); subprocess.run's too.
    waits = _posix(trace, "waitpid")
    reaped = [e["args"]["ret"] for e in waits]
    assert reaped[0] == forked and waits[0]["args"]["status"] == 3 << 8
    assert waits[0]["args"]["pid"] == forked and waits[0]["args"]["options"] == 0
    assert exec_child in reaped and spawned in reaped and len(reaped) == 4
    # A failed exec: one event, when it returned, ret -1 and errno ENOENT.
    (failed,) = _posix(trace, "execv")
    assert failed["args"]["ret"] == -1 and failed["args"]["errno"] == 2
    assert out["exec failed"] == ["2"]
    # Only these processes traced: the parent and its two forked children.
    assert set(by_pid) == {parent, forked, exec_child}


def test_process_events_follow_posix_tracing(tmp_path):
    out, by_pid = _run(tmp_path, DFTRACER_DISABLE_POSIX="1")
    for trace, _ in by_pid.values():
        assert not trace.of("X", cat="POSIX")
    assert out["exec failed"] == ["2"] and len(by_pid) == 3  # the program ran the same


REF_PROGRAM = """
import os, sys
from dftracer.python import dftracer
log = dftracer.initialize_log(logfile=sys.argv[1], data_dir=sys.argv[2], process_id=-1)
with open(os.path.join(sys.argv[2], "x.txt"), "w") as f:  # (2.2.0 writes no file without)
    f.write("x")
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
log.finalize()
"""


def _events(path):
    with gzip.open(path, "rt") as f:
        lines = [json.loads(line) for line in f if line.strip() not in ("", "[", "]")]
    return [e for e in lines if e.get("cat") == "POSIX" and e["name"] in ("fork", "waitpid")]


def test_fork_and_waitpid_as_the_reference_writes_them(tmp_path):
    """Same names, category and args (ours add `options`, `status`)."""
    if not REFERENCE:
        pytest.skip("DFTRACER_REFERENCE_PYTHON is not set: `make test` builds the reference "
                    "(pydftracer 2.0.6, dftracer 2.2.0) and sets it")
    prog = tmp_path / "prog.py"
    prog.write_text(REF_PROGRAM)
    got = {}
    for who, python in (("ref", REFERENCE), ("ours", sys.executable)):
        where = tmp_path / who
        where.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
        if who == "ref":
            env.pop("PYTHONPATH", None)
        env.update(DFTRACER_ENABLE="1", DFTRACER_INC_METADATA="1")
        subprocess.run([python, str(prog), str(where / "trace.pfw"), str(where)], env=env,
                       cwd=str(where), check=True, capture_output=True, timeout=120)
        files = sorted(glob.glob(str(where / "trace*app.pfw.gz")))
        parent = [e for p in files for e in _events(p)]
        got[who] = {(e["name"], e["cat"]): set(e["args"]) for e in parent}
    assert set(got["ours"]) == set(got["ref"]) == {("fork", "POSIX"), ("waitpid", "POSIX")}
    for key, ref_args in got["ref"].items():
        assert got["ours"][key] - ref_args <= {"level", "p_idx", "options", "status"}, key
        assert ref_args <= got["ours"][key], key
