"""Times dftracer's torch.profiler trace_handler against the alternatives.

One profile of a small MLP training loop (record_shapes and profile_memory on)
is handled, inside its on_trace_ready callback, three ways in turn:

1. dftracer.python.torch.trace_handler (the C loop over kineto_results);
2. a pure-Python handler doing what pydftracer's does: one log_event per
   FunctionEvent of prof.events();
3. prof.export_chrome_trace("x.json.gz").

Fairness: (1) never calls prof.events(), so (2) pays torch's FunctionEvent
parsing (the first events() call builds and caches the list) exactly as the
pydftracer handler does; (3) uses Kineto's own writer, which does not use that
cache.  Each of (1) and (2) is timed up to the end of a flush, so compression
and the write are included; the bytes each adds to the trace file are measured
after its flush.

    python3 benchmarks/bench_trace_handler.py [--steps N] [--min-events N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any, Dict

_tmp = tempfile.mkdtemp(prefix="dft-bench-torch-")
os.environ["DFTRACER_ENABLE"] = "1"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from dftracer.python import dftracer  # noqa: E402
from dftracer.python.torch import trace_handler  # noqa: E402


def python_handler(prof: Any, log: Any) -> None:
    """What pydftracer's trace_handler does, with the clock fix applied."""
    base_us = prof.profiler.kineto_results.trace_start_ns() // 1000
    log.enter_event()
    for event in prof.events():
        log.log_event(
            name=event.key,
            cat="PP",
            start_time=base_us + int(event.time_range.start),
            duration=int(event.time_range.elapsed_us()),
            int_args={
                "device": int(event.device_type),
                "cpu_memory": event.cpu_memory_usage,
                "is_remote": int(event.is_remote),
                "device_memory_usage": event.device_memory_usage,
                "input_size": sum(len(s) for s in event.input_shapes) if event.input_shapes else 0,
            },
            float_args={
                "total_cpu_percent": float(event.total_cpu_percent),
                "total_device_percent": float(event.total_device_percent),
            },
        )
    log.exit_event()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--min-events", type=int, default=50_000)
    opts = ap.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[m for _ in range(6) for m in (torch.nn.Linear(64, 64), torch.nn.ReLU())])
    optim = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randn(32, 64)

    log = dftracer.initialize_log(os.path.join(_tmp, "bench.pfw"), None, -1)
    path = log.trace_path
    results: Dict[str, float] = {}

    def size_now() -> int:
        log.flush()
        return os.path.getsize(path)

    def on_ready(prof: Any) -> None:
        results["kineto_events"] = len(prof.profiler.kineto_results.events())
        before = size_now()
        t0 = time.perf_counter()
        trace_handler(prof)
        results["ours_handler_s"] = time.perf_counter() - t0
        results["ours_s"] = (size_now(), time.perf_counter() - t0)[1]
        mid = os.path.getsize(path)
        results["ours_bytes"] = mid - before

        t0 = time.perf_counter()
        python_handler(prof, log)
        end = size_now()
        results["python_s"] = time.perf_counter() - t0
        results["python_bytes"] = end - mid
        results["profiler_events"] = len(prof.events())

        out = os.path.join(_tmp, "x.json.gz")
        t0 = time.perf_counter()
        prof.export_chrome_trace(out)
        results["export_s"] = time.perf_counter() - t0
        results["export_bytes"] = os.path.getsize(out)

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True,
                 on_trace_ready=on_ready):
        for _ in range(opts.steps):
            optim.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optim.step()
    log.finalize()

    r = results
    print(f"torch {torch.__version__}; {opts.steps} steps; {r['kineto_events']:.0f} Kineto records, "
          f"{r['profiler_events']:.0f} profiler events (prof.events())")
    if r["profiler_events"] < opts.min_events:
        print(f"WARNING: fewer than {opts.min_events} events; raise --steps")
    print(f"{'':34s}{'seconds':>10s}{'bytes':>14s}")
    print(f"{'dftracer trace_handler (C)':34s}{r['ours_s']:10.3f}{r['ours_bytes']:14,d}"
          f"   (handler alone {r['ours_handler_s']:.3f} s, before the flush)")
    print(f"{'pure-Python pydftracer handler':34s}{r['python_s']:10.3f}{r['python_bytes']:14,d}")
    print(f"{'prof.export_chrome_trace(.json.gz)':34s}{r['export_s']:10.3f}{r['export_bytes']:14,d}")
    print(f"speed-up vs pure Python:        {r['python_s'] / r['ours_s']:6.1f}x  (target >= 10x)")
    print(f"speed-up vs export_chrome_trace: {r['export_s'] / r['ours_s']:6.1f}x  (target > 1x)")
    print(f"size vs export_chrome_trace:     {r['ours_bytes'] / r['export_bytes']:6.2f}   (target < 1)")
    ok = (r["python_s"] >= 10 * r["ours_s"] and r["export_s"] > r["ours_s"]
          and r["ours_bytes"] < r["export_bytes"] and r["profiler_events"] >= opts.min_events)
    print("targets met" if ok else "TARGETS NOT MET")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
