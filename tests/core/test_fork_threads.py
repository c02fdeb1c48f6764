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

from tracefile import TESTCORE_BUILD, find_traces, read_trace

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


# ---- every helper thread, on every Python (issue 66) ---------------------------
#
# MemoryTracker's watcher (core/memory_watch.c) and the stack sampler
# (hang/sampler.c) are in park.c's table with the flusher and the writers.
# The program forks inside an open MemoryTracker block, beside a running
# sampler (the step boundary of `dftracer run`, through the test extension,
# which needs no torch), with os.fork() and a fork Pool.  It records the
# thread count CPython reads right after each fork (an after-fork hook
# registered before dftracer's), every warning with every warning shown,
# what the children find (no thread of the parent's; a block of their own
# sampled; a sampler of their own at their first step), and that the parent's
# helpers come back once os.fork() returned, without any call of the
# program's: the parent's block then sees a spike that only the watcher can
# see (the kernel's high-water mark is higher already).
HELPERS_PROGRAM = r"""
import json, multiprocessing, os, sys, time, warnings

def nthreads():
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[17])

counts = []
os.register_at_fork(after_in_parent=lambda: counts.append(nthreads()))
out, traced = sys.argv[1], sys.argv[2] == "1"
import _dftracer_testcore as tc
sys.modules["dftracer._core"] = tc
from dftracer.python import dftracer
from dftracer.python.torch import MemoryTracker
log = dftracer.initialize_log(os.path.join(out, "trace.pfw"), out, -1)

def named(name):
    n = 0
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                n += f.read().strip() == name
        except OSError:
            pass  # gone meanwhile
    return n

def wait_for(cond, timeout=10.0):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            return False
        time.sleep(0.005)
    return True

def step():
    if traced:
        tc._sample_step_for_test()

def job(i):
    with MemoryTracker("job") as j:
        step()
    return i + (j.result["peak_rss_bytes"] >= j.result["start_rss_bytes"])

if __name__ == "__main__":
    seen = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):  # training steps: the sampler runs from the first
            step()
            time.sleep(0.02)
        seen["sampler_before"] = named("dft-sampler")
        big = bytearray(300 << 20)
        del big  # the kernel's mark is above anything the block holds
        with MemoryTracker("outer") as m:
            seen["watcher_before"] = named("dft-memwatch")
            statuses = []
            for k in range(3):
                pid = os.fork()
                if pid == 0:
                    bad = []
                    if named("dft-memwatch") or named("dft-sampler"):
                        bad.append("a thread of the parent's")
                    with MemoryTracker("child") as c:
                        if named("dft-memwatch") != 1:
                            bad.append("no watcher for the child's block")
                    if not c.result["peak_rss_bytes"] >= c.result["end_rss_bytes"] > 0:
                        bad.append(f"child's block {c.result}")
                    inherited = m.stop()  # the parent's block, ended in the child
                    if not inherited["peak_rss_bytes"] >= inherited["end_rss_bytes"] > 0:
                        bad.append(f"inherited block {inherited}")
                    if traced:
                        step()
                        if not wait_for(lambda: named("dft-sampler") == 1):
                            bad.append("no sampler at the child's first step")
                    if bad:
                        os.write(2, f"child {k}: {bad}\n".encode())
                    os._exit(3 if bad else 0)
                statuses.append(os.waitpid(pid, 0)[1])
                if k == 0:
                    # back without a call of the program's (os.fork's return)
                    seen["watcher_back"] = wait_for(lambda: named("dft-memwatch") == 1)
                    seen["sampler_back"] = wait_for(lambda: named("dft-sampler") == 1)
            with multiprocessing.get_context("fork").Pool(2) as pool:
                total = sum(pool.map(job, range(8)))
            x = bytearray(150 << 20)
            t = time.process_time()
            while time.process_time() - t < 0.3:  # many of the watcher's 2 ms
                x[::4096] = b"y" * len(x[::4096])
            del x
        step()
    r = m.result
    warned = [str(w.message) for w in caught if "multi-threaded" in str(w.message)]
    print(json.dumps({"counts": counts, "warned": warned, "total": total, "statuses": statuses,
                      "seen": seen, "spike": r["peak_rss_bytes"] - r["start_rss_bytes"]}),
          flush=True)
"""


def _pythons():
    """{"3.x": interpreter} for the Pythons here that can import this build of
    dftracer and the test extension (an in-place build names the version, so
    one tree holds several): the running one, and python3.10-3.13 on PATH or
    under pyenv."""
    import glob
    import shutil

    found = {f"{sys.version_info[0]}.{sys.version_info[1]}": sys.executable}
    for minor in (10, 11, 12, 13):
        v = f"3.{minor}"
        if v in found:
            continue
        cands = [shutil.which(f"python{v}")] + sorted(glob.glob(os.path.expanduser(
            f"~/.pyenv/versions/{v}.*/bin/python{v}")))
        for exe in filter(None, cands):
            probe = subprocess.run([exe, "-c", "import dftracer._core, _dftracer_testcore"],
                                   capture_output=True, text=True, timeout=60)
            if probe.returncode == 0:
                found[v] = exe
                break
    return found


_PYTHONS = {}


def _python(version):
    if not _PYTHONS:
        _PYTHONS.update(_pythons())
    exe = _PYTHONS.get(version)
    if exe is None:
        pytest.skip(f"no Python {version} with this build of dftracer and _dftracer_testcore "
                    f"(build both in place with it: {TESTCORE_BUILD})")
    return exe


