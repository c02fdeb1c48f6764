"""The acceptance loop of issue 35: what the zero-code torch events add to a
plain training loop with short steps, side by side in one run.

The loop (run as a child script): a DataLoader without workers over a
TensorDataset, batch 16, a 6-layer MLP of width 32, SGD,
torch.set_num_threads(1), about 0.5 ms a step; its events per step are
`iteration`, `fetch`, 16 `item`, `forward`, `backward`, `optimizer.step`.
It runs under `dftracer run --no-torch` (off) and `dftracer run` (on), R
alternating runs each; each run reports the median CPU time (process CPU
clock) per step over its steps after a warm-up.  Printed: the median over
runs of each, the ratio on/off, and the events per step of the last `on`
run, counted from its trace; also the training thread's own CPU time
(time.thread_time), so that what the other threads (the tracer's writer)
add shows apart, the share of steps in which the training thread took a
page fault (docs/performance.md, "Page faults"), and the per-pair ratios
(their spread is the machine's noise); and the stack sampler thread's
own CPU time per step (its schedstat run time over the `on` run's steps).

    PYTHONPATH=$PWD python benchmarks/torch/bench_autotrace_loop.py [--runs 7] [--steps 600] \
        [--env NAME=VALUE ...] [--without PART,...]

--without takes parts of the torch events (dftracer/_autotrace/hooks.py:
steps, modules, optimizer, dataloader, comm, ddp, checkpoint) off again in
the `on` runs right after torch's import: the process imports and installs
what `dftracer run` does, and runs the loop without those parts' hooks, so
that what each part costs per step, and what installing them costs, show
apart.

Target: on/off <= 1.03 with all five kinds of events present.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

LOOP = r'''
import resource, sys, time, statistics
import os
import torch
from torch.utils.data import DataLoader, TensorDataset
if os.environ.get("BENCH_WITHOUT"):  # --without: these parts off again
    from dftracer._autotrace import _base
    for name in os.environ["BENCH_WITHOUT"].split(","):
        _base.part(name).uninstall()
torch.set_num_threads(1)
torch.manual_seed(0)
steps = int(sys.argv[1])
layers = []
for _ in range(6):
    layers += [torch.nn.Linear(32, 32), torch.nn.ReLU()]
model = torch.nn.Sequential(*layers)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = torch.nn.functional.mse_loss
data = TensorDataset(torch.randn(16 * 64, 32), torch.randn(16 * 64, 32))
loader = DataLoader(data, batch_size=16, shuffle=False)
per_step, per_step_thread, faulted = [], [], []
usage, THREAD = resource.getrusage, resource.RUSAGE_THREAD
done = 0
while done < steps:
    it = iter(loader)
    while done < steps:
        f0 = usage(THREAD).ru_minflt
        c0, h0 = time.process_time_ns(), time.thread_time_ns()
        try:
            x, y = next(it)
        except StopIteration:
            break
        opt.zero_grad()
        out = model(x)
        loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        per_step_thread.append(time.thread_time_ns() - h0)
        per_step.append(time.process_time_ns() - c0)
        faulted.append(usage(THREAD).ru_minflt > f0)
        done += 1
warm = len(per_step) // 10
sampler_ns = 0  # the stack sampler's thread (hang/sampler.c), its whole life
for t in os.listdir("/proc/self/task"):
    try:
        with open(f"/proc/self/task/{t}/comm") as f:
            if f.read().strip() != "dft-sampler":
                continue
        with open(f"/proc/self/task/{t}/schedstat") as f:
            sampler_ns += int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
print("SAMPLER_NS", sampler_ns, len(per_step))
print("CPU_US", statistics.median(per_step[warm:]) / 1000.0,
      statistics.median(per_step_thread[warm:]) / 1000.0,
      sum(faulted[warm:]) / len(faulted[warm:]))
'''


def cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} CPUs"
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs"


SAMPLER: List[float] = []  # the `on` runs' stack-sampler CPU per step (us)


def run(script: str, steps: int, torch_on: bool, data_dir: str,
        extra_env: Dict[str, str], without: str = "") -> Tuple[float, float, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env.update(extra_env)
    env.pop("BENCH_WITHOUT", None)
    if torch_on and without:
        env["BENCH_WITHOUT"] = without
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "dftracer", "run", "-q", "--log-file", os.path.join(data_dir, "trace")]
    if not torch_on:
        cmd.append("--no-torch")
    cmd += ["--", sys.executable, script, str(steps)]
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, check=False)
    for line in out.stdout.splitlines():
        if line.startswith("SAMPLER_NS ") and torch_on:
            ns, n = map(int, line.split()[1:3])
            SAMPLER.append(ns / 1000.0 / max(1, n))
    for line in out.stdout.splitlines():
        if line.startswith("CPU_US "):
            return float(line.split()[1]), float(line.split()[2]), float(line.split()[3])
    raise SystemExit(f"run failed ({out.returncode}): {out.stderr[-2000:]}")


def events_per_step(data_dir: str) -> "collections.Counter[str]":
    counts: "collections.Counter[str]" = collections.Counter()
    for path in glob.glob(os.path.join(data_dir, "**", "*.pfw*"), recursive=True):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            for line in f:
                line = line.strip().rstrip(",")
                if not line.startswith("{"):
                    continue
                ev = json.loads(line)
                if ev.get("ph") == "X" and ev.get("cat") in ("pipeline", "dataloader", "data",
                                                            "compute"):
                    counts[ev["name"]] += 1
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="set for both modes (e.g. DFTRACER_TRACE_COMPRESSION=0)")
    ap.add_argument("--without", default="", metavar="PART,...",
                    help="parts of the torch events taken off again in the `on` runs "
                         "(steps, modules, optimizer, dataloader, comm, ddp, checkpoint)")
    a = ap.parse_args()
    parts = ("steps", "modules", "optimizer", "dataloader", "comm", "ddp", "checkpoint")
    unknown = [p for p in a.without.split(",") if p and p not in parts]
    if unknown:
        ap.error(f"--without: no part named {', '.join(unknown)} (parts: {', '.join(parts)})")
    extra = dict(kv.split("=", 1) for kv in a.env)
    with tempfile.TemporaryDirectory(prefix="bench-loop-") as d:
        script = os.path.join(d, "loop.py")
        with open(script, "w") as f:
            f.write(LOOP)
        med: Dict[str, List[Tuple[float, float, float]]] = {"off": [], "on": []}
        last_on = ""
        for r in range(a.runs):
            for mode in ("off", "on"):
                out = os.path.join(d, f"{mode}{r}")
                os.mkdir(out)
                med[mode].append(run(script, a.steps, mode == "on", out, extra, a.without))
                # each run as it ends, so that a run cut short keeps what it measured
                print(f"  run {r + 1} {mode}: {med[mode][-1][0]:.1f} us "
                      f"(training thread {med[mode][-1][1]:.1f})", flush=True)
                if mode == "on":
                    last_on = out
        counts = events_per_step(last_on)
    off = statistics.median(r[0] for r in med["off"])
    on = statistics.median(r[0] for r in med["on"])
    off_t = statistics.median(r[1] for r in med["off"])
    on_t = statistics.median(r[1] for r in med["on"])
    off_f = statistics.median(r[2] for r in med["off"])
    on_f = statistics.median(r[2] for r in med["on"])
    pairs = [b[0] / a[0] for a, b in zip(med["off"], med["on"])]
    steps = counts.get("optimizer.step", 0) or 1
    print(f"acceptance loop ({a.runs} alternating runs of {a.steps} steps; {cpu()}; "
          f"Python {sys.version.split()[0]}{''.join(' ' + kv for kv in a.env)}"
          f"{'; on without ' + a.without if a.without else ''}):")
    print(f"  CPU per step, median over runs: --no-torch {off:.1f} us, torch events on "
          f"{on:.1f} us; on/off {on / off:.3f} (+{on - off:.1f} us)")
    print(f"  the training thread alone: --no-torch {off_t:.1f} us, on {on_t:.1f} us "
          f"(+{on_t - off_t:.1f} us); the other threads (the writer's): "
          f"+{(on - on_t) - (off - off_t):.1f} us")
    print(f"  steps in which the training thread took a page fault: --no-torch {off_f:.1%}, "
          f"on {on_f:.1%}")
    print(f"  runs off: {' '.join(f'{r[0]:.0f}' for r in med['off'])}")
    print(f"  runs on:  {' '.join(f'{r[0]:.0f}' for r in med['on'])}")
    print(f"  per-pair on/off: {' '.join(f'{r:.3f}' for r in pairs)} "
          f"(median {statistics.median(pairs):.3f})")
    if SAMPLER:
        sp = statistics.median(SAMPLER)
        print(f"  the stack sampler's thread (DFTRACER_SAMPLE_HZ, default 100), its CPU over the "
              f"run per step: {sp:.2f} us, {100 * sp / on:.2f} % of a step's CPU "
              f"(runs: {' '.join(f'{x:.2f}' for x in SAMPLER)})")
    print("  events of the last `on` run per optimizer step: " +
          ", ".join(f"{k} {v / steps:.2f}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()
