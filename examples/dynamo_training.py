"""Training a small CNN compiled through dftracer's torch.compile integration.

Run with tracing on:
    DFTRACER_ENABLE=1 python examples/dynamo_training.py --out /tmp/traces/dynamo

Each call of the @tracer.compile'd forward gets one `dynamo` span saying
whether it compiled, recompiled or ran cached graphs (and how long compiling
took); every ATen op of the forward and backward graphs gets its own event
with phase, graph id, grad_enabled, epoch and step.  The last batch is smaller,
so its first call recompiles.  The script prints a per-call summary read back
from the trace.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
from collections import Counter

import torch
import torch.nn as nn

from dftracer.python import Dynamo, dftracer

tracer = Dynamo(name="convnet", epoch=0, step=0)


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, 1)
        self.fc = nn.Linear(8 * 13 * 13, 10)

    @tracer.compile(dynamic=False)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(x))
        x = nn.functional.max_pool2d(x, 2)
        return self.fc(torch.flatten(x, 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default="/tmp/dftracer_dynamo/trace", help="trace file stem")
    ap.add_argument("--epochs", type=int, default=2)
    opts = ap.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(opts.out)), exist_ok=True)
    log = dftracer.initialize_log(opts.out, None, -1)

    torch.manual_seed(0)
    batches = [(torch.randn(4, 1, 28, 28), torch.randint(0, 10, (4,))) for _ in range(3)]
    batches.append((torch.randn(2, 1, 28, 28), torch.randint(0, 10, (2,))))  # a new shape
    model = ConvNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    step = 0
    for epoch in range(opts.epochs):
        for data, target in batches:
            tracer.update(epoch=epoch, step=step)
            optimizer.zero_grad()
            loss = criterion(model(data), target)
            loss.backward()
            optimizer.step()
            step += 1
        print(f"epoch {epoch}: loss {loss.item():.3f}")

    path = log.trace_path
    log.finalize()
    if not path:
        print("tracing is off (set DFTRACER_ENABLE=1 to write a trace)")
        return
    summarize(path)


def summarize(path: str) -> None:
    events = []
    for p in glob.glob(path) or [path]:
        with gzip.open(p, "rt") if p.endswith(".gz") else open(p) as f:
            events += [json.loads(line) for line in f if line.startswith("{")]
    calls = [e for e in events if e["cat"] == "dynamo" and "mode" in e["args"]]
    ops = [e for e in events if e["cat"] == "dynamo" and "phase" in e["args"]]
    print(f"trace: {path}")
    for c in sorted(calls, key=lambda e: e["ts"]):
        a = c["args"]
        print(f"  {c['name']} step {a['step']}: {a['mode']:9s} {c['dur']:8d} us "
              f"(compiling {a['compile_us']} us, {a['graphs']} graph(s) ran)")
    phases = Counter(e["args"]["phase"] for e in ops)
    print(f"  op events by phase: {dict(phases)}")


if __name__ == "__main__":
    main()
