"""A process started without RANK (as Lightning's own launcher and mp.spawn
start rank 0) that learns its rank from torch.distributed, then reads a
DataLoader whose 2 workers are spawned (multiprocessing_context="spawn": new
interpreters, which inherit nothing of their parent but its environment), for
tests/torch_integration/test_loader_epochs.py.  argv[1]: a free port."""

import os
import sys

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.full((2,), float(i))


if __name__ == "__main__":
    assert "RANK" not in os.environ
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
    dist.init_process_group("gloo", rank=0, world_size=1)
    loader = DataLoader(Samples(), batch_size=2, num_workers=2, multiprocessing_context="spawn")
    total = sum(float(x.sum()) for x in loader)
    dist.destroy_process_group()
    assert "DFTRACER_WORKER_RANK" not in os.environ  # put back once the workers started
    print(f"total {total:g}")
