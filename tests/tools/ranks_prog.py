"""Runs examples/ddp_train.py (argv[1], its arguments after it) with the events
an unchanged script gets under `dftracer run` written by hand.

The events are those of the contract between the issues "`dftracer run` on an
unchanged training script" (which will write them by itself) and "one job,
many ranks" (which reads them): `pipeline/iteration`, `dataloader/fetch`,
`data/item` in the DataLoader workers, `compute` forward/backward/
optimizer.step, `comm` collectives with `group`/`seq` (sync points) and the
DDP bucket all-reduces (`async` 1), plus eight quiet barriers at the end.  They are written through dftracer's own
Python API (`_core.logger.log_event`), so the traces are the real tracer's;
only the hooks are this file's.  Used by tests/tools/test_ranks.py.
"""

from __future__ import annotations

import importlib.util
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from dftracer import _core

log = _core.logger
now = _core.get_time
seq = {"world": 0}
state = {"step": 0, "last": None, "opt_start": 0}


def _nbytes(args) -> int:
    t = args[0] if args and isinstance(args[0], torch.Tensor) else None
    return t.numel() * t.element_size() if t is not None else 0


def _collective(op: str) -> None:
    original = getattr(dist, op)

    def call(*args, **kwargs):
        t = now()
        out = original(*args, **kwargs)
        seq["world"] += 1
        log.log_event(op, "comm", t, now() - t, int_args={
            "bytes": _nbytes(args), "group_size": dist.get_world_size(), "seq": seq["world"],
            "async": int(bool(kwargs.get("async_op")))}, string_args={"group": "world"})
        return out

    setattr(dist, op, call)


def _ddp() -> None:
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    def bucket_hook(_state, bucket):
        t = now()
        ints = {"bytes": bucket.buffer().numel() * bucket.buffer().element_size(),
                "group_size": dist.get_world_size(), "ddp_bucket": bucket.index(), "async": 1}

        def done(f):  # as dftracer run's hook: from the issue to the completion
            log.log_event("all_reduce", "comm", t, now() - t, int_args=ints,
                          string_args={"group": "world"})
            return f.value()

        return allreduce_hook(None, bucket).then(done)

    init, forward = DistributedDataParallel.__init__, DistributedDataParallel.forward

    def ddp_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.register_comm_hook(None, bucket_hook)

    def ddp_forward(self, *args, **kwargs):
        t = now()
        out = forward(self, *args, **kwargs)
        log.log_event("forward", "compute", t, now() - t,
                      string_args={"module": type(self.module).__name__})
        return out

    DistributedDataParallel.__init__ = ddp_init
    DistributedDataParallel.forward = ddp_forward


def _backward() -> None:
    original = torch.Tensor.backward

    def backward(self, *args, **kwargs):
        t = now()
        out = original(self, *args, **kwargs)
        log.log_event("backward", "compute", t, now() - t, string_args={"module": "Sequential"})
        return out

    torch.Tensor.backward = backward


def _optimizer() -> None:
    from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                       register_optimizer_step_pre_hook)

    def pre(opt, args, kwargs):
        state["opt_start"] = now()

    def post(opt, args, kwargs):
        end = now()
        step = state["step"]
        log.log_event("optimizer.step", "compute", state["opt_start"], end - state["opt_start"],
                      int_args={"step": step}, string_args={"optimizer": type(opt).__name__})
        start = state["last"] if state["last"] is not None else state["opt_start"]
        log.log_event("iteration", "pipeline", start, end - start,
                      int_args={"step": step, "epoch": 0})
        state["step"], state["last"] = step + 1, end

    register_optimizer_step_pre_hook(pre)
    register_optimizer_step_post_hook(post)


class _Fetching:
    def __init__(self, it, workers: int) -> None:
        self.it, self.workers, self.batch = it, workers, 0

    def __iter__(self):
        return self

    def __next__(self):
        t = now()
        if state["last"] is None:
            state["last"] = t  # the first iteration starts with the first batch
        batch = next(self.it)
        log.log_event("fetch", "dataloader", t, now() - t,
                      int_args={"batch": self.batch, "workers": self.workers})
        self.batch += 1
        return batch


def _dataloader(samples) -> None:
    original_iter = DataLoader.__iter__

    def __iter__(self):
        return _Fetching(original_iter(self), self.num_workers)

    DataLoader.__iter__ = __iter__
    getitem = samples.__getitem__

    def item(self, i):
        t = now()
        out = getitem(self, i)
        log.log_event("item", "data", t, now() - t, int_args={"index": i})
        return out

    samples.__getitem__ = item


def _quiet_barriers(n: int = 8) -> None:
    """Before the process group goes: n barriers on ranks with nothing else to
    do (workers gone), so their ends are as close as the host allows: the
    sync points tests/tools/test_ranks.py aligns shifted clocks on."""
    original = dist.destroy_process_group

    def destroy(*args, **kwargs):
        for _ in range(n):
            time.sleep(0.03)
            dist.barrier()
        return original(*args, **kwargs)

    dist.destroy_process_group = destroy


def main() -> None:
    path = sys.argv[1]
    spec = importlib.util.spec_from_file_location("ddp_train", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["ddp_train"] = module  # its Dataset pickles by this name
    spec.loader.exec_module(module)
    for op in ("barrier", "all_reduce"):
        _collective(op)
    _ddp()
    _backward()
    _optimizer()
    _dataloader(module.Samples)
    _quiet_barriers()
    sys.argv = [path] + sys.argv[2:]
    module.main()


if __name__ == "__main__":
    main()
