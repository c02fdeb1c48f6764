"""An FSDP2 (fully_shard) training loop on CPU + gloo: plain PyTorch, nothing
of dftracer (tests/torch_integration/test_fsdp2.py runs it under dftracer run
and torchrun)."""

import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard


def main(steps: int) -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        x = torch.randn(8, 16)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    # the functional collectives (DeviceMesh-based parallelism's), on a 1-D mesh
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    total = funcol.all_reduce(torch.ones(4), "sum", mesh)
    gathered = funcol.all_gather_tensor(torch.ones(2), 0, mesh)
    assert float(total.sum()) == 4 * dist.get_world_size() and gathered.numel() == 2 * dist.get_world_size()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
