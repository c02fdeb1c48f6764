"""What tracing DDP's gradient all-reduce costs per backward (issue 35:
<= 20 us a backward, 2 ranks, gloo), measured side by side in one run.

Two ranks (forked, gloo, one thread each) build the same model three times
and time `loss.backward()` (it waits for the buckets' all-reduce) in
interleaved rounds:

- untraced: DDP's own C++ reduction, no hook;
- dftracer (native): the hook `dftracer run` registers where it is built
  (src/libtorch/ddp_native.cpp, a C++ hook built against this torch: built
  first if missing, DFTRACER_DDP_HOOK=native), one comm/all_reduce event per
  bucket written to a trace;
- dftracer (C hook): the one it registers where that is not built
  (_core._DdpHook, a C callable DDP calls through Python, DFTRACER_DDP_HOOK=c);
- torch's allreduce_hook: the Python communication hook of
  torch.distributed.algorithms.ddp_comm_hooks.default_hooks, what a
  per-bucket Python hook (dftracer's before issue 35) costs;
- torch's built-in ALLREDUCE hook (C++): what any hook costs without
  Python (DDP no longer fuses the scaling into its copy into the bucket).

Models: the ddp-tutorial's Linear(20, 1) (one bucket) and an MLP of six
Linear(256, 256) with bucket_cap_mb=0.25 (several buckets).

    PYTHONPATH=. python3 benchmarks/torch/bench_ddp_hook.py [--rounds R] [--steps N]

Prints, per model, the median over rounds of the per-backward median, and
the added us per backward of each variant against the untraced one."""

from __future__ import annotations

import argparse
import copy
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_autotrace import cpu  # type: ignore[import-not-found]  # noqa: E402

VARIANTS = ["untraced", "dftracer native (C++)", "dftracer (C hook)",
            "torch allreduce_hook (Python)", "torch built-in ALLREDUCE (C++)"]


def models() -> Dict[str, Any]:
    import torch

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(*[m for _ in range(6)
                                for m in (torch.nn.Linear(256, 256), torch.nn.ReLU())])
    return {"Linear(20,1), 1 bucket": (torch.nn.Linear(20, 1), torch.randn(32, 20), None),
            "MLP 6x256, bucket_cap_mb=0.25": (mlp, torch.randn(32, 256), 0.25)}


def rank_main(rank: int, world: int, directory: str, rounds: int, steps: int, out: Any) -> None:
    try:
        out.put((rank, measure(rank, world, directory, rounds, steps)))
    except BaseException as exc:
        out.put((rank, f"{type(exc).__name__}: {exc}"))
        raise


def measure(rank: int, world: int, directory: str, rounds: int, steps: int) -> Dict[str, Any]:
    os.environ["DFTRACER_ENABLE"] = "1"
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dftracer import _core
    from dftracer._autotrace import comm
    from dftracer._autotrace import ddp as ours

    torch.set_num_threads(1)
    _core.logger.initialize_log(os.path.join(directory, f"ddp-{rank}"), None, -1)
    dist.init_process_group("gloo", init_method="file://" + os.path.join(directory, "store"),
                            rank=rank, world_size=world)
    comm.install()  # what `dftracer run` installs before the DDP part (group names)
    results: Dict[str, Dict[str, List[float]]] = {}
    for name, (net, x, cap) in models().items():
        kw = {} if cap is None else {"bucket_cap_mb": cap}
        variants = []
        for v in VARIANTS:
            model = DDP(copy.deepcopy(net), **kw)  # the same weights in each
            if v.startswith("dftracer"):
                native = "native" in v
                os.environ["DFTRACER_DDP_HOOK"] = "native" if native else "c"
                ours._attach(model)
                assert model in ours._states, "the hook was not attached"
                assert ours._native[model] == native, f"{v}: not that hook"
            elif v.startswith("torch allreduce_hook"):
                model.register_comm_hook(None, default_hooks.allreduce_hook)
            elif v.startswith("torch built-in"):
                model._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)
            variants.append(model)
        wall: Dict[str, List[float]] = {v: [] for v in VARIANTS}
        cpu_: Dict[str, List[float]] = {v: [] for v in VARIANTS}
        for model in variants:  # warm-up (bucket rebuild on the first iterations)
            for _ in range(20):
                model(x).sum().backward()
        for r in range(rounds):
            order = list(range(len(VARIANTS)))
            order = order[r % len(order):] + order[:r % len(order)]  # no variant always first
            for i in order:
                v, model = VARIANTS[i], variants[i]
                per: List[float] = []
                spent = 0.0
                for _ in range(steps):
                    loss = model(x).sum()
                    c = time.thread_time()  # the training thread (runs the hook)
                    t = time.perf_counter()
                    loss.backward()
                    per.append(time.perf_counter() - t)
                    spent += time.thread_time() - c
                wall[v].append(statistics.median(per) * 1e6)
                cpu_[v].append(spent / steps * 1e6)
        results[name] = {"wall": wall, "cpu": cpu_}
    results["per bucket"] = per_bucket(ours, comm)
    _core.logger.finalize()
    dist.destroy_process_group()
    return results


