"""A process that keeps 1 MiB more every 0.1 s, up to --cap MiB, then waits
to be killed; it prints `pid P grew N MiB` (flushed) every 10 MiB.  Run by
tests/memory/test_memory_summary.py under `dftracer run`: `summary --memory`
while it runs (running, whatever it grows) and once it is SIGKILLed
(killed while growing)."""

import os
import sys
import time

CAP = int(sys.argv[1]) if len(sys.argv) > 1 else 600

kept = []
while True:
    if len(kept) < CAP:
        kept.append(bytearray(1 << 20))  # bytearray pages are touched: resident
        if len(kept) % 10 == 0:
            print(f"pid {os.getpid()} grew {len(kept)} MiB", flush=True)
    time.sleep(0.1)
