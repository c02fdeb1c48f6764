"""The one rule for whether a trace's process still runs
(dftracer/tools/liveness.py; docs/cli.md, "Still running or ended"), on
real processes of this host: alive, stopped, a zombie, reaped, a pid that
names a later process; and another host's trace by its recent writes.  The
readers that take it (top, summary --memory, the hang post mortem) are
tested in their own files."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from dftracer.tools import liveness, trace_name

HOST = socket.gethostname()
NOW_US = int(time.time() * 1e6)


def test_this_process_runs():
    assert liveness.proc_state(HOST, os.getpid(), NOW_US) == "running"
    assert liveness.proc_state(trace_name.host_name(), os.getpid(), NOW_US) == "running"
    assert liveness.proc_state(HOST, os.getpid()) == "running"  # no time: no reuse check


def test_a_pid_that_started_after_the_trace_is_another_process():
    """A trace whose newest time is older than this process's start cannot
    be this process's: its pid was given again (the old writer ended)."""
    started = time.time() - time.monotonic()  # at most the boot: surely before this process
    old = int((started - 3600) * 1e6)
    assert liveness.proc_state(HOST, os.getpid(), old) == "gone"
    assert liveness.process_state(HOST, os.getpid(), None, old) == "gone"


def test_a_zombie_and_a_reaped_process_are_gone():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # exited, not reaped: state Z
        with open(f"/proc/{child.pid}/stat", "rb") as fh:
            if fh.read().rpartition(b")")[2].split()[0] == b"Z":
                break
        time.sleep(0.05)
    assert liveness.proc_state(HOST, child.pid, NOW_US) == "gone"
    child.wait()
    assert liveness.proc_state(HOST, child.pid, NOW_US) == "gone"


def test_a_stopped_process_is_stopped_and_still_running():
    child = subprocess.Popen(["sleep", "300"])
    try:
        os.kill(child.pid, signal.SIGSTOP)
        os.waitpid(child.pid, os.WUNTRACED)
        now = int(time.time() * 1e6)
        assert liveness.proc_state(HOST, child.pid, now) == "stopped"
        assert liveness.ending(False, False, HOST, child.pid, None, now) == "running"
    finally:
        child.kill()
        child.wait()


def test_pids_no_kernel_gives_and_other_hosts():
    assert liveness.proc_state(HOST, 0, NOW_US) == "gone"
    assert liveness.proc_state(HOST, liveness.PID_MAX + 1, NOW_US) == "gone"
    assert liveness.proc_state(HOST, None, NOW_US) is None
    assert liveness.proc_state(HOST, True, NOW_US) is None
    assert liveness.proc_state("not-" + HOST, os.getpid(), NOW_US) is None
    assert liveness.proc_state("", os.getpid(), NOW_US) is None


def test_another_hosts_trace_runs_while_it_is_written(tmp_path):
    path = tmp_path / "trace-elsewhere-1-app.pfw"
    path.write_text("[\n")
    now = time.time()
    fresh, stale = int((now - 2) * 1e6), int((now - 2 * liveness.RECENT_S) * 1e6)
    assert liveness.process_state("elsewhere", 1, str(path), fresh, now) == "running"
    # a hand-made or copied file: new, but its times are old
    assert liveness.process_state("elsewhere", 1, str(path), stale, now) == "gone"
    old = now - 2 * liveness.RECENT_S  # its times are new, its file was not written since
    os.utime(path, (old, old))
    assert liveness.process_state("elsewhere", 1, str(path), fresh, now) == "gone"
    assert liveness.process_state("elsewhere", 1, str(tmp_path / "none"), fresh, now) == "gone"
    assert liveness.process_state("elsewhere", 1, str(path), None, now) == "gone"


def test_how_a_trace_ended(tmp_path):
    path = str(tmp_path / "t.pfw")
    open(path, "w").close()
    now = int(time.time() * 1e6)
    assert liveness.ending(True, True, HOST, 0, path, now) == "finalized"
    assert liveness.ending(False, True, HOST, 0, path, now) == "exited"
    assert liveness.ending(False, False, HOST, os.getpid(), path, now) == "running"
    assert liveness.ending(False, False, HOST, 0, path, now) == "killed"
    assert liveness.ending(False, False, HOST, 0, path, None) == "unknown"
    # this host's dead pid wins over recent writes
    assert liveness.ending(False, False, HOST, liveness.PID_MAX + 1, path, now) == "killed"
