"""A model whose forward the program hooks itself (a pre-hook and a hook
on the top-level module, as a DDP wrapper's user might), each sleeping
PRE_MS / POST_MS: before the first step, or (`late`) before step LATE,
once the model's forward has long been timed.  Plain PyTorch, nothing of
dftracer."""

import sys
import time

import torch
import torch.nn as nn

PRE_MS, POST_MS = 30, 20
LATE = 3


def hook(model):
    model.register_forward_pre_hook(lambda m, args: time.sleep(PRE_MS / 1000))
    model.register_forward_hook(lambda m, args, out: time.sleep(POST_MS / 1000))


def main(steps, late):
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    if not late:
        hook(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(4, 8), torch.randn(4, 1)) for _ in range(steps)]
    loader = torch.utils.data.DataLoader(data, batch_size=None)
    for k, (x, y) in enumerate(loader):
        if late and k == LATE:
            hook(model)
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:] == ["late"])