@pytest.mark.no_asan  # forks
@pytest.mark.parametrize("version", ["3.10", "3.11", "3.12", "3.13"])
def test_forks_beside_the_memory_watcher_and_the_sampler(tmp_path, version):
    exe = _python(version)
    results = {}
    for traced in ("0", "1"):
        out = tmp_path / traced
        out.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
        env["DFTRACER_ENABLE"] = traced
        proc = subprocess.run([exe, "-c", HELPERS_PROGRAM, str(out), traced], env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr and "dftracer:" not in proc.stderr, proc.stderr
        assert "multi-threaded" not in proc.stderr, proc.stderr
        results[traced] = r = json.loads(proc.stdout.strip().splitlines()[-1])
        # 3 os.fork() and the pool's 2 workers, each seen with the one thread
        assert r["counts"] == [1] * 5, r
        assert r["warned"] == [], r
        assert r["statuses"] == [0, 0, 0], (r, proc.stderr)  # each child's own checks
        assert r["total"] == sum(range(8)) + 8, r
        seen = r["seen"]
        assert seen["watcher_before"] == 1 and seen["watcher_back"], r
        # 150 MiB the kernel's mark cannot show: the watcher sampled it after the forks
        assert r["spike"] >= 120 << 20, r
        if traced == "1":
            assert seen["sampler_before"] == 1 and seen["sampler_back"], r
    plain, traced = results["0"], results["1"]
    assert plain["counts"] == traced["counts"] and plain["warned"] == traced["warned"]
    files = find_traces(str(tmp_path / "1"))
    assert len(files) == 1 + 3 + 2, files
    traces = [read_trace(f, require_end=False) for f in files]
    outer = [e for t in traces for e in t.of("X", name="memory") if e["args"]["tracker"] == "outer"]
    assert len(outer) == 1 + 3, outer  # the parent's, and each child's ending of its copy
    jobs = [e for t in traces for e in t.of("X", name="memory") if e["args"]["tracker"] == "job"]
    assert len(jobs) == 8


# The same under `dftracer run` with torch: training steps start the real
# sampler (torch/autotrace_steps.c), the program forks inside a MemoryTracker
# block, and the steps after the fork are sampled again.  Untraced and
# traced must warn the same (with every warning shown) and print the same.
# Under `dftracer run` dftracer's after-fork hook is registered before the
# program's, so on 3.10 and 3.11 (no warning: nothing counts there) the
# program's hook sees the helpers already back; 3.12 and 3.13 count where
# the warning does.
TRAIN_PROGRAM = r"""
import json, os, sys, time, warnings

def nthreads():
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[17])

counts = []
os.register_at_fork(after_in_parent=lambda: counts.append(nthreads()))
import torch
from dftracer.python.torch import MemoryTracker
torch.set_num_threads(1)  # no intra-op pool: one thread untraced
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)

def sampler():
    n = 0
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                n += f.read().strip() == "dft-sampler"
        except OSError:
            pass
    return n

def train(n):
    for _ in range(n):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        time.sleep(0.03)  # untraced time: the sampler's

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    train(6)
    before = sampler()
    with MemoryTracker("fork") as m:
        pid = os.fork()
        if pid == 0:
            train(3)
            os._exit(0)
        status = os.waitpid(pid, 0)[1]
    train(6)
warned = [str(w.message) for w in caught if "multi-threaded" in str(w.message)]
print(json.dumps({"counts": counts, "warned": warned, "status": status, "sampler": before,
                  "peak_ok": m.result["peak_rss_bytes"] >= m.result["start_rss_bytes"]}))
"""


@pytest.mark.no_asan  # forks
@pytest.mark.parametrize("version", ["3.10", "3.11", "3.12", "3.13"])
def test_fork_inside_a_memory_tracker_after_training_steps_under_dftracer_run(tmp_path, version):
    exe = _python(version)
    if subprocess.run([exe, "-c", "import torch"], capture_output=True).returncode != 0:
        pytest.skip(f"no torch for Python {version}")
    prog = tmp_path / "train.py"
    prog.write_text(TRAIN_PROGRAM)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    results = []
    for cmd in ([exe, str(prog)],
                [exe, "-m", "dftracer", "run", "-q", "--log-file", "runs/trace", "--", exe,
                 str(prog)]):
        proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert "multi-threaded" not in proc.stderr, proc.stderr
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    plain, traced = results
    assert plain["counts"] == [1], results
    if version >= "3.12":
        assert traced["counts"] == [1], results
    assert plain["warned"] == traced["warned"] == [], results
    assert plain["status"] == traced["status"] == 0 and traced["peak_ok"], results
    assert plain["sampler"] == 0 and traced["sampler"] == 1, results
    files = find_traces(str(tmp_path / "runs"))
    assert len(files) == 2, files
    (parent,) = [t for t in map(read_trace, files) if t.of("X", name="memory")]
    (fork,) = parent.of("X", name="memory")
    after = [e for e in parent.of("X", cat="pipeline", name="iteration")
             if e["ts"] >= fork["ts"] + fork["dur"]]
    assert len(after) >= 4, after
    # the sampler back in the parent: the steps after the fork name their sleep
    assert sum("sampled" in e["args"] for e in after) >= len(after) // 2, after
