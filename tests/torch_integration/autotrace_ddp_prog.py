"""An ordinary DDP training script, unchanged by tracing (run by
tests/torch_integration/test_autotrace.py under dftracer run and torchrun):
4 ranks, gloo on CPU, a DataLoader with 2 workers per rank, SGD, and per
step an all_reduce of the loss and a barrier."""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

STEPS = int(os.environ.get("STEPS", "3"))
BATCH = 8


class Ramp(Dataset):
    def __len__(self):
        return STEPS * BATCH * dist.get_world_size()

    def __getitem__(self, i):
        x = torch.full((8,), i / len(self))
        return x, x.sum(0, keepdim=True)


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    model = DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = Ramp()
    loader = DataLoader(data, batch_size=BATCH, num_workers=2,
                        sampler=DistributedSampler(data, shuffle=False))
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        dist.barrier()
    if dist.get_rank() == 0:
        print(f"mean loss {total.item() / dist.get_world_size():.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
