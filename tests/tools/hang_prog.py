"""A small gloo job for tests/tools/test_hang.py, run unchanged under
`dftracer run -- torchrun --nproc_per_node 4`: every step is a forward, a
backward, an all_reduce of a tensor and an optimizer step.

--fault sleep: rank --rank blocks in time.sleep before its --at all_reduce;
--fault lockfifo: rank 1 deadlocks on a lock its worker thread waits for,
  and rank 2 blocks reading a FIFO nobody writes (--fifo), both at --at;
--fault stop: rank --rank stops itself (SIGSTOP) before its --at all_reduce
  (the test then kills it with SIGKILL);
--fault none: no fault, and at step --at every rank computes --long s.
--step-s S: every step computes S s more (a sleep before its all_reduce);
--say: each rank prints `rank R pid P done S` (flushed) when its step S ends, so a
  test that kills a rank knows how many steps it had done.
The lines the tests look for in the stacks end in a `# <mark>` comment."""

import argparse
import os
import signal
import threading
import time

import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--fault", choices=["sleep", "lockfifo", "stop", "none"], default="none")
ap.add_argument("--at", type=int, default=12)
ap.add_argument("--steps", type=int, default=16)
ap.add_argument("--rank", type=int, default=2)
ap.add_argument("--long", type=float, default=0.0)
ap.add_argument("--fifo", default="")
ap.add_argument("--step-s", type=float, default=0.0)
ap.add_argument("--say", action="store_true")
a = ap.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(4, 8)


def deadlock():
    lock = threading.Lock()
    with lock:
        worker = threading.Thread(target=lambda: lock.acquire(), name="loader")  # mark:worker
        worker.start()
        worker.join()  # mark:join


def read_fifo():
    fd = os.open(a.fifo, os.O_RDWR)  # a reader that is its own writer never sees EOF
    os.read(fd, 1)  # mark:fifo


for step in range(a.steps):
    loss = model(x).sum()
    loss.backward()
    if step == a.at:
        if a.fault == "sleep" and rank == a.rank:
            time.sleep(3600)  # mark:sleep
        if a.fault == "lockfifo" and rank == 1:
            deadlock()
        if a.fault == "lockfifo" and rank == 2:
            read_fifo()
        if a.fault == "stop" and rank == a.rank:
            time.sleep(2)  # long enough for a snapshot of iteration --at
            os.kill(os.getpid(), signal.SIGSTOP)  # mark:stop
        if a.fault == "none" and a.long:
            time.sleep(a.long)  # mark:long
    if a.step_s:
        time.sleep(a.step_s)  # mark:step
    t = torch.ones(4)
    dist.all_reduce(t)  # mark:all_reduce
    opt.step()
    opt.zero_grad()
    if a.say:
        print(f"rank {rank} pid {os.getpid()} done {step}", flush=True)
dist.destroy_process_group()
