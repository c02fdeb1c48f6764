"""The torch half of tests/compat/program.py: torch.profiler with
pydftracer's trace_handler, and a function compiled with the dftracer Dynamo
backend (pydftracer's documented examples).

Usage: python program_torch.py <log-file-stem>   (with DFTRACER_ENABLE=1)
"""

import sys

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from dftracer.python import dftracer
from dftracer.python.dynamo import dynamo
from dftracer.python.torch import trace_handler

log = dftracer.initialize_log(sys.argv[1], None, -1)
model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
x = torch.randn(2, 8)

with profile(activities=[ProfilerActivity.CPU],
             schedule=schedule(wait=0, warmup=0, active=1, repeat=1),
             on_trace_ready=trace_handler) as prof:
    model(x).sum()
    prof.step()


@dynamo.compile
def step(inp):
    return model(inp).sum()


with torch.no_grad():
    step(x)
    step(x)
log.finalize()
