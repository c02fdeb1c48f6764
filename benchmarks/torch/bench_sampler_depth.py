"""What the stack sampler (src/hang/sampler.c) costs, and what it names, as
the step thread's stack gets deeper (issue 66).

tests/tools/deep_steps_prog.py (each step: 3 ms in a shallow function, then
24 ms DEPTH frames deeper, then a tiny forward/backward/SGD step) runs under
`dftracer run` at each depth, R runs each; a wrapper reads the sampler
thread's own run time (`dft-sampler`, its schedstat) as the program ends.
Printed per depth (medians over the runs): the sampler's CPU per second of
the loop (its first iteration's start to its last's end) and per stack
read (where the build's iterations count them, `sampled_n`), the stacks read, and from the trace's
`iteration` events the sums of `sampled_dropped`, `sampled_cut` and
`sampled_missed` and the share of the iterations with a place that name
the deep function.

    PYTHONPATH=$PWD python benchmarks/torch/bench_sampler_depth.py [--runs 3] \
        [--depths 0,100,1000,2500] [--iters 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROG = os.path.join(ROOT, "tests", "tools", "deep_steps_prog.py")
sys.path.insert(0, os.path.join(ROOT, "tests"))

from tracefile import find_traces, read_trace  # noqa: E402

WRAPPER = r'''
import os, runpy, sys, time
sys.argv = sys.argv[1:]
t0 = time.perf_counter()
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    wall = time.perf_counter() - t0
    ns = 0
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                if f.read().strip() != "dft-sampler":
                    continue
            with open(f"/proc/self/task/{t}/schedstat") as f:
                ns += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    print("SAMPLER", ns, wall, file=sys.stderr)
'''


def one(depth: int, iters: int) -> Dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
        proc = subprocess.run(
            [sys.executable, "-m", "dftracer", "run", "-q", "--log-file", "runs/trace", "--",
             sys.executable, "-c", WRAPPER, PROG, str(depth), str(iters)],
            cwd=tmp, env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            sys.exit(proc.stdout + proc.stderr)
        line = [ln for ln in proc.stderr.splitlines() if ln.startswith("SAMPLER ")][-1]
        ns, wall = int(line.split()[1]), float(line.split()[2])
        (path,) = find_traces(os.path.join(tmp, "runs"))
        events = read_trace(path).of("X", cat="pipeline", name="iteration")
        its = [e["args"] for e in events]
        # the sampler runs from the first step on: its share of the loop's time
        loop_s = (max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)) / 1e6
    sums = {k: sum(a.get(f"sampled_{k}", 0) for a in its) for k in ("n", "dropped", "cut",
                                                                    "missed")}
    named = [a for a in its if "sampled" in a]
    deep = [a for a in named if a["sampled"].endswith("_work > wait")]
    return {"cpu_pct": ns / 1e9 / min(loop_s, wall) * 100, "us_per_read": ns / 1e3 / max(sums["n"], 1),
            **sums, "deep_share": len(deep) / max(len(named), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--depths", default="0,100,1000,2500")
    ap.add_argument("--iters", type=int, default=100)
    args = ap.parse_args()
    print("depth  cpu %   us/read  reads  dropped  cut  missed  deep named")
    for depth in (int(d) for d in args.depths.split(",")):
        runs: List[Dict[str, float]] = [one(depth, args.iters) for _ in range(args.runs)]
        m = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"{depth:5d}  {m['cpu_pct']:5.2f}  {m['us_per_read']:8.1f}  {m['n']:5.0f}  "
              f"{m['dropped']:7.0f}  {m['cut']:4.0f}  {m['missed']:6.0f}  "
              f"{m['deep_share'] * 100:5.0f} %")


if __name__ == "__main__":
    main()
