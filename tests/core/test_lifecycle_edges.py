"""Edges a careful audit found (issue 25, point 8): exec() of a traced Python,
a log directory that is a regular file, and events logged while the exit-time
finalize runs."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import pytest

from tracefile import find_traces, read_trace, run_python

ENABLED = {"DFTRACER_ENABLE": "1"}


def clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env.update(ENABLED)
    env.update(extra)
    return env


# ---- exec -------------------------------------------------------------------------------------

EXEC_PROG = """
import os, sys
from dftracer.python import dftracer
log = dftracer.initialize_log(os.path.join(sys.argv[1], "run.pfw"))
log.log_event("image" + str(len(sys.argv) - 1), "c", log.get_time(), 1)
print(os.getpid(), log.trace_path, flush=True)
if len(sys.argv) < 4:
    os.execv(sys.executable, [sys.executable, sys.argv[0]] + sys.argv[1:] + ["again"])
"""


def test_exec_of_a_traced_python_traces_quietly_to_the_next_name(tmp_path):
    """The image after os.execv has the same pid: the file of the image before
    it is not an error, the new image traces to `.1`, then `.2`."""
    prog = tmp_path / "prog.py"
    prog.write_text(EXEC_PROG)
    proc = subprocess.run([sys.executable, str(prog), str(tmp_path)], env=clean_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr  # no error line, no warning
    lines = [line.split() for line in proc.stdout.splitlines()]
    assert len(lines) == 3 and len({pid for pid, _ in lines}) == 1
    pid = lines[0][0]
    base = str(tmp_path / f"run-{os.uname().nodename}-{pid}")
    assert [path for _, path in lines] == [base + "-app.pfw.gz", base + ".1-app.pfw.gz",
                                           base + ".2-app.pfw.gz"]
    assert sorted(find_traces(str(tmp_path), "run")) == sorted(path for _, path in lines)
    # The images before an exec end without `end` (docs/configuration.md); the last finalizes.
    for k, (_, path) in enumerate(lines):
        tr = read_trace(path, require_end=(k == 2))
        assert [e["name"] for e in tr.of("X", cat="c")] == [f"image{k + 1}"]
        assert tr.of("X", name="start")[0]["pid"] == int(pid)


def test_exec_says_what_it_chose_at_info_level(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(EXEC_PROG)
    proc = subprocess.run([sys.executable, str(prog), str(tmp_path), "x"],
                          env=clean_env(DFTRACER_LOG_LEVEL="INFO"), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    # the new image goes on in the next numbered name, said at info level only
    info = [l for l in proc.stderr.splitlines() if l.startswith("dftracer: info: tracing to ")]
    assert len(info) == 2 and info[1].endswith(".1-app.pfw.gz"), proc.stderr
    assert "error" not in proc.stderr, proc.stderr


# ---- a log directory that is not a directory --------------------------------------------------


def test_log_directory_under_a_regular_file_is_not_a_directory(tmp_path):
    (tmp_path / "file").write_text("x")
    proc = run_python(f"""
        import errno
        from dftracer.python import dftracer
        for sub in ("file/sub", "file"):
            try:
                dftracer.initialize_log({str(tmp_path)!r} + "/" + sub + "/trace.pfw")
            except NotADirectoryError as e:
                print(e.errno == errno.ENOTDIR, e.strerror, e.filename, sep="|")
        """, ENABLED)
    got = [line.split("|") for line in proc.stdout.splitlines()]
    strerror = os.strerror(errno.ENOTDIR)
    # the directory that could not be made, and why, as the system said it
    assert [g[0] for g in got] == ["True", "True"], proc.stdout + proc.stderr
    for (_, message, _), sub in zip(got, ("file/sub", "file")):
        assert message == f"cannot create log directory {tmp_path / sub}: {strerror}", message


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any directory")
def test_read_only_log_directory_is_permission_denied(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    proc = run_python(f"""
        from dftracer.python import dftracer
        try:
            dftracer.initialize_log({str(ro / 'trace.pfw')!r})
        except PermissionError as e:
            print(e.strerror, e.filename, sep="|")
        """, ENABLED)
    assert proc.stdout.strip().split("|") == [os.strerror(errno.EACCES), str(ro)]


# ---- events logged while finalize runs --------------------------------------------------------

LATE = """
import sys, threading, time
from dftracer import _core
from dftracer.python import dftracer
log = dftracer.initialize_log(sys.argv[1])
t0 = log.get_time()
K = int(sys.argv[2])
def late():
    while _core.is_active():  # until the exit-time finalize begins
        time.sleep(0.0005)
    for i in range(K):
        log.log_event("late", "c", t0, 1)
    print("late done", flush=True)
if K:
    threading.Thread(target=late, daemon=True).start()
for i in range(200000):  # buffered (a large write buffer): finalize writes them all
    log.log_event("e", "c", t0 + i, 1)
print("exiting", flush=True)
"""


def late_run(tmp_path, k: int):
    proc = subprocess.run([sys.executable, "-c", LATE, str(tmp_path / "t.pfw"), str(k)],
                          env=clean_env(DFTRACER_WRITE_BUFFER_SIZE="512M"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return proc, read_trace(find_traces(str(tmp_path), "t")[0])


def test_events_logged_during_the_exit_finalize_are_counted_in_end(tmp_path):
    proc, tr = late_run(tmp_path, 50)
    assert proc.stdout.split("\n")[:2] == ["exiting", "late done"]
    assert len(tr.of("X", name="e")) == 200000
    assert not tr.of("X", name="late")  # not written: the end event is the last line
    end = tr.of("X", name="end")[0]
    assert end["args"]["num_dropped"] == 50
    assert end["args"]["num_events"] == len(tr.events) - 1
    # The readers take the new argument in their stride.
    for cmd in (["validate"], ["summary", "--json"]):
        res = subprocess.run([sys.executable, "-m", "dftracer", *cmd, tr.path],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr


def test_end_has_no_num_dropped_when_nothing_was_dropped(tmp_path):
    _, tr = late_run(tmp_path, 0)
    assert "num_dropped" not in tr.of("X", name="end")[0]["args"]
