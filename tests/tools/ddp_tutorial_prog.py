"""A DDP training script modeled on pytorch/examples'
distributed/ddp-tutorial-series/multigpu_torchrun.py, on CPU and gloo: plain
PyTorch, nothing of dftracer.  Like the tutorial it peeks at its loader once
an epoch (`next(iter(loader))`) and saves a snapshot from rank 0.

    torchrun --standalone --nproc_per_node 4 ddp_tutorial_prog.py EPOCHS SAVE_EVERY
        [--batch_size B] [--samples N] [--device-ms MS]
        [--slow-rank R --slow data|forward --slow-ms MS]

--device-ms: every rank's forward waits MS for its "device" (a spin to a
deadline, as a host waits for a GPU: a busy machine's CPU load does not
stretch it); --slow data: rank R's batches take MS longer to load (a sleep in
the collate); --slow forward: rank R's forward spins MS longer.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class MyTrainDataset(Dataset):
    def __init__(self, size):
        self.size = size
        self.data = [(torch.rand(20), torch.rand(1)) for _ in range(size)]

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return self.data[index]


class Model(torch.nn.Module):
    def __init__(self, spin_s: float) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(20, 256), torch.nn.ReLU(),
                                       torch.nn.Linear(256, 1))
        self.spin_s = spin_s

    def forward(self, x):
        if self.spin_s:
            end = time.perf_counter() + self.spin_s
            while time.perf_counter() < end:  # a slower device, a bigger shard...
                pass
        return self.net(x)


class Trainer:
    def __init__(self, model, train_data, optimizer, save_every, snapshot_path):
        self.rank = int(os.environ["RANK"])
        self.model = DDP(model)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.snapshot_path = snapshot_path

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.mse_loss(output, targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch):
        b_sz = len(next(iter(self.train_data))[0])
        print(f"[RANK{self.rank}] Epoch {epoch} | Batchsize: {b_sz} | "
              f"Steps: {len(self.train_data)}", flush=True)
        self.train_data.sampler.set_epoch(epoch)
        for source, targets in self.train_data:
            self._run_batch(source, targets)

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)
            if self.rank == 0 and epoch % self.save_every == 0:
                torch.save({"MODEL_STATE": self.model.module.state_dict(),
                            "EPOCHS_RUN": epoch}, self.snapshot_path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("total_epochs", type=int)
    p.add_argument("save_every", type=int)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--device-ms", type=float, default=0.0)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow", choices=("data", "forward"), default="data")
    p.add_argument("--slow-ms", type=float, default=0.0)
    p.add_argument("--snapshot", default="snapshot.pt")
    a = p.parse_args()
    init_process_group(backend="gloo")
    rank = int(os.environ["RANK"])
    torch.manual_seed(0)
    slow = a.slow_ms / 1e3 if rank == a.slow_rank else 0.0

    def collate(batch):
        if slow and a.slow == "data":
            time.sleep(slow)  # a slow disk, a busy decoder...
        return torch.utils.data.default_collate(batch)

    dataset = MyTrainDataset(a.samples)
    loader = DataLoader(dataset, batch_size=a.batch_size, shuffle=False, collate_fn=collate,
                        sampler=DistributedSampler(dataset))
    model = Model(a.device_ms / 1e3 + (slow if a.slow == "forward" else 0.0))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    Trainer(model, loader, optimizer, a.save_every, a.snapshot).train(a.total_epochs)
    destroy_process_group()


if __name__ == "__main__":
    main()
