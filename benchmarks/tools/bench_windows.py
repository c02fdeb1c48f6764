"""Do the triggered windows open where a rank slowed, and only there
(docs/windows.md, issue 70)?  A third-party training script runs unchanged
under `dftracer run` and torchrun (4 ranks, CPU, gloo), one rank's model
forward slowed by a CPU spin of a share of the balanced median step, for a
few steps in a row at random points (fault_inject.py --steps); then a clean
run of the same script, no fault.  Per run it prints the slowdowns, whether
the slowed rank opened a window over each (caught), the windows on the
other ranks (they wait for it in their collectives, so their steps slow
too), the windows that cover no slowdown (false), and the slowed rank's
windows' top place (the spin is fault_inject.py's `slow`).

    python benchmarks/tools/bench_windows.py --script /path/nanoGPT/train_cpu.py \\
        --module GPT --script-args "$(cat args.txt)" --iters 300 [--runs 3] \\
        [--slowdowns 5 --length 3 --share 25 --rank 2] [--call-offset 2] \\
        [--clean-iters 500] [--burners 2] [--seed 1] [--keep DIR]

--iters is how many steps the script's arguments make it run (they are
passed as they are); --clean-iters, the clean run's, given with the same
`--max_iters=` spelling nanoGPT uses (the argument is replaced).  The model
class's forward calls are counted from the first (fault_inject.py):
--call-offset is how many come before step 0's (nanoGPT's first evaluation,
eval_iters per split: 2 with --eval_iters=1).  Run it with the interpreter
that has dftracer, torch and torchrun installed (`make setup-test`, then
`.venv/bin/python benchmarks/tools/bench_windows.py ...`)."""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Sequence

from bench_tools import run_cli  # this script's folder is sys.path[0]

HERE = os.path.dirname(os.path.abspath(__file__))
INJECT = os.path.join(HERE, "fault_inject.py")


