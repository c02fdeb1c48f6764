"""A small gloo DDP job for tests/tools/test_hang_jobs.py, run unchanged under
`dftracer run -- torchrun --nproc_per_node 2`: a DataLoader with --workers
workers (one by default) feeds a DDP model; each step syncs a flag across
ranks (an all_reduce) before its forward.  Rank 1's worker blocks opening
--fifo (nobody writes it) when it loads sample --at (batch --at, one sample a
batch: with 2 workers, an odd --at is worker 1's, while worker 0 goes idle):
rank 1 then waits for that batch while rank 0 waits in the next step's
all_reduce.  The line the tests look for ends in `# mark:open`."""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

ap = argparse.ArgumentParser()
ap.add_argument("--at", type=int, default=6)
ap.add_argument("--steps", type=int, default=12)
ap.add_argument("--fifo", required=True)
ap.add_argument("--workers", type=int, default=1)
a = ap.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()


class Samples(Dataset):
    def __len__(self):
        return 1000

    def __getitem__(self, i):
        if rank == 1 and i == a.at:
            with open(a.fifo, "rb") as fh:  # mark:open
                fh.read(1)
        return torch.randn(8)


model = DDP(torch.nn.Linear(8, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Samples(), batch_size=1, num_workers=a.workers)
for step, x in enumerate(loader):
    if step == a.steps:
        break
    flag = torch.ones(1)
    dist.all_reduce(flag)
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
