"""The straggler rule's power and false-positive rate on real DDP jobs
(docs/cli.md, "Stragglers"): a 4-rank language-model loop shaped like
nanoGPT's train.py (tests/tools/lm_ddp_prog.py: no DataLoader, no explicit
collective), on CPU and gloo under `dftracer run`, balanced or with one rank
slowed by a share of the step in its forward or its get_batch; optionally
beside CPU burners.  Per case it prints how many runs named the slowed rank
first, named another rank, or named nobody.

    python benchmarks/tools/bench_stragglers.py [--runs 5] [--iters 60]
        [--shares 0,5,10,25] [--where forward,get_batch] [--burners 2] [--ranks 4]
        [--keep-wrong DIR]

Run it with the interpreter that has dftracer and torch installed (the
package, not a source tree: `make setup-test`, then `.venv/bin/python
benchmarks/tools/bench_stragglers.py`).  A share is of the balanced job's
median step, measured first in the same run.  Each run takes 15 to 40 s on
a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

from bench_tools import run_cli  # this script's folder is sys.path[0]

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "..", "..", "tests", "tools", "lm_ddp_prog.py")


def burn(stop: Any) -> None:
    while not stop.is_set():
        pass


def run(base: str, data: str, ranks: int, iters: int, slow: Optional[tuple],
        keep: Optional[str] = None) -> Dict[str, Any]:
    """One job's `summary --ranks --json`; its traces are removed, or moved
    under keep when it named a rank it should not have (a["kept"])."""
    out = tempfile.mkdtemp(prefix="run-", dir=base)
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    cmd = [sys.executable, "-m", "dftracer", "run", "-q", "--log-file",
           os.path.join(out, "t"), "--", torchrun, "--standalone", "--nproc_per_node",
           str(ranks), PROG, data, "--iters", str(iters)]
    if slow:
        cmd += ["--slow-rank", str(slow[0]), "--slow", slow[1], "--slow-ms", f"{slow[2]:.2f}"]
    subprocess.run(cmd, cwd=out, check=True, capture_output=True, timeout=900)
    report = out + ".json"
    run_cli(["summary", out, "--ranks", "--json", "--no-progress"], report)
    with open(report) as f:
        a = json.load(f)
    os.unlink(report)
    s = a["stragglers"]
    if keep and s and (not slow or s[0]["rank"] != slow[0]):
        os.makedirs(keep, exist_ok=True)
        a["kept"] = shutil.move(out, os.path.join(keep, os.path.basename(out)))
    else:
        shutil.rmtree(out, ignore_errors=True)
    return a


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--iters", type=int, default=60)
    p.add_argument("--shares", default="0,5,10,25", help="percent of the step; 0: balanced")
    p.add_argument("--where", default="forward,get_batch")
    p.add_argument("--burners", type=int, default=2)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--keep-wrong", metavar="DIR", default=None,
                   help="move the traces of each run that named a rank it should not have "
                        "(balanced: any) under DIR, to see why")
    a = p.parse_args()
    base = tempfile.mkdtemp(prefix="bench-stragglers-")
    data = os.path.join(base, "data")
    stop = multiprocessing.Event()
    burners = [multiprocessing.Process(target=burn, args=(stop,), daemon=True)
               for _ in range(a.burners)]
    for b in burners:
        b.start()
    try:
        cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                    if ln.startswith("model name")), "?")
        print(f"CPU: {cpu}, {os.cpu_count()} cores; {a.burners} burners; {a.ranks} ranks, "
              f"{a.iters} iterations a run; slowed rank {a.ranks // 2}", flush=True)
        first = run(base, data, a.ranks, a.iters, None)
        step_ms = first["median_step_us"] / 1e3
        print(f"balanced median step: {step_ms:.1f} ms", flush=True)
        slow_rank = a.ranks // 2
        print(f"{'case':<22} {'runs':>4} {'right':>5} {'wrong':>5} {'none':>5}  "
              "named (rank, mean lead ms +- se, cause) per run", flush=True)
        for share in [float(x) for x in a.shares.split(",")]:
            for where in (a.where.split(",") if share else ["-"]):
                right = wrong = none = 0
                notes: List[str] = []
                t0 = time.time()
                for _ in range(a.runs):
                    slow = (slow_rank, where, share / 100 * step_ms) if share else None
                    res = run(base, data, a.ranks, a.iters, slow, a.keep_wrong)
                    s = res["stragglers"]
                    if not s:
                        none += 1
                        notes.append("-")
                        continue
                    if share and s[0]["rank"] == slow_rank:
                        right += 1
                    else:
                        wrong += 1
                    notes.append(f"{s[0]['rank']} {s[0]['mean_lead_us'] / 1e3:.1f}+-"
                                 f"{s[0]['stderr_us'] / 1e3:.1f} "
                                 f"{s[0]['cause_class']}:{s[0]['cause_name']}" +
                                 (f" (kept: {res['kept']})" if "kept" in res else ""))
                case = "balanced" if not share else f"{share:g}% {where}"
                print(f"{case:<22} {a.runs:>4} {right:>5} {wrong:>5} {none:>5}  "
                      f"{'; '.join(notes)}  ({time.time() - t0:.0f} s)", flush=True)
    finally:
        stop.set()
        for b in burners:
            b.join(timeout=5)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
