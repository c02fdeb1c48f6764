"""Where the acceptance loop's added CPU time goes, by time sampling: the
loop of bench_autotrace_loop.py under `dftracer run --no-torch` (off) and
`dftracer run` (on), each whole run sampled by `perf record -e cpu-clock`
(a software clock: it needs no hardware counters, which VMs often lack).

Printed: the training thread's samples in each mode, and what the events
added to them per library (dftracer's `_core`, the interpreter, torch, libc)
and per function, as a share of the `off` run's training-thread samples.
Unlike an instruction count, this includes the time the program's own code
loses to cache misses the events cause.  The pairs alternate and their
samples are added up; each pair's ratio is printed too: a shared host that
slows one run slows all of its functions alike, which shows there as a pair
far from the others.  A function's difference of under about
3 * sqrt(its samples) is sampling noise.

    PYTHONPATH=$PWD python benchmarks/torch/bench_autotrace_profile.py [--pairs 3] [--steps 10000] [--top 25]

Needs perf (linux-perf) and kernel.perf_event_paranoid <= 2.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Counter, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_autotrace_loop import LOOP, ROOT, cpu  # noqa: E402  (the same loop)

SAMPLE = re.compile(r"\s*(\d+)\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$")


def profile(mode: str, steps: int, tmp: str, freq: int) -> Tuple[int, Counter[str], Counter[str]]:
    """(training-thread samples, its samples per library, per function)."""
    script = os.path.join(tmp, "loop.py")
    with open(script, "w") as f:
        f.write(LOOP)
    data = os.path.join(tmp, f"{mode}.data")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    cmd = ["perf", "record", "-q", "-F", str(freq), "-e", "cpu-clock", "-o", data, "--",
           sys.executable, "-m", "dftracer", "run", "-q", "--log-file", os.path.join(tmp, f"trace-{mode}")]
    if mode == "off":
        cmd.append("--no-torch")
    cmd += ["--", sys.executable, script, str(steps)]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"{mode}: perf record failed ({run.returncode}): {run.stderr[-2000:]}")
    text = subprocess.run(["perf", "script", "-i", data, "-F", "tid,ip,sym,dso"],
                          capture_output=True, text=True, check=True).stdout
    per_thread: Counter[str] = collections.Counter()
    rows = []
    for ln in text.splitlines():
        m = SAMPLE.match(ln)
        if m:
            tid, sym, dso = m.groups()
            per_thread[tid] += 1
            rows.append((tid, re.sub(r"\+0x[0-9a-f]+$", "", sym), os.path.basename(dso)))
    if not per_thread:
        sys.exit(f"{mode}: perf recorded no samples")
    main = per_thread.most_common(1)[0][0]  # the training loop's thread
    libs: Counter[str] = collections.Counter()
    funcs: Counter[str] = collections.Counter()
    for tid, sym, lib in rows:
        if tid == main:
            libs[lib] += 1
            funcs[f"{sym} ({lib})"] += 1
    return per_thread[main], libs, funcs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3, help="alternating pairs of runs (default 3)")
    ap.add_argument("--steps", type=int, default=10000, help="steps a run (default 10000)")
    ap.add_argument("--freq", type=int, default=2999, help="samples a second (default 2999)")
    ap.add_argument("--top", type=int, default=25, help="functions listed (default 25)")
    args = ap.parse_args()
    if min(args.pairs, args.steps, args.freq) < 1:
        ap.error("--pairs, --steps and --freq must be at least 1")
    if not shutil.which("perf"):
        sys.exit("perf not found: install linux-perf")
    n_off = n_on = 0
    lib_off: Counter[str] = collections.Counter()
    lib_on: Counter[str] = collections.Counter()
    fn_off: Counter[str] = collections.Counter()
    fn_on: Counter[str] = collections.Counter()
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.pairs):
            a, la, fa = profile("off", args.steps, tmp, args.freq)
            b, lb, fb = profile("on", args.steps, tmp, args.freq)
            n_off, n_on = n_off + a, n_on + b
            lib_off.update(la), lib_on.update(lb), fn_off.update(fa), fn_on.update(fb)
            ratios.append(b / a)
    print(f"acceptance loop, {args.pairs} alternating pairs of {args.steps} steps a run, perf "
          f"cpu-clock at {args.freq} Hz, the training thread ({cpu()}):")
    print(f"  samples: --no-torch {n_off}, torch events on {n_on}: {n_on / n_off:.3f}x "
          f"({(n_on - n_off) / n_off:+.2%}); per pair " + " ".join(f"{r:.3f}" for r in ratios))
    print("  added, per library (share of the --no-torch run's samples):")
    for lib in sorted(set(lib_off) | set(lib_on), key=lambda k: lib_off[k] - lib_on[k]):
        d = lib_on[lib] - lib_off[lib]
        if abs(d) * 1000 >= n_off:  # 0.1 % and more
            print(f"    {d:+6d} {d / n_off:+.2%}  {lib} ({lib_off[lib]} -> {lib_on[lib]})")
    print(f"  added, per function (the {args.top} largest):")
    for fn in sorted(set(fn_off) | set(fn_on), key=lambda k: fn_off[k] - fn_on[k])[:args.top]:
        d = fn_on[fn] - fn_off[fn]
        print(f"    {d:+6d} {d / n_off:+.2%}  {fn[:110]} ({fn_off[fn]} -> {fn_on[fn]})")


if __name__ == "__main__":
    main()
