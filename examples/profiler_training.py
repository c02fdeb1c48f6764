"""A small training loop profiled with torch.profiler into a dftracer trace.

    DFTRACER_ENABLE=1 python3 examples/profiler_training.py [trace_stem]

Each training step is a dftracer span (category "train"); the profiler's ops,
record_function ranges and memory events of the active steps land inside those
spans as "PP" events.  Open the .pfw.gz in Perfetto (ui.perfetto.dev) to see
them together.
"""

from __future__ import annotations

import sys

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from dftracer.python import dftracer
from dftracer.python.torch import trace_handler


def main(stem: str = "profiler_training.pfw") -> None:
    log = dftracer.initialize_log(stem, None, -1)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
        model = model.cuda()
    device = next(model.parameters()).device

    with profile(
        activities=activities,
        schedule=schedule(wait=1, warmup=1, active=3, repeat=2),
        on_trace_ready=trace_handler,  # one call per finished cycle
        record_shapes=True,
        profile_memory=True,
        with_flops=True,
    ) as prof:
        for step in range(12):
            inputs = torch.randn(32, 64, device=device)
            labels = torch.randint(0, 10, (32,), device=device)
            log.enter_event()
            start = log.get_time()
            optimizer.zero_grad()
            with record_function("forward"):
                loss = criterion(model(inputs), labels)
            with record_function("backward"):
                loss.backward()
            optimizer.step()
            log.log_event("train_step", "train", start, log.get_time() - start,
                          int_args={"step": step})
            log.exit_event()
            prof.step()
    print("trace:", log.trace_path)
    log.finalize()


if __name__ == "__main__":
    main(*sys.argv[1:])
