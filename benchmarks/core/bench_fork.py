"""What a fork costs a traced parent: stopping the tracer's threads before
fork() and starting them again afterwards (docs/configuration.md, "When
tracing starts and stops").

Run:  python benchmarks/core/bench_fork.py [--forks N]

Prints, measured side by side in one run (each case in a fresh subprocess),
the median over N forks of:
- os.fork() in the parent (the child leaves at once with os._exit), untraced
  and traced with the writer and flusher threads running before each fork:
  the difference holds the stop (and the flush of empty buffers, and a
  larger address space to copy);
- the parent's first event after the fork against a later one: the first
  starts the flusher again (and takes the copy-on-write faults);
- the parent's first flush() after the fork against a later one: the first
  starts the writers again.
Their sum is what tracing adds to a fork.  To isolate the stop and the
restarts, run it with the PYTHONPATH of a build that keeps its threads across
fork() too (the commit before) and compare.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

PHASE = textwrap.dedent(
    r"""
    import json, os, statistics, sys, time
    traced, n, out = sys.argv[1] == "1", int(sys.argv[2]), sys.argv[3]
    if traced:
        from dftracer.python import dftracer
        log = dftracer.initialize_log(os.path.join(out, "t.pfw"), None, -1)
        ev = lambda: log.log_event("e", "c", 1_700_000_000_000_000, 1)
        flush = log.flush
    else:
        ev = flush = lambda: None
    def nthreads():
        return len(os.listdir("/proc/self/task"))
    fork, first_ev, later_ev, first_flush, later_flush, threads = [], [], [], [], [], []
    pn = time.perf_counter_ns
    for i in range(n):
        ev(); flush()  # the writers and the flusher run now
        threads.append(nthreads())
        s = pn(); pid = os.fork(); e = pn()
        if pid == 0:
            os._exit(0)
        fork.append(e - s)
        os.waitpid(pid, 0)
        time.sleep(0.02)  # past the forking thread's grace period
        s = pn(); ev(); e = pn(); first_ev.append(e - s)
        s = pn(); ev(); e = pn(); later_ev.append(e - s)
        s = pn(); flush(); e = pn(); first_flush.append(e - s)
        s = pn(); ev(); flush(); e = pn(); later_flush.append(e - s)
    us = lambda xs: statistics.median(xs) / 1000
    print(json.dumps({"fork": us(fork), "first_ev": us(first_ev), "later_ev": us(later_ev),
                      "first_flush": us(first_flush), "later_flush": us(later_flush),
                      "threads_before_fork": max(threads)}))
    """
)


def run(traced: bool, n: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
        env["DFTRACER_ENABLE"] = "1" if traced else "0"
        out = subprocess.run([sys.executable, "-c", PHASE, "1" if traced else "0", str(n), d],
                             env=env, capture_output=True, text=True, check=True, cwd=d)
        return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--forks", type=int, default=200)
    a = ap.parse_args()
    plain, traced = run(False, a.forks), run(True, a.forks)
    stop = traced["fork"] - plain["fork"]
    flusher = traced["first_ev"] - traced["later_ev"]
    writers = traced["first_flush"] - traced["later_flush"]
    print(f"median over {a.forks} forks, microseconds (parent side)")
    print(f"  os.fork() untraced                       {plain['fork']:8.1f}")
    print(f"  os.fork() traced, {traced['threads_before_fork']} threads before   "
          f"{traced['fork']:8.1f}   (+{stop:.1f})")
    print(f"  first event after the fork               {traced['first_ev']:8.1f}   "
          f"(a later one {traced['later_ev']:.1f}: +{flusher:.1f})")
    print(f"  first flush() after the fork             {traced['first_flush']:8.1f}   "
          f"(a later one {traced['later_flush']:.1f}: +{writers:.1f})")
    print(f"  traced overhead per fork                 {stop + flusher + writers:8.1f}")

if __name__ == "__main__":
    main()
