"""A training job for the diff tests: plain PyTorch, nothing of dftracer.

Run alone or under torchrun (gloo).  --data-ms slows every sample's loading
(in the DataLoader workers), --compute-ms spins in the model's forward
(--slow-rank: on that rank only), --file-kib reads a file of that size per
sample."""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class Samples(Dataset):
    def __init__(self, n: int, data_ms: float, path: str) -> None:
        self.n, self.data_s, self.path = n, data_ms / 1e3, path

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.data_s:
            time.sleep(self.data_s)
        if self.path:
            with open(self.path, "rb") as f:
                f.read()
        g = torch.Generator().manual_seed(i)
        return torch.randn(32, generator=g), i % 4


class Model(torch.nn.Module):
    def __init__(self, spin_s: float) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                       torch.nn.Linear(64, 4))
        self.spin_s = spin_s

    def forward(self, x):
        if self.spin_s:
            end = time.perf_counter() + self.spin_s
            while time.perf_counter() < end:
                pass
        return self.net(x)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--data-ms", type=float, default=0.0)
    p.add_argument("--compute-ms", type=float, default=0.0)
    p.add_argument("--slow-rank", type=int, default=None)
    p.add_argument("--file-kib", type=int, default=0)
    p.add_argument("--dir", default=".")
    a = p.parse_args()
    torch.set_num_threads(1)
    distributed = "RANK" in os.environ
    rank = 0
    if distributed:
        dist.init_process_group("gloo")
        rank = dist.get_rank()
    path = ""
    if a.file_kib:
        path = os.path.join(a.dir, f"blob-{rank}.bin")
        with open(path, "wb") as f:
            f.write(os.urandom(a.file_kib * 1024))
    data = Samples(a.steps * a.batch, a.data_ms, path)
    sampler = DistributedSampler(data, shuffle=False) if distributed else None
    loader = DataLoader(data, batch_size=a.batch, sampler=sampler, num_workers=a.workers)
    slow = a.slow_rank is None or a.slow_rank == rank
    model = Model(a.compute_ms / 1e3 if slow else 0.0)
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
