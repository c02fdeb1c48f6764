"""A traced program has no more threads at fork() than untraced (issue 25).

CPython 3.12+ warns in os.fork() ("This process (pid=...) is multi-threaded,
use of fork() may lead to deadlocks in the child.") when the parent counts
more than one thread in /proc/self/stat after fork() returns.  dftracer's
writer and flusher threads are stopped before every fork and started again
when next needed (core/park.c).  These tests count threads the way CPython
does, from an after-fork hook in the parent, on every Python; on 3.12+ they
also check that no warning is issued.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tracefile import find_traces, read_trace

ENABLED = {"DFTRACER_ENABLE": "1"}

# Forks with os.fork() and a fork Pool, recording in the parent the thread
# count CPython reads (field 20 of /proc/self/stat) right after each fork,
# and every warning.  Prints one JSON line.
PROGRAM = r"""
import json, multiprocessing, os, sys, threading, time, warnings

def nthreads():
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[17])

counts = []
os.register_at_fork(after_in_parent=lambda: counts.append(nthreads()))
out, data_dir = sys.argv[1], sys.argv[2]
from dftracer.python import dftracer, dft_fn
log = dftracer.initialize_log(os.path.join(out, "trace.pfw"), data_dir or out, -1)
work = dft_fn("work").log(lambda i: i)

def job(i):
    work(i)
    with open(os.path.join(out, f"data{i}"), "w") as f:
        f.write("x")
    return i

def gone(native_id):
    # Thread.join() returns before the kernel has let go of the thread
    while os.path.exists(f"/proc/self/task/{native_id}"):
        time.sleep(0.001)

if __name__ == "__main__":
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(2000):
            work(i)
        log.log_event("many", "c", log.get_time(), 1, int_args={"k": 1})
        # The control: a thread of the program's own is counted (and warned about).
        t = threading.Thread(target=time.sleep, args=(0.5,))
        t.start()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        t.join()
        gone(t.native_id)
        control = counts[:]
        del counts[:]
        for k in range(3):
            pid = os.fork()
            if pid == 0:
                job(k)
                os._exit(0)
            os.waitpid(pid, 0)
            time.sleep(0.02)  # past the forking thread's grace: the flusher comes back
            work(k)
        with multiprocessing.get_context("fork").Pool(2) as pool:
            total = sum(pool.map(job, range(8)))
    warned = [str(w.message) for w in caught if "multi-threaded" in str(w.message)]
    print(json.dumps({"counts": counts, "control": control, "warned": warned,
                      "total": total}), flush=True)
