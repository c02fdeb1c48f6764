"""A training loop whose untraced time is a churn of short library calls in
Python (numpy's memmap slicing, json's encoder): the step thread's frames
change every microsecond or so, so the stack sampler often reads a thread
that moves under it (tests/tools/test_sampler.py).  Plain PyTorch, nothing
of dftracer.

    python busy_calls_prog.py TOKEN_FILE ITERS
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch


def churn(data: np.memmap) -> int:
    total = 0
    for i in range(200):
        total += int(data[i:i + 8].sum())
        json.dumps({"at": [i, total]})
    return total


def main() -> None:
    data = np.memmap(sys.argv[1], dtype=np.uint16, mode="r")
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(int(sys.argv[2])):
        churn(data)
        loss = model(torch.ones(2, 4)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
