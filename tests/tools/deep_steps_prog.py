"""A training loop whose untraced time is spent deep in its own calls: each
step waits SHALLOW_MS in a shallow function, then dives DEPTH frames and
waits DEEP_MS there, in even_work or odd_work by the step's parity (which
step a sample belongs to shows in its place).  Plain PyTorch, nothing of
dftracer (tests/tools/test_sampler.py).

    python deep_steps_prog.py DEPTH ITERS [SHALLOW_MS DEEP_MS]
"""

from __future__ import annotations

import sys
import time

import torch


def wait(ms: float) -> None:
    """Sleeps to a deadline (slices, so a busy machine cannot stretch it)."""
    deadline = time.perf_counter() + ms / 1000
    while (left := deadline - time.perf_counter()) > 0:
        time.sleep(min(left, 0.002))


def shallow(ms: float) -> None:
    wait(ms)


def even_work(ms: float) -> None:
    wait(ms)


def odd_work(ms: float) -> None:
    wait(ms)


def dive(n: int, work, ms: float) -> None:
    if n:
        return dive(n - 1, work, ms)
    return work(ms)


def main() -> None:
    depth, iters = int(sys.argv[1]), int(sys.argv[2])
    shallow_ms, deep_ms = (float(sys.argv[3]), float(sys.argv[4])) if len(sys.argv) > 4 else (3, 24)
    sys.setrecursionlimit(max(1000, depth + 100))
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(iters):
        shallow(shallow_ms)
        dive(depth, odd_work if step % 2 else even_work, deep_ms)
        loss = model(torch.ones(2, 4)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
