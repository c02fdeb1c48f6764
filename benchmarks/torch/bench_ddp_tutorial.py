"""A third-party DDP script under `dftracer run` against the same script
untraced (issue 35): pytorch/examples' distributed/ddp-tutorial-series/
multigpu_torchrun.py made to run on CPU (backend "gloo", snapshots loaded
to "cpu"), 2 ranks under `torchrun --standalone --nproc_per_node 2`, runs
interleaved (untraced, traced, untraced, ...), each in a fresh directory
(the script resumes from ./snapshot.pt otherwise).

Per-step time is measured inside every rank the same way in both modes: the
script runs through a small runner (written next to the runs) that defines
the script's names, wraps `Trainer._run_batch` (one training step: zero_grad,
forward, loss, backward with DDP's all-reduce, optimizer step) with a timer
(time.perf_counter for wall, time.process_time for the CPU of every thread of
the rank: the tracer's writer and gloo's threads count), then runs the
script's `if __name__ == "__main__":` block.  The timer costs the same
~1 us in both modes.  The first --skip steps of each rank's run are dropped
(start-up, DDP's bucket rebuild).

    PYTHONPATH=. python3 benchmarks/torch/bench_ddp_tutorial.py SCRIPT \\
        [--pairs 4] [--epochs 10] [--batch-size 32]

Prints, per mode, the median per-step wall and CPU time over all steps of
all runs of both ranks, the traced/untraced ratios, and the median of the
per-pair ratios (their spread says how noisy the machine was)."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_autotrace import cpu  # type: ignore[import-not-found]  # noqa: E402

RUNNER = '''
import ast, atexit, os, sys, time
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
with open(script) as f:
    tree = ast.parse(f.read(), script)
main = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
tree.body = [n for n in tree.body if n not in main]
ns = {"__name__": "__mp_main__", "__file__": script}
exec(compile(tree, script, "exec"), ns)
rows = []
run_batch = ns["Trainer"]._run_batch

def _run_batch(self, *args):
    c, t = time.process_time(), time.perf_counter()
    run_batch(self, *args)
    rows.append((t, c, time.perf_counter() - t, time.process_time() - c))

ns["Trainer"]._run_batch = _run_batch

def save():
    with open(os.environ["BENCH_STEPS_OUT"] + "-" + os.environ["RANK"], "w") as f:
        f.write("\\n".join(" ".join(f"{v:.9f}" for v in r) for r in rows))

atexit.register(save)
ns["__name__"] = "__main__"
for n in main:
    exec(compile(ast.Module(body=n.body, type_ignores=[]), script, "exec"), ns)
'''


def torchrun() -> List[str]:
    script = os.path.join(os.path.dirname(sys.executable), "torchrun")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "torch.distributed.run"]


def clean_env() -> Dict[str, str]:
    """The environment less dftracer's settings, but for which DDP hook and
    where it is built."""
    keep = ("DFTRACER_DDP_HOOK", "DFTRACER_CACHE_DIR")
    return {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_") or k in keep}


def one_run(work: str, runner: str, script: str, traced: bool, n: int,
            extra: List[str], options: List[str]) -> List[Tuple[float, ...]]:
    run_dir = os.path.join(work, f"{'traced' if traced else 'plain'}-{n}")
    os.makedirs(run_dir)
    out = os.path.join(run_dir, "steps")
    cmd = torchrun() + ["--standalone", "--nproc_per_node", "2", runner, script] + extra
    if traced:
        cmd = [sys.executable, "-m", "dftracer", "run", "-q", "--log-file",
               os.path.join(run_dir, "trace")] + options + ["--"] + cmd
    env = dict(clean_env(), BENCH_STEPS_OUT=out, OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, cwd=run_dir, env=env, capture_output=True, text=True,
                          timeout=1800)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    steps: List[Tuple[float, ...]] = []
    for rank in (0, 1):
        with open(f"{out}-{rank}") as f:
            rows = [tuple(map(float, line.split())) for line in f if line.strip()]
        # a step: from one _run_batch's start to the next's (the data too),
        # and the _run_batch call alone
        steps += [(b[0] - a[0], b[1] - a[1], a[2], a[3])
                  for a, b in zip(rows, rows[1:])][SKIP:]
    return steps


SKIP = 10


def main() -> None:
    global SKIP
    ap = argparse.ArgumentParser()
    ap.add_argument("script", help="multigpu_torchrun.py made to run on CPU + gloo")
    ap.add_argument("--pairs", type=int, default=4, help="untraced/traced run pairs")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--save-every", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--skip", type=int, default=SKIP, help="first steps of each run dropped")
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    ap.add_argument("--options", default="", help="options of `dftracer run` (e.g. --no-torch)")
    a = ap.parse_args()
    SKIP = a.skip
    script = os.path.abspath(a.script)
    # `dftracer run` uses the native DDP hook where it is built (docs/ai.md):
    # built here first, so that every traced run has it, as a user's runs
    # after the first do (DFTRACER_DDP_HOOK=c in the environment: the C hook)
    if os.environ.get("DFTRACER_DDP_HOOK", "auto") != "c":
        from dftracer._autotrace import ddp_native

        print(f"native DDP hook: {ddp_native.module_path()}", flush=True)
        ddp_native._build_once()
    work = tempfile.mkdtemp(prefix="bench-ddp-tutorial-")
    runner = os.path.join(work, "timed_runner.py")
    with open(runner, "w") as f:
        f.write(RUNNER)
    extra = [str(a.epochs), str(a.save_every), "--batch_size", str(a.batch_size)]
    runs: Dict[bool, List[List[Tuple[float, ...]]]] = {False: [], True: []}
    for n in range(a.pairs):
        for traced in ((False, True) if n % 2 == 0 else (True, False)):
            runs[traced].append(one_run(work, runner, script, traced, n, extra,
                                        a.options.split()))
    med: Dict[bool, List[float]] = {}
    for traced, rs in runs.items():
        every = [s for r in rs for s in r]
        med[traced] = [statistics.median(s[k] for s in every) * 1e6 for k in range(4)]
    pair_ratios = [[statistics.median(s[k] for s in t) / statistics.median(s[k] for s in u)
                    for u, t in zip(runs[False], runs[True])] for k in range(4)]
    steps = len(runs[False][0])
    print(f"{os.path.basename(script)}, 2 ranks (torchrun), gloo, {a.pairs} interleaved pairs of "
          f"runs, {steps} steps a run (both ranks, first {SKIP} of each dropped), batch "
          f"{a.batch_size}; dftracer run {a.options}; {cpu()}:")
    print(f"  {'':28} {'untraced':>10} {'dftracer run':>13} {'ratio':>7} {'per-pair ratios'}")
    for k, what in enumerate(("wall per step (us)", "CPU per step (us)",
                              "wall in _run_batch (us)", "CPU in _run_batch (us)")):
        u, t = med[False][k], med[True][k]
        pairs = ", ".join(f"{r:.3f}" for r in pair_ratios[k])
        print(f"  {what:28} {u:10.1f} {t:13.1f} {t / u:7.3f} [{pairs}] "
              f"(median {statistics.median(pair_ratios[k]):.3f})")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"  runs in {work}")


if __name__ == "__main__":
    main()
