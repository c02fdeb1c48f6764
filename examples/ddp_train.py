"""A small distributed data-parallel job on CPU: plain PyTorch, nothing of dftracer.

    dftracer run --data-dir data/ddp --log-file runs/ddp/trace -- \\
        torchrun --standalone --nproc_per_node 4 examples/ddp_train.py --slow-rank 2
    dftracer summary runs/ddp --ranks
    dftracer report runs/ddp -o ddp.html
    dftracer view runs/ddp

Each rank (torchrun starts one process per rank; gloo backend) trains a small
MLP wrapped in DistributedDataParallel on samples its DataLoader workers read
from one file each, averages the loss across ranks every step
(`all_reduce`), and meets the others at a `barrier` before and after
training.  With --slow-rank R, rank R's samples take --slow-ms longer per
batch to load, so every rank waits for R at each step: the straggler that
`dftracer summary --ranks` names, with its cause.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

FEATURES, CLASSES = 64, 4


class Samples(Dataset):
    """n samples of one rank, one file each (written once, read per item)."""

    def __init__(self, directory: str, n: int, delay_s: float) -> None:
        os.makedirs(directory, exist_ok=True)
        self.paths = [os.path.join(directory, f"sample_{i}.pt") for i in range(n)]
        gen = torch.Generator().manual_seed(n)
        for i, path in enumerate(self.paths):
            if not os.path.exists(path):
                torch.save((torch.randn(FEATURES, generator=gen), i % CLASSES), path)
        self.delay_s = delay_s

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        if self.delay_s:
            time.sleep(self.delay_s)  # a slow disk, a busy decoder...
        return torch.load(self.paths[i])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="data/ddp", help="where the samples are written and read")
    p.add_argument("--steps", type=int, default=20, help="training steps per rank")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers per rank")
    p.add_argument("--slow-rank", type=int, default=None, help="the rank whose loading is slow")
    p.add_argument("--slow-ms", type=float, default=150.0,
                   help="extra loading time per batch on the slow rank (ms)")
    args = p.parse_args()

    dist.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_ADDR from torchrun
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    slow = args.slow_rank == rank
    delay = args.slow_ms / 1e3 / args.batch_size if slow else 0.0
    data = Samples(os.path.join(args.data, f"rank{rank}"), args.steps * args.batch_size, delay)
    loader = DataLoader(data, batch_size=args.batch_size, num_workers=args.workers)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 256), torch.nn.ReLU(), torch.nn.Linear(256, CLASSES)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    dist.barrier()
    start = time.perf_counter()
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)  # the loss averaged over ranks, for the log
        if rank == 0 and step % 5 == 0:
            print(f"step {step}: loss {mean.item() / world:.4f}", flush=True)
    dist.barrier()
    if rank == 0:
        print(f"{world} ranks, {args.steps} steps in {time.perf_counter() - start:.2f} s"
              + (f" (rank {args.slow_rank} slowed by {args.slow_ms:g} ms per batch)"
                 if args.slow_rank is not None else ""), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
