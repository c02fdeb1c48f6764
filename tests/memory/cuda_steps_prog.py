"""A CPU training loop whose torch.cuda is made to look initialized, with
allocator statistics that grow 1 MiB a step (a stand-in where no GPU is:
the figures are what torch._C._cuda_memoryStats returns, the function
torch.cuda.memory_allocated and max_memory_allocated read).  Prints each
step's figures as JSON lines for the test to compare with the trace."""

import json
import sys

import torch
import torch.nn as nn

MIB = 1 << 20
state = {"step": 0}


def fake_stats(device):
    k = state["step"]
    alloc, res = (10 + k) * MIB, (32 + 2 * k) * MIB
    return {"allocated_bytes": {"all": {"current": alloc, "peak": alloc + MIB}},
            "reserved_bytes": {"all": {"current": res, "peak": res}}}


def main(steps):
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch._C._cuda_memoryStats = fake_stats
    torch.cuda.current_device = lambda: 3
    for k in range(steps):
        state["step"] = k
        if k == 2:  # CUDA first used at the third step
            torch.cuda._initialized = True
        x = torch.randn(4, 8)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if k >= 2:
            s = fake_stats(3)
            print(json.dumps({"step": k, "allocated": s["allocated_bytes"]["all"]["current"],
                              "peak_allocated": s["allocated_bytes"]["all"]["peak"],
                              "reserved": s["reserved_bytes"]["all"]["current"]}), flush=True)
    torch.cuda._initialized = False


if __name__ == "__main__":
    main(int(sys.argv[1]))
