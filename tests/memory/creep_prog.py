"""A training loop whose DataLoader worker 0 keeps 4 MB of every sample it
reads (a leak in a dataset cache); the main process and worker 1 stay flat.
Run by tests/memory/test_memory_summary.py under `dftracer run`.
argv: [steps] [leak: 1 or 0]."""

import sys

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 60
LEAK = len(sys.argv) < 3 or sys.argv[2] == "1"


class Leaky(Dataset):
    def __init__(self) -> None:
        self.cache = []

    def __len__(self) -> int:
        return STEPS

    def __getitem__(self, i: int):
        info = get_worker_info()
        if LEAK and info is not None and info.id == 0:
            self.cache.append(bytearray(4 << 20))  # kept: 4 MB a sample
        return torch.full((8,), float(i))


def main() -> None:
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Leaky(), batch_size=1, num_workers=2)
    for x in loader:
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    print("done")


if __name__ == "__main__":
    main()
