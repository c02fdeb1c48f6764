"""A small traced workload: the README's main job.

    DFTRACER_ENABLE=1 DFTRACER_DATA_DIR=all python examples/quickstart.py --out traces/quickstart

It "trains" a tiny model for a few epochs: a loader reads samples from files
(traced as POSIX/STDIO I/O), `@ai.compute.forward` times the model, a
background thread writes checkpoints, and `ai.pipeline.epoch` spans each epoch.
It prints where its trace is; `dftracer summary traces/` then summarises it.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import threading

from dftracer.python import ai, dftracer
from dftracer.python import dft_fn as Profile

data_prof = Profile("data")


@data_prof.log
def make_dataset(directory: str, n: int) -> list:
    paths = []
    for i in range(n):
        path = os.path.join(directory, f"sample_{i}.bin")
        with open(path, "wb") as f:
            f.write(os.urandom(4096))
        paths.append(path)
    return paths


@ai.data.item
def load_sample(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@ai.compute.forward
def forward(sample: bytes, epoch: int, step: int) -> float:
    return sum(math.sin(b) for b in sample[:512])


@ai.checkpoint.capture
def save_checkpoint(directory: str, epoch: int) -> None:
    with open(os.path.join(directory, f"ckpt_{epoch}.bin"), "wb") as f:
        f.write(bytes(1 << 16))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="traces/quickstart", help="trace file stem")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--samples", type=int, default=64)
    args = ap.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)

    log = dftracer.initialize_log(os.path.abspath(args.out), None, -1)
    log.log_metadata_event("workload", "quickstart")
    with tempfile.TemporaryDirectory() as data:
        paths = make_dataset(data, args.samples)
        for epoch in ai.pipeline.epoch.iter(range(args.epochs)):
            ai.update(epoch=epoch)
            for step, path in enumerate(ai.dataloader.fetch.iter(paths)):
                forward(load_sample(path), epoch=epoch, step=step)
            # Checkpoints are written by a background thread, as trainers do.
            saver = threading.Thread(target=save_checkpoint, args=(data, epoch), name="checkpointer")
            saver.start()
            saver.join()
    path = log.trace_path
    log.finalize()
    if path:
        print(f"trace written to {path}")
    else:
        print("tracing is off: set DFTRACER_ENABLE=1 to write a trace")


if __name__ == "__main__":
    main()
