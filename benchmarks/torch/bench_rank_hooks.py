"""What the hooks added for distributed jobs cost (issue "right answers on
real distributed jobs"), measured side by side in one process, tracing on,
hooks installed and removed in alternating rounds:

- a collective through comm.py's wrapper (its event, `seq`) against the
  same call unwrapped: FSDP2's `all_gather_single` on a 1-rank gloo group
  (`all_gather_into_tensor` on a torch without it);
- a functional collective (funcol.py): `all_reduce` on a 1-rank DeviceMesh;
- `model.train()` on a 1000-module model (the late-model search's trigger,
  once per pass);
- the collective wrapper alone (_core._AtCall, its event included) around a
  function that does nothing, with all_reduce's signature, against calling
  that function: what the wrapper adds to any collective.

    PYTHONPATH=. python3 benchmarks/torch/bench_rank_hooks.py [--rounds R]

An FSDP2 step pays the collective wrapper once per gather and
reduce-scatter.  DDP's bucket hook (2 ranks, per backward) is measured by
bench_ddp_hook.py."""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Callable, Dict, List

from bench_autotrace import cpu  # type: ignore[import-not-found]


def per_call_us(fn: Callable[[], object], n: int) -> float:
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - t)
    return best / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    rounds = ap.parse_args().rounds
    directory = tempfile.mkdtemp(prefix="bench-rank-hooks-")
    os.environ["DFTRACER_ENABLE"] = "1"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    import torch
    import torch.distributed as dist

    from dftracer import _core
    from dftracer._autotrace import comm, funcol, modules, steps

    _core.logger.initialize_log(os.path.join(directory, "hooks"), None, -1)
    steps.install()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=0, world_size=1)
    import torch.distributed._functional_collectives as fc
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (1,))
    out, inp = torch.zeros(256), torch.ones(256)
    model = torch.nn.Sequential(*[torch.nn.Identity() for _ in range(1000)])
    names = ["all_gather_single (FSDP2), 1 KiB", "funcol all_reduce, 1 KiB",
             "model.train(), 1000 modules", "the C wrapper alone (a no-op all_reduce)"]

    def noop(tensor: object, op: object = None, group: object = None,
             async_op: bool = False) -> None:
        return None

    noop_timed = comm._wrap_collective("all_reduce", noop)
    on: Dict[str, List[float]] = {n: [] for n in names}
    off: Dict[str, List[float]] = {n: [] for n in names}

    # all_gather_single is torch 2.13's; all_gather_into_tensor before it
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

    def measure(into: Dict[str, List[float]]) -> None:
        into[names[0]].append(per_call_us(lambda: gather(out, inp), 2000))
        into[names[1]].append(per_call_us(lambda: fc.all_reduce(inp, "sum", mesh).wait(), 1000))
        into[names[2]].append(per_call_us(model.train, 200))
        call = noop_timed if into is on else noop
        into[names[3]].append(per_call_us(lambda: call(inp), 20000))

    for _ in range(rounds):
        measure(off)
        comm.install()
        funcol.install_now()
        modules.install()
        modules.end_search()
        measure(on)
        comm.P.uninstall()
        modules.P.uninstall()
    print(f"rank hooks, us per call (median of {rounds} rounds; {cpu()}; tracing to {directory}):")
    print(f"  {'':42} {'off':>7} {'on':>7} {'added':>7}")
    for n in names:
        a, b = statistics.median(off[n]), statistics.median(on[n])
        print(f"  {n:42} {a:7.2f} {b:7.2f} {b - a:7.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
