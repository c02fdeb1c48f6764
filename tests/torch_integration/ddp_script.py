"""An ordinary DDP training script: 4 ranks (or as many as torchrun starts),
gloo on CPU, a DataLoader with 2 workers per rank, SGD, and per step an
all_reduce of the loss and a barrier.  Nothing in it knows about dftracer:

    dftracer run --log-file runs/ddp -- torchrun --standalone --nproc_per_node 4 ddp_script.py

records its steps, data waits, forward/backward, collectives and DDP's
gradient all-reduce (docs/ai.md, "Events of an unchanged script").  Used by
tests/torch_integration/test_autotrace.py, the Perfetto browser test and
benchmarks/torch/bench_autotrace.py
(--step-times: each rank writes its step durations, wall and CPU time of the
process, in seconds, as JSON).
"""

import argparse
import json
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

BATCH = 8


class Ramp(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = torch.full((8,), i / self.n)
        return x, x.sum(0, keepdim=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--step-times", metavar="STEM", help="write STEM-rank<N>.json")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    model = DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = Ramp(args.steps * BATCH * dist.get_world_size())
    loader = DataLoader(data, batch_size=BATCH, num_workers=2,
                        sampler=DistributedSampler(data, shuffle=False))
    times = {"wall": [], "cpu": []}
    last, last_cpu = time.perf_counter(), time.process_time()
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        dist.barrier()
        now, now_cpu = time.perf_counter(), time.process_time()
        times["wall"].append(now - last)
        times["cpu"].append(now_cpu - last_cpu)
        last, last_cpu = now, now_cpu
    if args.step_times:
        with open(f"{args.step_times}-rank{dist.get_rank()}.json", "w") as f:
            json.dump(times, f)
    if dist.get_rank() == 0:
        print(f"mean loss {total.item() / dist.get_world_size():.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
