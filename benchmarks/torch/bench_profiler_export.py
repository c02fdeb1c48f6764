"""Chrome-trace export of one profiled cycle: torch's `.gz` export (an
uncompressed temporary copy, then gzip) against ours (streamed through gzip),
measured side by side on the same profiler result.

    PYTHONPATH=$PWD python3 benchmarks/torch/bench_profiler_export.py [--steps 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from dftracer.python.torch import _outputs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    model = torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(8)])
    x = torch.randn(8, 32)

    def profiled():
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as prof:
            for _ in range(args.steps):
                model(x).sum().backward()
        return prof

    with tempfile.TemporaryDirectory() as out:
        theirs, ours = os.path.join(out, "torch.trace.json.gz"), os.path.join(out, "ours.trace.json.gz")
        t_theirs, t_ours = [], []
        for i in range(args.rounds):
            # Kineto saves a result once: a fresh result per round, both exports
            # on it, alternating which goes first.
            prof = profiled()
            for which in ((0, 1) if i % 2 == 0 else (1, 0)):
                t0 = time.perf_counter()
                if which == 0:
                    prof.export_chrome_trace(theirs)
                    t_theirs.append(time.perf_counter() - t0)
                else:
                    _outputs.export_chrome(prof, Path(ours), 0, 1)
                    t_ours.append(time.perf_counter() - t0)
        with gzip.open(ours, "rb") as f:
            events = len(json.loads(f.read())["traceEvents"])
        with gzip.open(theirs, "rb") as f:
            raw = len(f.read())
        a, b = min(t_theirs), min(t_ours)
        print(f"events in the cycle: {events}; uncompressed JSON: {raw / 1e6:.2f} MB")
        print(f"torch export_chrome_trace(.gz): {a * 1e3:8.1f} ms  {os.path.getsize(theirs) / 1e3:8.1f} kB"
              f"  (+ {raw / 1e6:.2f} MB temporary file)")
        print(f"dftracer export (streamed):     {b * 1e3:8.1f} ms  {os.path.getsize(ours) / 1e3:8.1f} kB"
              "  (no temporary file)")
        print(f"ratio ours/torch: {b / a:.2f} (best of {args.rounds})")


if __name__ == "__main__":
    main()
