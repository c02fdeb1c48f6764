"""CUPTI benchmark (GPU): the added time per kernel of recording GPU activity.

Run:  PYTHONPATH=$PWD python3 benchmarks/gpu/bench_cupti.py [--kernels N] [--repeats R]

A launch-heavy loop of tiny kernels (x.add_(1) on a one-element CUDA tensor,
then one synchronize) runs in three modes, each in a fresh interpreter,
alternated R times so that they are measured side by side:
  off     dftracer not tracing
  trace   dftracer tracing, CUPTI off
  cupti   dftracer tracing with DFTRACER_ENABLE_CUPTI=1
and prints the best ns per kernel of each, the added ns per kernel of cupti
over trace, and the number of kernel events the trace holds (all N, or the
count CUPTI dropped).  Exits with a message when there is no GPU.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import subprocess
import sys
import tempfile
import textwrap

LOOP = textwrap.dedent(
    r"""
    import json, sys, time, torch
    from dftracer.python import dftracer
    n, stem = int(sys.argv[1]), sys.argv[2]
    log = dftracer.initialize_log(stem)
    x = torch.zeros(1, device="cuda")
    for _ in range(2000):              # warm up: context, allocator, CUPTI buffers
        x.add_(1)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            x.add_(1)
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter_ns() - t0) / n)
    log.finalize()
    print(json.dumps({"ns_per_kernel": best}))
    """
)

MODES = {
    "off": {},
    "trace": {"DFTRACER_ENABLE": "1"},
    "cupti": {"DFTRACER_ENABLE": "1", "DFTRACER_ENABLE_CUPTI": "1"},
}


def skip(why: str) -> None:
    print(f"bench_cupti: skipped: {why}", file=sys.stderr)
    sys.exit(0)


def gpu_or_exit() -> None:
    try:
        import torch
    except ImportError:
        skip("torch is not installed (needs torch with CUDA and a GPU)")
    if not torch.cuda.is_available():
        skip("no CUDA GPU visible to torch")
    from dftracer.python import cupti

    if not cupti.available():
        sys.exit("bench_cupti: CUPTI unavailable: " + cupti.reason())


def count_kernels(stem: str) -> int:
    n = 0
    for path in glob.glob(stem + "-*-app.pfw.gz"):
        with gzip.open(path, "rt") as f:
            for line in f:
                if '"cat":"CUDA"' in line and '"grid_x"' in line:
                    n += 1
    return n


def run(mode: str, n: int, stem: str) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env.update(MODES[mode])
    proc = subprocess.run([sys.executable, "-c", LOOP, str(n), stem], env=env,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        sys.exit(f"bench_cupti: mode {mode} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["ns_per_kernel"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    gpu_or_exit()
    best = {m: float("inf") for m in MODES}
    kernels_traced = 0
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for mode in MODES:
                stem = os.path.join(tmp, f"{mode}{r}")
                best[mode] = min(best[mode], run(mode, args.kernels, stem))
                if mode == "cupti":
                    kernels_traced = count_kernels(stem)
    expected = 2000 + 3 * args.kernels
    print(f"{'mode':8} {'ns/kernel':>10}")
    for mode in MODES:
        print(f"{mode:8} {best[mode]:10.0f}")
    added = best["cupti"] - best["trace"]
    print(f"added by CUPTI: {added:.0f} ns per kernel "
          f"({best['cupti'] / best['trace']:.2f}x the traced loop)")
    print(f"kernel events in the last cupti trace: {kernels_traced} of {expected} launched")


if __name__ == "__main__":
    main()
