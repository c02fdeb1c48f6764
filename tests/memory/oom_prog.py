"""Two gloo ranks; rank 1 keeps 20 MB more at every step until the kernel's
OOM killer ends it (run by tests/memory/test_memory_summary.py under
`dftracer run -- torchrun` inside a memory cgroup).  Each rank prints
`rank R done S` (flushed) once its step S's optimizer step is done.
argv: [max steps]."""

import sys
import time

import torch
import torch.distributed as dist

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 400


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    for step in range(STEPS):
        loss = model(torch.randn(32, 64)).pow(2).mean()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        opt.zero_grad()
        print(f"rank {rank} done {step}", flush=True)  # the test's truth: the steps it finished
        if rank == 1:
            kept.append(bytearray(20 << 20))  # bytearray pages are touched: resident
        time.sleep(0.05)  # the pace of a real step: the flusher writes as it goes
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
