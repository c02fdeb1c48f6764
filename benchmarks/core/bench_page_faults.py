"""What a page of fresh memory costs on this machine: the first write to
each page of a new anonymous mapping, and the same pages mapped in one
madvise(MADV_POPULATE_WRITE) call (what the core does when it allocates a
records chunk; docs/performance.md, "Page faults").  On a VM whose host backs
guest memory on first use, both are the host's work and far above the
microsecond of a machine whose memory was used before.

    python3 benchmarks/core/bench_page_faults.py [--pages 16384] [--rounds 3]

Prints microseconds per page for each round of each way."""

from __future__ import annotations

import argparse
import mmap
import os
import time

MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)  # Linux 5.14


def touch(n: int) -> float:
    m = mmap.mmap(-1, n * mmap.PAGESIZE)
    t = time.perf_counter()
    for i in range(0, n * mmap.PAGESIZE, mmap.PAGESIZE):
        m[i] = 1
    us = (time.perf_counter() - t) / n * 1e6
    m.close()
    return us


def populate(n: int) -> float:
    m = mmap.mmap(-1, n * mmap.PAGESIZE)
    t = time.perf_counter()
    try:
        m.madvise(MADV_POPULATE_WRITE)
    except OSError as exc:  # an older kernel
        m.close()
        raise SystemExit(f"madvise(MADV_POPULATE_WRITE): {exc}") from None
    us = (time.perf_counter() - t) / n * 1e6
    m.close()
    return us


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=16384)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), "?")
    print(f"fresh pages, us a page ({a.pages} pages of {mmap.PAGESIZE} bytes; {cpu}, "
          f"{os.cpu_count()} CPUs; kernel {os.uname().release}):")
    for r in range(a.rounds):
        print(f"  round {r + 1}: first write {touch(a.pages):.2f}, "
              f"MADV_POPULATE_WRITE {populate(a.pages):.2f}")


if __name__ == "__main__":
    main()
