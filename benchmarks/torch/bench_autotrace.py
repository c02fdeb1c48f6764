"""What the torch events of an unchanged program cost (dftracer/_autotrace,
docs/ai.md "Events of an unchanged script"), measured side by side in one run.

1. Per-hook costs, in this process, tracing on, hooks installed and removed
   in alternating rounds: a module call inside a model (torch's dispatch of
   global hooks plus our pair), our hook pair alone, a top-level forward
   (its event, through the C forward set on the module), backward() of its
   output (its event, at the autograd engine's entry), one optimizer.step,
   one `item` of a map-style and of an iterable-dataset fetch, and
   @dft_fn.log on an empty function
   (the decorator's cost, for comparison).
2. DDP's gradient all-reduce per backward: our bucket hook (the native one,
   built first unless DFTRACER_DDP_HOOK=c) against DDP's own (C++)
   reduction and torch's Python allreduce_hook, three models side by side
   in the same 2 ranks (forked, gloo), alternating each step.
3. Per-step time of two unchanged programs, run alternately without
   dftracer (off), under `dftracer run --no-torch` (tracing, no torch
   events) and under `dftracer run` (on): tests/torch_integration/ddp_script.py under
   torchrun (4 ranks, gloo, CPU) and benchmarks/torch/autotrace_gpt2.py (a
   transformers GPT-2 from a small config; skipped with a message when
   transformers is not installed).  The median step (first steps left out)
   of every round, then the median over rounds.

    PYTHONPATH=. python3 benchmarks/torch/bench_autotrace.py [--rounds R] [--skip-workloads]

On a shared machine the per-step figures of (3) move by more than the
hooks cost (compare `off` with `--no-torch`, which differ only by tracing
with no torch events); (1) and (2) alternate in one process and hold.

Targets (issue 35): a module hook pair <= 0.3 us, an optimizer step <= 1 us,
an `item` <= 0.5 us, each printed next to the decorator's cost measured in
the same run; per-step time on within 2% of off.  The short-step loop of
issue 35's acceptance is benchmarks/torch/bench_autotrace_loop.py.
"""

from __future__ import annotations

import argparse
import glob
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DDP_EXAMPLE = os.path.join(ROOT, "tests", "torch_integration", "ddp_script.py")
GPT2 = os.path.join(ROOT, "benchmarks", "torch", "autotrace_gpt2.py")


def clean_env() -> Dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}


def cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} CPUs"
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs"


# ---- 1. hook costs -------------------------------------------------------------


def per_call_us(fn: Callable[[], object], n: int) -> float:
    """Best of 5 runs of n calls, microseconds per call."""
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - t)
    return best / n * 1e6


