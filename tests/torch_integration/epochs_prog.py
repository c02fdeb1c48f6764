"""A training loop that stops each pass at len(loader), as PyTorch Lightning
does, without exhausting the loader's iterator (tests/torch_integration/
test_loader_epochs.py): first a peek (next(iter(loader))), then --epochs
passes of len(loader) batches, each a forward, backward and optimizer step,
then one pass run to its end by a for loop.  --workers: the loader's
workers (--persistent: kept across passes)."""

import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

ap = argparse.ArgumentParser()
ap.add_argument("--epochs", type=int, default=3)
ap.add_argument("--workers", type=int, default=0)
ap.add_argument("--persistent", action="store_true")
a = ap.parse_args()

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4, num_workers=a.workers,
                    persistent_workers=a.persistent and a.workers > 0)


def step(x):
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()


next(iter(loader))  # a peek: no pass
for _ in range(a.epochs):
    it = iter(loader)
    for _ in range(len(loader)):  # Lightning's stop: the iterator is never exhausted
        (x,) = next(it)
        step(x)
for (x,) in loader:  # a pass run to its end
    step(x)
print("done")