def per_bucket(ours: Any, comm: Any, n: int = 2000) -> Dict[str, Any]:
    """The hook alone, per bucket, in a tight loop (the least a busy machine
    can disturb: best of 5 alternating tries): our C hook (the native one
    takes a GradBucket, which only DDP makes) on a bucket of
    21 floats (the tutorial's Linear(20, 1)) until its future's value,
    against what DDP's own path calls, pg.allreduce([bucket]) and wait.  The
    bucket stands in for DDP's GradBucket with C-level callables only."""
    import itertools
    import types

    import torch
    import torch.distributed as dist

    pg = dist.group.WORLD
    t = torch.zeros(21)
    bucket = types.SimpleNamespace(buffer=itertools.repeat(t).__next__,
                                   index=itertools.repeat(0).__next__)
    info = comm.group_info(pg)
    hook = ours._core._DdpHook(pg, info[1], info[2], dist.AllreduceOptions(), lambda h: h.size)
    opts = dist.AllreduceOptions()

    def plain() -> None:
        pg.allreduce([bucket.buffer()], opts).get_future().wait()

    def traced() -> None:
        hook(None, bucket).wait()

    best = {"DDP's own (allreduce + wait)": float("inf"), "dftracer's hook": float("inf")}
    for _ in range(5):
        for name, fn in zip(best, (plain, traced)):
            start = time.perf_counter()
            for _ in range(n):
                fn()
            best[name] = min(best[name], (time.perf_counter() - start) / n * 1e6)
    return {"per bucket": best}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--world", type=int, default=2,
                    help="ranks (1: the hook's own cost without the network's noise)")
    a = ap.parse_args()
    directory = tempfile.mkdtemp(prefix="bench-ddp-hook-")
    from dftracer._autotrace import ddp_native

    ddp_native._build_once()  # before the ranks start: none of them waits for it
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, a.world, directory, a.rounds, a.steps, q))
             for r in range(a.world)]
    for p in procs:
        p.start()
    got = dict(q.get() for _ in procs)
    failed = [f"rank {r}: {v}" for r, v in got.items() if isinstance(v, str)]
    if failed:
        sys.exit("; ".join(failed))
    for p in procs:
        p.join()
    print(f"DDP backward, {a.world} rank(s), gloo, us per backward: wall = median over {a.rounds} "
          f"interleaved rounds of the median of {a.steps} backward; cpu = median over rounds of "
          f"the training thread's CPU time per backward (the hook runs there; the completion runs on gloo's thread); added = against untraced "
          f"({cpu()}; traces in {directory}):")
    print(f"  {'':34} {'':5} " + " ".join(f"{v[:24]:>24}" for v in VARIANTS))
    for name in got[0]:
        if name == "per bucket":
            continue
        print(f"  {name}")
        for rank in range(a.world):
            for kind in ("wall", "cpu"):
                t = got[rank][name][kind]
                base = statistics.median(t[VARIANTS[0]])
                cells = []
                for v in VARIANTS:
                    m = statistics.median(t[v])
                    cells.append(f"{m:9.1f}" + (" " * 15 if v == VARIANTS[0]
                                                else f" ({m - base:+9.1f})  "))
                print(f"    {'rank %d' % rank:32} {kind:5} " + " ".join(cells))
    print("  one bucket of 21 floats, the hook alone in a loop, us per bucket (best of 5):")
    for rank in range(a.world):
        (own, ours), = [tuple(got[rank]["per bucket"]["per bucket"].items())]
        print(f"    rank {rank}: {own[0]} {own[1]:.1f}, {ours[0]} {ours[1]:.1f}: "
              f"added {ours[1] - own[1]:+.1f}")


if __name__ == "__main__":
    main()