def hook_costs(rounds: int) -> None:
    directory = tempfile.mkdtemp(prefix="bench-autotrace-")
    os.environ["DFTRACER_ENABLE"] = "1"
    import torch
    from torch.utils.data._utils import fetch as fetch_module

    from dftracer import _core
    from dftracer._autotrace import _base, data, modules, optim, steps
    from dftracer.python import dft_fn

    _core.logger.initialize_log(os.path.join(directory, "hooks"), None, -1)
    steps.install()
    modules.WINDOW_FORWARDS = 10 ** 9  # the search ends when this benchmark says
    modules.WINDOW_ITERATIONS = 10 ** 9
    modules.SEARCH_ENDS_ON_REPEAT = False
    torch.set_num_threads(1)
    width = 1000
    model = torch.nn.Sequential(*[torch.nn.Identity() for _ in range(width)])
    x = torch.zeros(4)
    top = torch.nn.Linear(4, 4)
    param = torch.nn.Parameter(torch.zeros(1))
    param.grad = torch.zeros(1)
    opt = torch.optim.SGD([param], lr=0.1)
    leaf = torch.nn.Identity()
    pre, post = _core._at_forward_pre, _core._at_forward_post
    samples = list(range(4096))  # a dataset whose __getitem__ costs next to nothing
    fetcher = fetch_module._MapDatasetFetcher(samples, True, lambda batch: batch, False)
    # an endless stream whose next() costs next to nothing
    stream = fetch_module._IterableDatasetFetcher(itertools.repeat(0), True, lambda batch: batch,
                                                  False)
    batch = list(range(16))

    def empty() -> None:
        pass

    decorated = dft_fn("bench").log(empty)

    def per_module() -> float:
        return per_call_us(lambda: model(x), 20) / width

    def pair() -> None:
        pre(leaf, ())
        post(leaf, (), None)

    opt_pre, opt_post = _core._at_optimizer_pre, _core._at_optimizer_post

    def opt_pair() -> None:  # one optimizer.step event and one iteration event
        opt_pre(opt, (), {})
        opt_post(opt, (), {})

    def per_item() -> float:
        return per_call_us(lambda: fetcher.fetch(batch), 5000) / len(batch)

    def per_next() -> float:
        return per_call_us(lambda: stream.fetch(batch), 5000) / len(batch)

    rows = {"module call in a 1000-module model, searching": [],
            "module call in a 1000-module model, after": [],
            "our hook pair alone (a nested module)": [],
            "top-level forward (Linear, output with grad)": [],
            "backward() of that output (retain_graph)": [],
            "optimizer.step (SGD, one parameter)": [],
            "our optimizer hook pair alone (step + iteration)": [],
            "item (one sample of a map-style fetch)": [],
            "item (one sample of an iterable-dataset fetch)": [],
            "decorator: @dft_fn.log on an empty function": []}
    base: Dict[str, List[float]] = {"module": [], "top": [], "bwd": [], "step": [], "item": [],
                                    "next": [], "call": []}
    y = top(x).sum()

    def backward() -> None:
        y.backward(retain_graph=True)

    for _ in range(rounds):
        base["module"].append(per_module())
        base["top"].append(per_call_us(lambda: top(x), 2000))
        base["bwd"].append(per_call_us(backward, 2000))
        base["step"].append(per_call_us(opt.step, 2000))
        base["item"].append(per_item())
        base["next"].append(per_next())
        base["call"].append(per_call_us(empty, 200000))
        rows["decorator: @dft_fn.log on an empty function"].append(
            per_call_us(decorated, 200000))
        modules.install()
        optim.install()
        data.install()
        rows["module call in a 1000-module model, searching"].append(per_module())
        _core._at_set_depth(1)  # as inside a model's forward: the nested path
        rows["our hook pair alone (a nested module)"].append(
            per_call_us(pair, 20000) - per_call_us(lambda: None, 20000))
        _core._at_set_depth(0)
        top(x)
        modules.end_search()  # model and top have their C forward now
        rows["module call in a 1000-module model, after"].append(per_module())
        rows["top-level forward (Linear, output with grad)"].append(
            per_call_us(lambda: top(x), 2000))
        rows["backward() of that output (retain_graph)"].append(per_call_us(backward, 2000))
        rows["optimizer.step (SGD, one parameter)"].append(per_call_us(opt.step, 2000))
        rows["our optimizer hook pair alone (step + iteration)"].append(
            per_call_us(opt_pair, 20000) - per_call_us(lambda: None, 20000))
        rows["item (one sample of a map-style fetch)"].append(per_item())
        rows["item (one sample of an iterable-dataset fetch)"].append(per_next())
        for name in ("modules", "optimizer", "dataloader"):
            _base.part(name).uninstall()
    off = {k: statistics.median(v) for k, v in base.items()}
    which = ["module", "module", None, "top", "bwd", "step", None, "item", "next", "call"]
    targets = [None, None, 0.3, None, None, None, 1.0, 0.5, 0.5, None]
    print(f"hook costs, us (median of {rounds} rounds; {cpu()}; tracing to {directory}):")
    print(f"  {'':48} {'off':>7} {'on':>7} {'added':>7} {'target':>7}")
    added = {}
    for (name, values), key, target in zip(rows.items(), which, targets):
        on = statistics.median(values)
        cost = on if key is None else on - off[key]
        added[name] = cost
        tail = "" if target is None else f" {'<= ' + str(target):>7} {'ok' if cost <= target else 'OVER'}"
        if key is None:
            print(f"  {name:48} {'':>7} {'':>7} {cost:7.3f}{tail}")
        else:
            print(f"  {name:48} {off[key]:7.3f} {on:7.3f} {cost:7.3f}{tail}")
    deco = added["decorator: @dft_fn.log on an empty function"]
    print(f"  per hook / decorator: pair {added['our hook pair alone (a nested module)'] / deco:.1f}x, "
          f"step {added['our optimizer hook pair alone (step + iteration)'] / deco:.1f}x, "
          f"item {added['item (one sample of a map-style fetch)'] / deco:.1f}x, "
          f"iterable item {added['item (one sample of an iterable-dataset fetch)'] / deco:.1f}x")
    print("  searching: global hooks, torch dispatches hooks on every module call; after:")
    print("  no module hooks, the top-level modules found have a C forward (docs/performance.md)")


