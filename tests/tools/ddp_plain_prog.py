"""A plain data-parallel training loop shaped like nanoGPT's train.py, for
tests/tools/test_hang_ddp.py, run unchanged under `dftracer run -- torchrun`:
a small model in DistributedDataParallel (or FSDP2's fully_shard with
--fsdp), batches cut from a np.memmap of uint16 tokens opened anew for each
batch, no DataLoader, and no torch.distributed call in the loop unless
--explicit: one all_reduce of the loss per step, as a logging loop would,
issued with async_op=True after the next batch is fetched and waited for
after the optimizer step.

--fault fifo: rank --rank blocks forever reading a FIFO nobody writes (--fifo)
  when it fetches its --at-th batch;
--fault lock: rank --rank deadlocks on a threading.Lock there.
Just before blocking, the rank writes the time into --fifo + ".blocked".
--say: each rank prints `rank R pid P done S` (flushed) when its step S ends
(after the optimizer step), for a test that kills a rank.
The lines the tests look for in the stacks end in a `# mark:<name>` comment."""

import argparse
import os
import threading
import time

import numpy as np
import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--data", required=True)
ap.add_argument("--fault", choices=["fifo", "lock", "none"], default="none")
ap.add_argument("--at", type=int, default=8)
ap.add_argument("--rank", type=int, default=2)
ap.add_argument("--steps", type=int, default=12)
ap.add_argument("--fifo", default="")
ap.add_argument("--fsdp", action="store_true")
ap.add_argument("--explicit", action="store_true")
ap.add_argument("--bucket-mb", type=float, default=25.0)
ap.add_argument("--say", action="store_true")
a = ap.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(1337)
VOCAB, BLOCK, BATCH, EMBD = 256, 32, 4, 64


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = torch.nn.LayerNorm(EMBD)
        self.fc = torch.nn.Linear(EMBD, 4 * EMBD)
        self.proj = torch.nn.Linear(4 * EMBD, EMBD)

    def forward(self, x):
        return x + self.proj(torch.nn.functional.gelu(self.fc(self.ln(x))))


class TinyLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = torch.nn.Embedding(VOCAB, EMBD)
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.head = torch.nn.Linear(EMBD, VOCAB)

    def forward(self, idx, targets):
        x = self.wte(idx)
        for b in self.blocks:
            x = b(x)
        logits = self.head(x)
        return torch.nn.functional.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


model = TinyLM()
if a.fsdp:
    from torch.distributed.fsdp import fully_shard

    for b in model.blocks:
        fully_shard(b)
    fully_shard(model)
else:
    model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=a.bucket_mb)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
batches = 0


def deadlock():
    lock = threading.Lock()
    with lock:
        worker = threading.Thread(target=lambda: lock.acquire(), name="prefetch")  # mark:worker
        worker.start()
        worker.join()  # mark:join


def block():
    with open(a.fifo + f".blocked{rank}", "w") as f:
        f.write(repr(time.time()))
    if a.fault == "lock":
        deadlock()
    fd = os.open(a.fifo, os.O_RDWR)  # a reader that is its own writer never sees EOF
    os.read(fd, 1)  # mark:fifo


def get_batch():
    global batches
    batches += 1
    if batches == a.at and rank == a.rank and a.fault != "none":
        block()
    data = np.memmap(a.data, dtype=np.uint16, mode="r")  # anew each time, as nanoGPT does
    ix = torch.randint(len(data) - BLOCK - 1, (BATCH,))
    x = torch.stack([torch.from_numpy(data[i:i + BLOCK].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + BLOCK].astype(np.int64)) for i in ix])
    return x, y


X, Y = get_batch()
for step in range(a.steps):
    loss = model(X, Y)
    X, Y = get_batch()  # mark:get_batch
    if a.explicit:
        work = dist.all_reduce(loss.detach().clone(), async_op=True)  # mark:explicit
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if a.explicit:
        work.wait()
    if a.say:
        print(f"rank {rank} pid {os.getpid()} done {step}", flush=True)
dist.destroy_process_group()