def job(out: str, script: str, args: List[str], module: str, ranks: int,
        fault: Sequence[str] = ()) -> None:
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    cmd = [sys.executable, "-m", "dftracer", "run", "-q", "--log-file", os.path.join(out, "t"),
           "--", torchrun, "--standalone", "--nproc_per_node", str(ranks), INJECT,
           "--module", module, *fault, "--", script, *args]
    proc = subprocess.run(cmd, cwd=os.path.dirname(script), capture_output=True, text=True,
                          timeout=1800)
    if proc.returncode != 0:
        sys.exit(f"the job failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def windows(out: str) -> List[Dict[str, Any]]:
    report = out.rstrip("/") + "-windows.json"
    run_cli(["summary", "--windows", "--json", out], report)
    with open(report) as f:
        rows = json.load(f)["windows"]
    os.unlink(report)
    return rows


def median_step_us(out: str, rank: int) -> float:
    """The rank's median iteration in its own trace (its workers have none)."""
    from dftracer.tools.windows import read_file

    for path in glob.glob(os.path.join(out, "*.pfw.gz")):
        f = read_file(path)
        if f["rank"] == rank and f["iterations"]:
            return float(statistics.median(int(e["dur"]) for e in f["iterations"]))
    sys.exit(f"no iterations of rank {rank} in {out}")


def pick(iters: int, count: int, length: int, rng: random.Random) -> List[int]:
    """count starts in [warm-up, iters - tail), at least 40 steps apart (the
    windows' gap is 20 steps: each slowdown can be caught on its own)."""
    lo, hi, apart = 30, iters - 3 * length - 10, 40
    for _ in range(10000):
        starts = sorted(rng.sample(range(lo, hi), count))
        if all(b - a >= apart for a, b in zip(starts, starts[1:])):
            return starts
    sys.exit(f"cannot fit {count} slowdowns {apart} steps apart in {iters} steps")


def overlaps(w: Dict[str, Any], s: int, length: int, slack: int) -> bool:
    return w["step_first"] <= s + length - 1 + slack and w["step_last"] >= s - slack


def judge(rows: List[Dict[str, Any]], starts: List[int], length: int, rank: int,
          slack: int) -> Dict[str, Any]:
    mine = [w for w in rows if w["rank"] == rank]
    caught = [any(overlaps(w, s, length, slack) for w in mine) for s in starts]
    false = [w for w in rows if not any(overlaps(w, s, length, slack) for s in starts)]
    others = [w for w in rows if w["rank"] != rank and w not in false]
    places = [w["places"][0]["place"] if w["places"] else "-" for w in mine
              if w not in false]
    return {"caught": sum(caught), "of": len(starts), "others": len(others),
            "false": len(false), "false_at": [(w["rank"], w["step_first"]) for w in false],
            "places": places}


def with_iters(args: List[str], n: int) -> List[str]:
    out = [a for a in args if not a.startswith("--max_iters=") and
           not a.startswith("--lr_decay_iters=")]
    return out + [f"--max_iters={n}", f"--lr_decay_iters={n}"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--script", required=True)
    p.add_argument("--module", required=True, help="the model class whose forward is slowed")
    p.add_argument("--script-args", default="")
    p.add_argument("--iters", type=int, required=True, help="steps the script's arguments run")
    p.add_argument("--clean-iters", type=int, default=500)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--rank", type=int, default=2)
    p.add_argument("--slowdowns", type=int, default=5)
    p.add_argument("--length", type=int, default=3, help="steps slowed in a row")
    p.add_argument("--share", type=float, default=25.0, help="%% of the median step")
    p.add_argument("--call-offset", type=int, default=0)
    p.add_argument("--slack", type=int, default=2, help="steps a window may be off by")
    p.add_argument("--burners", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep", default=None)
    a = p.parse_args()
    script = os.path.abspath(a.script)
    args = a.script_args.split()
    rng = random.Random(a.seed)
    base = a.keep or tempfile.mkdtemp(prefix="bench-windows-")
    os.makedirs(base, exist_ok=True)
    burners = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(a.burners)]
    try:
        clean = os.path.join(base, "clean")
        job(clean, script, with_iters(args, a.clean_iters), a.module, a.ranks)
        crow = windows(clean)
        med = median_step_us(clean, a.rank)
        spin = med * a.share / 100 / 1e3
        print(f"# {a.script} {a.ranks} ranks beside {a.burners} burners; balanced median step "
              f"{med / 1e3:.2f} ms (rank {a.rank}, the clean run); the slowdown: "
              f"{spin:.2f} ms spin = {a.share:g} %, {a.length} steps, {a.slowdowns} times in "
              f"{a.iters}")
        print(f"clean run, {a.clean_iters} steps: {len(crow)} windows "
              f"{[(w['rank'], w['trigger'], w['step_first']) for w in crow]}")
        total = caught = 0
        for r in range(a.runs):
            starts = pick(a.iters, a.slowdowns, a.length, rng)
            calls = ",".join(f"{s + a.call_offset}-{s + a.call_offset + a.length - 1}"
                             for s in starts)
            out = os.path.join(base, f"run-{r}")
            job(out, script, args, a.module, a.ranks,
                ["--rank", str(a.rank), "--spin-ms", f"{spin:.2f}", "--steps", calls])
            v = judge(windows(out), starts, a.length, a.rank, a.slack)
            total += v["of"]
            caught += v["caught"]
            print(f"run {r}: slowed steps {starts}: caught {v['caught']}/{v['of']} on rank "
                  f"{a.rank}; {v['others']} on other ranks; {v['false']} false "
                  f"{v['false_at']}; rank {a.rank}'s top places {v['places']}")
            if not a.keep:
                shutil.rmtree(out, ignore_errors=True)
        print(f"caught {caught} of {total} slowdowns ({100 * caught / max(total, 1):.0f} %); "
              f"clean run: {len(crow)} windows")
    finally:
        for b in burners:
            b.kill()
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