# ---- 2. DDP's bucket hook -------------------------------------------------------


def _ddp_rank(rank: int, store: str, steps: int, out: Any) -> None:
    try:
        _ddp_rank_steps(rank, store, steps, out)
    except Exception as exc:  # e.g. autograd's device threads, started before the fork
        out.put({"error": f"rank {rank}: {type(exc).__name__}: {exc}"})


def _ddp_rank_steps(rank: int, store: str, steps: int, out: Any) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dftracer._autotrace import ddp as ours

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)

    def net() -> Any:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

    with_ours = DDP(net())
    ours.P.on = False
    kind = "native C++" if ours._native.get(with_ours) else "C"
    models = {"DDP's own reduction (C++)": DDP(net()), f"our bucket hook ({kind})": with_ours,
              "torch's allreduce_hook (Python)": DDP(net())}
    models["torch's allreduce_hook (Python)"].register_comm_hook(None, default_hooks.allreduce_hook)
    x = torch.randn(8, 8)
    times: Dict[str, List[float]] = {k: [] for k in models}
    for _ in range(steps):
        for name, model in models.items():
            t = time.perf_counter()
            model(x).sum().backward()
            times[name].append(time.perf_counter() - t)
    if rank == 0:
        out.put({k: statistics.median(v[steps // 5:]) * 1e6 for k, v in times.items()})
    dist.destroy_process_group()


def ddp_hook_cost(steps: int = 400) -> None:
    import multiprocessing as mp

    import dftracer._autotrace.hooks as hooks

    hooks.install()  # tracing is on (hook_costs ran): DDP models get our hook
    if os.environ.get("DFTRACER_DDP_HOOK", "auto") != "c":
        from dftracer._autotrace import ddp_native

        ddp_native._build_once()  # the hook `dftracer run` uses once built (docs/ai.md)
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="bench-autotrace-") as d:
        ranks = [ctx.Process(target=_ddp_rank, args=(r, os.path.join(d, "store"), steps, out))
                 for r in range(2)]
        [p.start() for p in ranks]
        result = out.get(timeout=600)
        if "error" in result:  # the other rank waits for its peer: stop both
            [p.terminate() for p in ranks]
        [p.join() for p in ranks]
    if "error" in result:
        print(f"\nDDP forward + backward: not measured in forked ranks here ({result['error']}); "
              "benchmarks/torch/bench_ddp_hook.py measures it in fresh processes")
        return
    base = result["DDP's own reduction (C++)"]
    print(f"\nDDP forward + backward, us (2 ranks, gloo, median of {steps} steps each, "
          "alternating):")
    for name, us in result.items():
        print(f"  {name:40} {us:9.1f} {us - base:+8.1f}")


# ---- 3. per-step time of unchanged programs ---------------------------------------

MODES = ("off", "no-torch", "on")
CLOCKS = ("wall", "cpu")  # cpu: the process's CPU time, steadier on a shared machine


def run_mode(mode: str, command: List[str], directory: str, env: Dict[str, str]) -> None:
    if mode != "off":
        options = ["--no-torch"] if mode == "no-torch" else []
        command = [sys.executable, "-m", "dftracer", "run", "-q", *options, "--log-file",
                   os.path.join(directory, "trace"), "--"] + command
    proc = subprocess.run(command, cwd=directory, env=env, capture_output=True, text=True,
                          timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{proc.stderr[-3000:]}")


def median_step(paths: List[str], warm: int, clock: str) -> float:
    """Median over every process's steps after the first `warm` (seconds)."""
    steps: List[float] = []
    for path in paths:
        with open(path) as f:
            steps += json.load(f)[clock][warm:]
    return statistics.median(steps)


def ddp_command(directory: str, steps: int) -> List[str]:
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    launcher = [torchrun] if os.path.exists(torchrun) else [sys.executable, "-m",
                                                            "torch.distributed.run"]
    return launcher + ["--standalone", "--nproc_per_node", "4", DDP_EXAMPLE, "--steps",
                       str(steps), "--step-times", os.path.join(directory, "steps")]


def gpt2_command(directory: str, steps: int) -> List[str]:
    return [sys.executable, GPT2, "--steps", str(steps), "--out",
            os.path.join(directory, "steps-gpt2.json")]


def workload(make: Callable[[str, int], List[str]], steps: int, rounds: int,
             warm: int) -> Dict[str, Dict[str, float]]:
    """{clock: {mode: ms}}: the median over rounds of each round's median step."""
    times: Dict[str, Dict[str, List[float]]] = {c: {m: [] for m in MODES} for c in CLOCKS}
    env = clean_env()
    env.setdefault("OMP_NUM_THREADS", "1")
    for _ in range(rounds):
        for mode in MODES:
            with tempfile.TemporaryDirectory(prefix="bench-autotrace-") as d:
                run_mode(mode, make(d, steps), d, env)
                paths = glob.glob(os.path.join(d, "steps*.json"))
                for clock in CLOCKS:
                    times[clock][mode].append(median_step(paths, warm, clock))
    return {c: {m: statistics.median(v) * 1e3 for m, v in t.items()} for c, t in times.items()}


def transformers_missing() -> Optional[str]:
    proc = subprocess.run([sys.executable, "-c", "import transformers"], capture_output=True,
                          text=True, env=clean_env())
    return None if proc.returncode == 0 else proc.stderr.strip().splitlines()[-1]


def workloads(rounds: int) -> None:
    print(f"\nper-step time, ms (median step, median of {rounds} alternated rounds; {cpu()}):")
    print(f"  {'':34} {'off':>8} {'--no-torch':>11} {'on':>8} {'on/off':>7}")
    table = [("DDP example, 4 ranks", ddp_command, 60, 10)]
    missing = transformers_missing()
    if missing is None:
        table.append(("GPT-2 (transformers)", gpt2_command, 30, 5))
    for name, make, steps, warm in table:
        r = workload(make, steps, rounds, warm)
        for clock in CLOCKS:
            t = r[clock]
            label = f"{name}, {clock}"
            print(f"  {label:34} {t['off']:8.2f} {t['no-torch']:11.2f} {t['on']:8.2f} "
                  f"{t['on'] / t['off']:7.3f}")
    if missing is not None:
        print(f"  GPT-2: skipped, transformers is not installed ({missing})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--skip-workloads", action="store_true", help="only the per-hook costs")
    args = p.parse_args()
    if not args.skip_workloads:  # first: the others leave tracing on in this process
        workloads(args.rounds)
    hook_costs(max(args.rounds, 3))
    ddp_hook_cost()
    from dftracer import _core

    _core.logger.finalize()


if __name__ == "__main__":
    main()
