"""Measures how far torch.profiler's event times stray from the tracer clock.

torch stamps CPU ops and record_function ranges with raw TSC ticks and, when a
profiling cycle ends, converts them to epoch nanoseconds with a linear fit
(c10::ApproximateClockToUnixTimeConverter: 1001 (tick, CLOCK_REALTIME) pairs
when the profiler is set up, 1001 more when it stops, the median rate and the
median offset).  dftracer's trace_handler then shifts those nanoseconds onto
the tracer clock (tracer clock minus CLOCK_REALTIME, the tightest of five
paired reads) and writes whole microseconds.

Each probe is a record_function range bracketed, in this order, by the tracer
clock (log.get_time(), µs), CLOCK_REALTIME (time.time_ns()), the range, then
CLOCK_REALTIME and the tracer clock again.  A correct, exact conversion puts
the range inside both brackets; the script reports how far outside it ever
lands ("error", 0 when always inside) and the smallest slack, three ways:

  torch vs CLOCK_REALTIME     torch's converted ns against time.time_ns()  (ns)
  tracer vs CLOCK_REALTIME    log.get_time() against time.time_ns()         (µs)
  PP event vs tracer spans    what trace_handler wrote against the get_time()
                              bracket, the comparison the tests make       (µs)

Probes are spread through cycles of a few hundred ms filled with small torch
ops, as in a training step.  --burners N starts N CPU-burning processes for
the run (killed at the end) to load the machine like the shared CI box.

    python3 benchmarks/torch/bench_profiler_clock.py [--cycles 10] [--probes 300] [--burners 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

_tmp = tempfile.mkdtemp(prefix="dft-bench-clock-")
os.environ["DFTRACER_ENABLE"] = "1"
_root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, _root)
sys.path.insert(0, os.path.join(_root, "tests"))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

from dftracer.python import dftracer  # noqa: E402
from dftracer.python.torch import trace_handler  # noqa: E402
from tracefile import find_traces, read_trace  # noqa: E402


def cpu_model() -> str:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def run(cycles: int, probes: int, ops: int) -> Tuple[List[Tuple[int, int, int, int]], Dict[str, Tuple[int, int]], str]:
    log = dftracer.initialize_log(os.path.join(_tmp, "clock.pfw"), None, -1)
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    brackets: List[Tuple[int, int, int, int]] = []  # (g0 µs, w0 ns, w1 ns, g1 µs) per probe
    raw: Dict[str, Tuple[int, int]] = {}  # probe name -> torch's (start_ns, end_ns)

    def on_ready(prof) -> None:
        trace_handler(prof)
        for e in prof.profiler.kineto_results.events():
            if e.name().startswith("probe#"):
                raw[e.name()] = (e.start_ns(), e.end_ns())

    for c in range(cycles):
        with profile(activities=[ProfilerActivity.CPU], on_trace_ready=on_ready):
            for i in range(probes):
                for _ in range(ops):  # small ops between probes, as in a step
                    a @ b
                g0 = log.get_time()
                w0 = time.time_ns()
                with record_function(f"probe#{len(brackets)}"):
                    a @ b
                w1 = time.time_ns()
                g1 = log.get_time()
                brackets.append((g0, w0, w1, g1))
    log.finalize()
    paths = find_traces(_tmp, "clock")
    assert len(paths) == 1, paths
    return brackets, raw, paths[0]


def pct(xs: List[int], p: float) -> int:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p / 100.0 * len(s)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--probes", type=int, default=300)
    ap.add_argument("--ops", type=int, default=20, help="64x64 matmuls between probes")
    ap.add_argument("--burners", type=int, default=0)
    args = ap.parse_args()
    burners = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(args.burners)]
    try:
        t = time.time()
        brackets, raw, path = run(args.cycles, args.probes, args.ops)
        elapsed = time.time() - t
    finally:
        for p in burners:
            p.kill()
            p.wait()
    trace = read_trace(path)
    pp = {e["name"]: e for e in trace.of("X", cat="PP") if e["name"].startswith("probe#")}
    assert len(raw) == len(brackets) == len(pp), (len(raw), len(brackets), len(pp))

    torch_err, torch_slack, ours_err, pp_err, pp_slack = [], [], [], [], []
    for i, (g0, w0, w1, g1) in enumerate(brackets):
        s, e = raw[f"probe#{i}"]
        torch_err.append(max(w0 - s, e - w1, 0))
        torch_slack.append(min(s - w0, w1 - e))
        ours_err.append(max(g0 - w0 // 1000, w1 // 1000 - g1, 0))  # g0 <= w0 <= w1 <= g1
        ev = pp[f"probe#{i}"]
        pp_err.append(max(g0 - ev["ts"], ev["ts"] + ev["dur"] - g1, 0))
        pp_slack.append(min(ev["ts"] - g0, g1 - ev["ts"] - ev["dur"]))

    n = len(brackets)
    print(f"CPU: {cpu_model()} ({os.cpu_count()} cores), torch {torch.__version__}, "
          f"clock source {dftracer_clock_source()}, {args.burners} CPU burners beside it")
    print(f"{n} probes in {args.cycles} profiling cycles, {elapsed:.1f} s")
    print(f"  torch vs CLOCK_REALTIME  error max {max(torch_err)} ns, p99 {pct(torch_err, 99)} ns, "
          f"outside {sum(1 for x in torch_err if x)}/{n}; smallest slack {min(torch_slack)} ns")
    print(f"  tracer vs CLOCK_REALTIME error max {max(ours_err)} µs, outside {sum(1 for x in ours_err if x)}/{n}")
    print(f"  PP event vs tracer span  error max {max(pp_err)} µs, p99 {pct(pp_err, 99)} µs, "
          f"outside {sum(1 for x in pp_err if x)}/{n}; smallest slack {min(pp_slack)} µs")


def dftracer_clock_source() -> str:
    from dftracer import _core

    return _core._clock_info()["source"]


if __name__ == "__main__":
    main()
