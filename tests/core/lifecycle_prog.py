"""A traced program that ends in the ways real jobs end (tests/core/test_lifecycle.py).

    python lifecycle_prog.py DIR pool METHOD HOW   # HOW: with, close, executor
    python lifecycle_prog.py DIR loader PERSISTENT # DataLoader, 2 workers (0/1; 1: 2 epochs)

The parent traces with initialize_log into DIR; a decorated function runs
N times (2000) in a pool of 2 workers.  The parent logs nothing itself.
"""

import multiprocessing as mp
import os
import sys

from dftracer.python import dft_fn, dftracer

N = int(os.environ.get("LIFECYCLE_N", "2000"))
work = dft_fn("work")


@work.log
def task(i):
    return i * 2


class Data:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    @work.log
    def __getitem__(self, i):
        return i


def main(argv):
    out, kind = argv[1], argv[2]
    log = dftracer.initialize_log(os.path.join(out, "trace.pfw"), None, -1)
    if kind == "pool":
        method, how = argv[3], argv[4]
        ctx = mp.get_context(method)
        if how == "with":
            with ctx.Pool(2) as p:
                assert sum(p.map(task, range(N))) == N * (N - 1)
        elif how == "close":
            p = ctx.Pool(2)
            assert sum(p.map(task, range(N))) == N * (N - 1)
            p.close()
            p.join()
        elif how == "executor":
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(2, mp_context=ctx) as ex:
                assert sum(ex.map(task, range(N), chunksize=16)) == N * (N - 1)
        else:
            raise SystemExit(f"unknown pool use {how!r}")
    elif kind == "loader":
        import torch.utils.data as tud

        persistent = argv[3] == "1"
        epochs = 2 if persistent else 1
        dl = tud.DataLoader(Data(N // epochs), batch_size=10, num_workers=2,
                            persistent_workers=persistent)
        for _ in range(epochs):
            assert sum(len(b) for b in dl) == N // epochs
    log.finalize()


if __name__ == "__main__":
    main(sys.argv)
