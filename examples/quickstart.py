"""A small traced workload: the README's main job.

Run with tracing on:  DFTRACER_ENABLE=1 python examples/quickstart.py --out traces/quickstart
It "trains" a tiny model for a few epochs, reading its samples from files, and
prints where its trace is.  `dftracer summary traces/` then summarises it.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import threading

from dftracer.python import dftracer


def make_dataset(directory: str, n: int) -> list[str]:
    paths = []
    for i in range(n):
        path = os.path.join(directory, f"sample_{i}.bin")
        with open(path, "wb") as f:
            f.write(os.urandom(4096))
        paths.append(path)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="traces/quickstart", help="trace file stem")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--samples", type=int, default=64)
    args = ap.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)

    log = dftracer.initialize_log(os.path.abspath(args.out), None, -1)
    log.log_metadata_event("workload", "quickstart")
    with tempfile.TemporaryDirectory() as data:
        paths = make_dataset(data, args.samples)
        for epoch in range(args.epochs):
            log.enter_event()
            t_epoch = log.get_time()
            for step, path in enumerate(paths):
                t0 = log.get_time()
                with open(path, "rb") as f:
                    sample = f.read()
                log.log_event("read_sample", "data", t0, log.get_time() - t0,
                              int_args={"step": step, "size": len(sample)})
                t0 = log.get_time()
                acc = sum(math.sin(b) for b in sample[:512])
                log.log_event("forward", "compute", t0, log.get_time() - t0,
                              int_args={"epoch": epoch, "step": step},
                              float_args={"acc": acc})
            # A checkpoint written by a background thread, as trainers do.
            def checkpoint() -> None:
                t = log.get_time()
                with open(os.path.join(data, f"ckpt_{epoch}.bin"), "wb") as f:
                    f.write(bytes(1 << 16))
                log.log_event("save", "checkpoint", t, log.get_time() - t,
                              int_args={"epoch": epoch})
            saver = threading.Thread(target=checkpoint, name="checkpointer")
            saver.start()
            saver.join()
            log.log_event("epoch", "pipeline", t_epoch, log.get_time() - t_epoch,
                          int_args={"epoch": epoch})
            log.exit_event()
    path = log.trace_path
    log.finalize()
    if path:
        print(f"trace written to {path}")
    else:
        print("tracing is off: set DFTRACER_ENABLE=1 to write a trace")


if __name__ == "__main__":
    main()
