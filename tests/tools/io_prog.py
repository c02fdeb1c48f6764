"""Programs for tests/tools/test_io_summary.py, run under `dftracer run`.

`loader DATA EPOCHS WORKERS`: a DataLoader whose workers np.load one .npy
file per sample.  `ddp DATA EPOCHS WORKERS [PERSISTENT]` (under torchrun,
gloo): the same with DistributedSampler and a DDP model; PERSISTENT `all`
(the default) gives every rank persistent workers, `rank0` rank 0 only (the
other ranks start new workers each epoch, as an ordinary DataLoader does).
`loader_val DATA EPOCHS WORKERS`: each epoch a pass over DATA/train then a
validation pass (no gradient) over DATA/val, each loader with its workers,
as pytorch/examples' imagenet main.py does.  `calls DATA OUT`: reads with seeks, pread, an mmap'd file, sendfile and
stdio (libc's fopen/fread through ctypes) on files under DATA; writes
/proc/self/io around the POSIX-only part, and the bytes of each /proc read,
to OUT (JSON)."""

from __future__ import annotations

import ctypes
import glob
import json
import mmap
import os
import sys
from typing import Any


def files_dataset(folder: str) -> Any:
    """A map-style dataset whose samples are the .npy files of folder, each
    read whole (np.load) and summed."""
    import numpy as np
    import torch
    from torch.utils.data import Dataset

    class Files(Dataset):
        def __init__(self) -> None:
            self.files = sorted(glob.glob(os.path.join(folder, "*.npy")))

        def __len__(self) -> int:
            return len(self.files)

        def __getitem__(self, i: int) -> "torch.Tensor":
            return torch.from_numpy(np.load(self.files[i])).float().sum()

    return Files()


def loader(data: str, epochs: int, workers: int, val: bool = False) -> None:
    """Training passes over DATA (or DATA/train), each followed, with val, by
    a validation pass (no gradient) over DATA/val."""
    import torch
    from torch.utils.data import DataLoader

    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    train = DataLoader(files_dataset(os.path.join(data, "train") if val else data), batch_size=2,
                       num_workers=workers)
    check = DataLoader(files_dataset(os.path.join(data, "val")), batch_size=2,
                       num_workers=workers) if val else None
    for _ in range(epochs):
        for batch in train:
            model(batch.view(-1, 1)).sum().backward()
            opt.step()
            opt.zero_grad()
        if check is not None:
            with torch.no_grad():
                for batch in check:
                    model(batch.view(-1, 1))


def ddp(data: str, epochs: int, workers: int, persistent: str = "all") -> None:
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    files = files_dataset(data)
    sampler = DistributedSampler(files, shuffle=True, seed=1)
    dl = DataLoader(files, batch_size=8, num_workers=workers, sampler=sampler,
                    persistent_workers=persistent == "all" or dist.get_rank() == 0)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for batch in dl:
            model(batch.view(-1, 1)).sum().backward()
            opt.step()
            opt.zero_grad()
    dist.destroy_process_group()


def proc_io() -> tuple:
    fd = os.open("/proc/self/io", os.O_RDONLY)
    text = os.read(fd, 4096)
    os.close(fd)
    fields = dict(line.split(": ") for line in text.decode().splitlines())
    return {k: int(v) for k, v in fields.items()}, len(text)


def calls(data: str, out: str) -> None:
    a, b, c, d = (os.path.join(data, n) for n in ("a.bin", "b.bin", "c.bin", "d.bin"))
    io0, len0 = proc_io()
    # POSIX: reads with seeks, pread, sendfile (a -> d)
    fd = os.open(a, os.O_RDONLY)
    os.read(fd, 1000)           # [0, 1000)
    os.read(fd, 1000)           # [1000, 2000)  consecutive
    os.lseek(fd, 5000, os.SEEK_SET)
    os.read(fd, 3000)           # [5000, 8000)  sequential, not consecutive
    os.lseek(fd, 0, os.SEEK_SET)
    os.read(fd, 500)            # [0, 500) backwards: re-read within this open
    os.pread(fd, 200, 9000)     # [9000, 9200)
    os.lseek(fd, -100, os.SEEK_END)
    os.read(fd, 4096)           # the last 100 bytes
    os.close(fd)
    src = os.open(a, os.O_RDONLY)
    dst = os.open(d, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.sendfile(dst, src, None, 4096)
    os.close(src)
    os.close(dst)
    io1, len1 = proc_io()
    # mmap: an open and metadata; the bytes come in as page faults
    fd = os.open(b, os.O_RDONLY)
    with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as m:
        first = m[:10]
    os.close(fd)
    # stdio through libc
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.fread.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p]
    libc.fseek.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_int]
    libc.fclose.argtypes = [ctypes.c_void_p]
    buf = ctypes.create_string_buffer(4096)
    fp = libc.fopen(c.encode(), b"rb")
    libc.fread(buf, 1, 100, fp)      # [0, 100)
    libc.fread(buf, 10, 30, fp)      # [100, 400)
    libc.fseek(fp, 1000, 0)
    libc.fread(buf, 1, 600, fp)      # [1000, 1600)
    libc.fseek(fp, 0, 0)
    libc.fread(buf, 1, 50, fp)       # [0, 50): re-read
    libc.fclose(fp)
    with open(out, "w") as f:
        json.dump({"before": io0, "after": io1, "proc_read_bytes": len0, "mmap": len(first),
                   "pid": os.getpid()}, f)


if __name__ == "__main__":
    if sys.argv[1] == "loader":
        loader(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1] == "loader_val":
        loader(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), val=True)
    elif sys.argv[1] == "ddp":
        ddp(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), *sys.argv[5:6])
    else:
        calls(sys.argv[2], sys.argv[3])