"""


def run(tmp_path, traced: bool, data_dir: str) -> dict:
    out = tmp_path / ("traced" if traced else "untraced")
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env["DFTRACER_ENABLE"] = "1" if traced else "0"
    proc = subprocess.run([sys.executable, "-c", PROGRAM, str(out), data_dir], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "dftracer:" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.no_asan  # forks (see test_core.py)
@pytest.mark.parametrize("data_dir", ["", "all"])
def test_no_more_threads_at_fork_than_untraced(tmp_path, data_dir):
    # With DFTRACER_DATA_DIR=all, reading /proc/self/stat right after fork() is
    # itself a traced event of the forking thread: it must not start a thread.
    plain, traced = run(tmp_path, False, data_dir), run(tmp_path, True, data_dir)
    assert plain["total"] == traced["total"] == 28
    # 3 os.fork() and the pool's 2 workers, each seen with one thread, traced or not.
    assert plain["counts"] == traced["counts"] == [1] * 5, (plain, traced)
    assert plain["control"] == traced["control"] == [2]  # the count does see threads
    untraced_warnings = plain["warned"]
    if sys.version_info >= (3, 12):
        assert len(untraced_warnings) == 1  # the control's own thread
    assert len(traced["warned"]) == len(untraced_warnings), traced["warned"]
    # Nothing lost: the parent's file and each child's file are whole traces,
    # each with its `end` (the pool's workers end by SIGTERM, leaving `with`:
    # the flusher finalizes their traces before the default action).
    files = find_traces(str(tmp_path / "traced"))
    assert len(files) == 1 + 3 + 2 + 1, files
    traces = [read_trace(f) for f in files]
    (main,) = [t for t in traces if t.of("X", name="many")]
    assert len(read_trace(main.path).of("X", cat="work")) == 2000 + 3
    assert sum(len(t.of("X", cat="work")) for t in traces if t is not main) == 3 + 8


@pytest.mark.no_asan  # forks
def test_flusher_comes_back_after_a_fork(tmp_path):
    """After a fork the parent's flusher starts again at its next event: an
    idle parent killed after the interval keeps every event it logged."""
    code = f"""
        import os, time
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        time.sleep(0.05)
        for i in range(1000):
            log.log_event("after", "c", log.get_time(), 1)
        print("ready", flush=True)
        time.sleep(60)
        """
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env.update(ENABLED)
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(1.0 + 0.8)  # the default interval (1 s), and time to write
        threads = len(os.listdir(f"/proc/{proc.pid}/task"))
    finally:
        proc.kill()
        proc.wait()
    assert threads >= 2  # the main thread and the flusher (and the writers it woke)
    mine = [f for f in find_traces(str(tmp_path)) if f"-{proc.pid}-app" in f]
    tr = read_trace(mine[0], require_end=False, torn_tail=True)  # a kill may tear the last member
    assert len(tr.of("X", name="after")) == 1000
    assert not tr.of("X", name="end")


@pytest.mark.no_asan  # forks
def test_threads_logging_through_many_forks_lose_nothing(tmp_path):
    """Other threads keep logging while the main thread forks again and again:
    every event of every thread is in the parent's file."""
    code = f"""
        import os, threading
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
        def work(k):
            for i in range(20000):
                log.log_event("t%d" % k, "c", log.get_time(), 1)
        ts = [threading.Thread(target=work, args=(k,)) for k in range(2)]
        for t in ts: t.start()
        for k in range(20):
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            log.log_event("main", "c", log.get_time(), 1)
        for t in ts: t.join()
        print(os.getpid())
        """
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env.update(ENABLED)
    # The program's own threads make Python 3.12+ warn at each fork, traced or not.
    proc = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c",
                           textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    pid = proc.stdout.strip()
    files = find_traces(str(tmp_path))
    assert len(files) == 21
    (parent,) = [f for f in files if f"-{pid}-app" in f]
    tr = read_trace(parent)
    assert len(tr.of("X", name="t0")) == len(tr.of("X", name="t1")) == 20000
    assert len(tr.of("X", name="main")) == 20
    for f in files:
        read_trace(f)  # each child: its header and end


@pytest.mark.no_asan  # forks
def test_dataloader_workers_fork_with_no_tracer_thread(tmp_path):
    pytest.importorskip("torch")
    code = r"""
import json, os, sys
counts = []
def nthreads():
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[17])
os.register_at_fork(after_in_parent=lambda: counts.append(nthreads()))
import torch
from torch.utils.data import DataLoader, Dataset
if os.environ["DFTRACER_ENABLE"] == "1":
    from dftracer.python import dftracer
    dftracer.initialize_log(os.path.join(sys.argv[1], "trace.pfw"))
class DS(Dataset):
    def __len__(self): return 16
    def __getitem__(self, i): return i
dl = DataLoader(DS(), batch_size=4, num_workers=2, multiprocessing_context="fork")
print(json.dumps({"sum": sum(int(b.sum()) for b in dl), "counts": counts}))
"""
    results = []
    for traced in ("0", "1"):
        out = tmp_path / traced
        out.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
        env["DFTRACER_ENABLE"] = traced
        proc = subprocess.run([sys.executable, "-c", code, str(out)], env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        if traced == "1":
            assert "multi-threaded" not in proc.stderr, proc.stderr
            assert len(find_traces(str(out))) == 3
    plain, traced = results
    assert plain["sum"] == traced["sum"] == sum(range(16))
    assert len(traced["counts"]) == 2 and traced["counts"] == plain["counts"], results
