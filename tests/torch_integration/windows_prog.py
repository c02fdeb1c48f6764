"""A training loop for tests/torch_integration/test_windows.py, run under
`dftracer run`: STEPS optimizer steps of about 20 ms each (a sleep), with

  --slow A,B,C   those loop indices 300 ms slower (in slow_part: the place a
                 window's detail must show);
  --busy A,B,C   those loop indices spend 15 ms of the step's 20 on a CPU
                 (a spin to 15 ms of CPU time, then the rest of the 20 ms
                 asleep): their wall time as usual, their CPU time not;
  --stall I      loop index I waits in stalled_part until the tracer saw the
                 stall (its stall window is pending; 60 s at most), and 1 s more;
  --capture I    at loop index I prints "ready" and keeps stepping until the
                 tracer's window on request opened and closed (60 s at most).

Prints one JSON line at the end: the tracer's _window_state()."""

import argparse
import json
import sys
import time

import torch

from dftracer import _core

ap = argparse.ArgumentParser()
ap.add_argument("steps", type=int)
ap.add_argument("--slow", default="")
ap.add_argument("--busy", default="")
ap.add_argument("--stall", type=int, default=-1)
ap.add_argument("--capture", type=int, default=-1)
args = ap.parse_args()
slow = {int(s) for s in args.slow.split(",") if s}
busy = {int(s) for s in args.busy.split(",") if s}

torch.manual_seed(0)
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(4, 8)


def work():
    time.sleep(0.02)


def busy_work():
    t0, c0 = time.monotonic(), time.thread_time()
    while time.thread_time() - c0 < 0.015:
        pass
    left = 0.02 - (time.monotonic() - t0)
    if left > 0:
        time.sleep(left)


def slow_part():
    time.sleep(0.3)


def stalled_part():
    end = time.monotonic() + 60
    while not _core._window_state()["stall"] and time.monotonic() < end:
        time.sleep(0.02)
    # the flusher writes the stacks right after it marks the stall: a second
    # more here for it, on a busy machine
    time.sleep(1)


def step(i=-1):
    busy_work() if i in busy else work()
    loss = model(x).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()


i = 0
while i < args.steps:
    if i in slow:
        slow_part()
    if i == args.stall:
        stalled_part()
    step(i)
    if i == args.capture:
        print("ready", flush=True)
        end = time.monotonic() + 60
        # steps until the window asked for was written
        while _core._window_state()["windows"] == 0 and time.monotonic() < end:
            step()
    i += 1
print(json.dumps(_core._window_state()), flush=True)
