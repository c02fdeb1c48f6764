"""A single-process training script, unchanged by tracing (run by
tests/torch_integration/test_autotrace.py with and without dftracer run).

`train`: two optimizers (a discriminator stepped after two accumulated
micro-batches, then a generator), a torch.save / torch.load checkpoint and a
torch.compile'd model.  `infer`: a DataLoader loop under no_grad, no
optimizer.  It prints its results and every warning, so that a run under
dftracer can be compared with a run without it."""

import os
import sys
import warnings

import torch
from torch.utils.data import DataLoader, TensorDataset

STEPS, ACCUM = 3, 2


def train(out):
    gen = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8))
    disc = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt_d = torch.optim.SGD(disc.parameters(), lr=0.05)
    opt_g = torch.optim.Adam(gen.parameters(), lr=0.01)
    for _ in range(STEPS):
        for _ in range(ACCUM):  # gradient accumulation: two backward per step
            loss_d = disc(gen(torch.randn(16, 4)).detach()).mean() / ACCUM
            loss_d.backward()
        opt_d.step()
        opt_d.zero_grad()
        loss_g = -disc(gen(torch.randn(16, 4))).mean()
        loss_g.backward()
        opt_g.step()
        opt_g.zero_grad()
        print(f"losses {loss_d.item():.6f} {loss_g.item():.6f}")
    path = os.path.join(out, "ckpt.pt")
    torch.save({"gen": gen.state_dict(), "disc": disc.state_dict()}, path)
    state = torch.load(path)
    gen.load_state_dict(state["gen"])
    compiled = torch.compile(gen, backend="eager")
    y = compiled(torch.randn(16, 4))
    y.sum().backward()
    print(f"compiled {y.sum().item():.6f} grad {gen[0].weight.grad.abs().sum().item():.6f}")


def infer(out):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    data = TensorDataset(torch.randn(20, 4))
    total = 0.0
    with torch.no_grad():
        for (x,) in DataLoader(data, batch_size=5):
            total += model(x).sum().item()
    print(f"inference {total:.6f}")


if __name__ == "__main__":
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        {"train": train, "infer": infer}[sys.argv[1]](sys.argv[2])
    for w in caught:
        print(f"warning {w.category.__name__}: {w.message}")
