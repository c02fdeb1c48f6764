"""A small DDP training loop on CPU + gloo with one fault put in from the
command line, for `dftracer whatif` (tests/tools/test_whatif.py,
benchmarks/tools/bench_whatif.py): plain PyTorch, nothing of dftracer.

    torchrun --standalone --nproc_per_node 4 whatif_prog.py [--steps 30]
        [--batch 16] [--device-ms 20] [--fault none|forward|data|checkpoint|batch|file[,...]]
        [--slow-rank 3] [--slow-ms 15] [--ckpt-every 10] [--ckpt-mb 32]

--device-ms: every rank's forward waits MS for its "device" (a sleep: the
shared machine's load does not stretch it); --fault forward: rank R's
forward spins MS longer; --fault data: rank R's items sleep MS / batch each
in __getitem__ (the loader has no workers: the wait is the step thread's);
--fault checkpoint: rank 0 saves a CKPT_MB tensor every CKPT_EVERY steps,
after its optimizer step; --fault batch: rank R's get_batch (a plain
function the loop calls before forward, not traced) sleeps MS (the time only
the stack sampler sees); --fault file: every rank reads its own small file
each step (rank{R}.bin in the working folder: trace it with --data-dir),
and rank R's is a named pipe whose bytes come MS late (a slow file system:
the read blocks).  Several faults at once: --fault forward,checkpoint.
Prints nothing but errors.
"""

from __future__ import annotations

import argparse
import os
import threading
import time

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Items(Dataset):
    def __init__(self, size: int, item_sleep_s: float) -> None:
        self.data = [(torch.rand(20), torch.rand(1)) for _ in range(size)]
        self.item_sleep_s = item_sleep_s

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index):
        if self.item_sleep_s:
            time.sleep(self.item_sleep_s)  # a slow disk, a busy decoder...
        return self.data[index]


class Model(torch.nn.Module):
    def __init__(self, device_s: float, spin_s: float) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(20, 256), torch.nn.ReLU(),
                                       torch.nn.Linear(256, 1))
        self.device_s, self.spin_s = device_s, spin_s

    def forward(self, x):
        if self.device_s:
            time.sleep(self.device_s)  # the host waits for its device
        if self.spin_s:
            end = time.perf_counter() + self.spin_s
            while time.perf_counter() < end:  # a slower device, a bigger shard...
                pass
        return self.net(x)


def get_batch(x, y, sleep_s: float):
    """The batch as the step uses it: untraced code (no decorator), slowed
    by --fault batch (a slow tokenizer, a host-side augmentation...)."""
    if sleep_s:
        time.sleep(sleep_s)
    return x, y


def read_file(path: str, late_s: float) -> int:
    """The step's read of its file; with late_s the file is a named pipe a
    thread fills late_s after the read began (made on the first call)."""
    if not late_s:
        if not os.path.exists(path):
            with open(path, "wb") as f:
                f.write(b"x" * 4096)
        with open(path, "rb") as f:
            return len(f.read())
    if not os.path.exists(path):
        os.mkfifo(path)

    def feed() -> None:
        with open(path, "wb") as f:  # opens once the reader has
            time.sleep(late_s)
            f.write(b"x" * 4096)

    t = threading.Thread(target=feed)
    t.start()
    with open(path, "rb") as f:
        n = len(f.read())
    t.join()
    return n


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--device-ms", type=float, default=20.0)
    p.add_argument("--fault", default="none",
                   help="none, or forward, data, checkpoint, batch, file (comma-separated)")
    p.add_argument("--slow-rank", type=int, default=3)
    p.add_argument("--slow-ms", type=float, default=15.0)
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--ckpt-mb", type=float, default=32.0)
    a = p.parse_args()
    faults = set(a.fault.split(","))
    bad = faults - {"none", "forward", "data", "checkpoint", "batch", "file"}
    if bad:
        p.error(f"--fault {a.fault!r}: unknown {', '.join(sorted(bad))}")
    init_process_group(backend="gloo")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.manual_seed(0)
    slow = a.slow_ms / 1e3 if rank == a.slow_rank else 0.0
    data = Items(world * a.batch * a.steps, slow / a.batch if "data" in faults else 0.0)
    loader = DataLoader(data, batch_size=a.batch, sampler=DistributedSampler(data, shuffle=False))
    model = DDP(Model(a.device_ms / 1e3, slow if "forward" in faults else 0.0))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    blob = torch.zeros(int(a.ckpt_mb * (1 << 20)) // 4) if "checkpoint" in faults else None
    batch_s = slow if "batch" in faults else 0.0
    file_s = slow if "file" in faults else 0.0
    for step, (x, y) in enumerate(loader):
        x, y = get_batch(x, y, batch_s)
        if "file" in faults:
            read_file(f"rank{rank}.bin", file_s)
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
        if blob is not None and rank == 0 and (step + 1) % a.ckpt_every == 0:
            torch.save({"model": model.module.state_dict(), "blob": blob}, "ckpt.pt")
    destroy_process_group()


if __name__ == "__main__":
    main()
