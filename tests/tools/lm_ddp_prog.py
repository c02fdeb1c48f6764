"""A language-model DDP loop shaped like karpathy/nanoGPT's train.py, on CPU
and gloo: plain PyTorch, nothing of dftracer.  No DataLoader (each batch is
sliced out of a token file opened with np.memmap, as nanoGPT's get_batch
does), no explicit collective (DDP's gradient all-reduce is the only one),
gradient accumulation off, an optimizer step per iteration.

    torchrun --standalone --nproc_per_node 4 lm_ddp_prog.py DATA_DIR
        [--iters N] [--slow-rank R --slow forward|spin|get_batch --slow-ms MS]

--slow forward: rank R's model spends MS more in its forward (a wait to a
deadline inside the model, as a slower device would); --slow get_batch:
rank R's get_batch spends MS more reading its token file (the same wait,
between opening the memmap and slicing it).  A wait to a deadline, not a
CPU spin, so that a loaded machine does not stretch the injected delay.
--slow spin: rank R's forward pre-hook spins on the CPU for MS (to a
deadline): extra work of its own, which on a contended machine makes it wait
longer in the run queue too.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

VOCAB, BLOCK, BATCH, WIDTH = 256, 32, 8, 64


def wait(ms: float) -> None:
    if ms > 0:
        time.sleep(ms / 1e3)


def spin_hook(ms: float):
    def hook(module: nn.Module, args: tuple) -> None:
        end = time.perf_counter() + ms / 1e3
        while time.perf_counter() < end:
            pass
    return hook


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(WIDTH)
        self.attn = nn.MultiheadAttention(WIDTH, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln(x))


class TinyLM(nn.Module):
    def __init__(self, delay_ms: float) -> None:
        super().__init__()
        self.delay_ms = delay_ms
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Embedding(BLOCK, WIDTH)
        self.blocks = nn.Sequential(Block(), Block())
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        wait(self.delay_ms)
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        logits = self.head(self.blocks(x))
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def get_batch(path: str, delay_ms: float) -> tuple:
    data = np.memmap(path, dtype=np.uint16, mode="r")
    wait(delay_ms)
    ix = torch.randint(len(data) - BLOCK - 1, (BATCH,))
    x = torch.stack([torch.from_numpy(data[i:i + BLOCK].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + BLOCK].astype(np.int64)) for i in ix])
    return x, y


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("data_dir")
    p.add_argument("--iters", type=int, default=60)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow", choices=("forward", "spin", "get_batch"), default="forward")
    p.add_argument("--slow-ms", type=float, default=0.0)
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(1337 + rank)
    path = os.path.join(a.data_dir, "train.bin")
    if rank == 0 and not os.path.exists(path):
        os.makedirs(a.data_dir, exist_ok=True)
        tmp = path + ".tmp"
        np.random.default_rng(0).integers(0, VOCAB, 200_000, dtype=np.uint16).tofile(tmp)
        os.replace(tmp, path)
    dist.barrier()
    slow = a.slow_ms if rank == a.slow_rank else 0.0
    lm = TinyLM(slow if a.slow == "forward" else 0.0)
    if a.slow == "spin" and slow > 0:
        lm.register_forward_pre_hook(spin_hook(slow))
    model = DDP(lm)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for it in range(a.iters):
        x, y = get_batch(path, slow if a.slow == "get_batch" else 0.0)
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if rank == 0 and it % 20 == 0:
            print(f"iter {it}: loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
