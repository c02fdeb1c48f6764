"""A 2-rank gloo DDP job for tests/tools/test_slow_worker.py, run unchanged
under `dftracer run -- torchrun --nproc_per_node 2`: a DataLoader with 2
workers feeds a DDP model; on rank --rank, worker --worker sleeps --ms in
each sample it loads (one sample a batch), so that rank waits for every
other batch and the others wait for it in their all-reduce."""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, get_worker_info

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=24)
ap.add_argument("--rank", type=int, default=1)
ap.add_argument("--worker", type=int, default=1)
ap.add_argument("--ms", type=float, default=40.0)
a = ap.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()


class Samples(Dataset):
    def __len__(self):
        return a.steps

    def __getitem__(self, i):
        info = get_worker_info()
        if rank == a.rank and info is not None and info.id == a.worker:
            time.sleep(a.ms / 1e3)
        return torch.randn(8)


model = DDP(torch.nn.Linear(8, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x in DataLoader(Samples(), batch_size=1, num_workers=2, prefetch_factor=1):
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
