"""The straggler rule's power and false-positive rate on real DDP jobs
(docs/cli.md, "Stragglers"): a 4-rank language-model loop shaped like
nanoGPT's train.py (tests/tools/lm_ddp_prog.py: no DataLoader, no explicit
collective), on CPU and gloo under `dftracer run`, balanced or with one rank
slowed by a share of the step in its forward (a wait to a deadline), by a
CPU spin in a forward pre-hook (`spin`: work of its own, which on a loaded
machine also makes it wait longer for a CPU) or in its get_batch; beside
CPU burners, at each load asked for.  Per load and case it prints how many
runs named the slowed rank first with a work cause (right), named another
rank or the slowed one with no work cause (wrong), or named nobody (none),
and how many named some rank with a work cause (compute, data, I/O,
communication, checkpoint, untraced code) -- in a balanced run, a false
positive; a rank named `waiting for a CPU` (its machine, not its work) is
counted apart (cpu).

    python benchmarks/tools/bench_stragglers.py [--runs 5] [--iters 60]
        [--shares 0,5,10,25] [--where forward,spin,get_batch] [--loads 2,6]
        [--ranks 4] [--keep DIR] [--keep-wrong DIR]
    python benchmarks/tools/bench_stragglers.py --analyze DIR   # re-read kept runs
    python benchmarks/tools/bench_stragglers.py --script train.py --module GPT \
        --script-args "--device=cpu ..." --where spin,forward   # a third-party script

With --script, the job is that script, unchanged, under torchrun in its own
folder, and the fault is put in from outside it (fault_inject.py: torch's
global forward pre-hook on the model class --module, a spin or a wait);
--where takes spin and forward there.

Run it with the interpreter that has dftracer and torch installed (the
package, not a source tree: `make setup-test`, then `.venv/bin/python
benchmarks/tools/bench_stragglers.py`).  A share is of the balanced job's
median step, measured first at each load.  Each run takes 15 to 60 s on
a 2-core machine.  --keep DIR keeps every run's traces (with its case in
case.json), so that --analyze DIR can apply a later build's rule to the same
runs.
"""

from __future__ import annotations

import argparse
import glob
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench_tools import run_cli  # this script's folder is sys.path[0]

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "..", "..", "tests", "tools", "lm_ddp_prog.py")
INJECT = os.path.join(HERE, "fault_inject.py")
# --script: (path, its arguments, the model class slowed); None: PROG
SCRIPT: Optional[Tuple[str, List[str], str]] = None


WORK = ("compute", "data", "io", "comm", "checkpoint", "other")  # cause classes of work


def burn(stop: Any) -> None:
    while not stop.is_set():
        pass


def job(out: str, data: str, ranks: int, iters: int, slow: Optional[tuple]) -> None:
    """One traced job into out."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    cmd = [sys.executable, "-m", "dftracer", "run", "-q", "--log-file",
           os.path.join(out, "t"), "--", torchrun, "--standalone", "--nproc_per_node",
           str(ranks)]
    cwd = out
    if SCRIPT:
        path, args, module = SCRIPT
        cmd += [INJECT, "--module", module]
        if slow:
            kind = "--spin-ms" if slow[1] == "spin" else "--wait-ms"
            cmd += ["--rank", str(slow[0]), kind, f"{slow[2]:.2f}"]
        cmd += ["--", path] + args
        cwd = os.path.dirname(path)
    else:
        cmd += [PROG, data, "--iters", str(iters)]
        if slow:
            cmd += ["--slow-rank", str(slow[0]), "--slow", slow[1], "--slow-ms", f"{slow[2]:.2f}"]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        sys.exit(f"the job failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-4000:]}")


def summarize(out: str) -> Dict[str, Any]:
    report = out.rstrip("/") + ".json"
    run_cli(["summary", out, "--ranks", "--json", "--no-progress"], report)
    with open(report) as f:
        a = json.load(f)
    os.unlink(report)
    return a


def judge(a: Dict[str, Any], slow: Optional[Sequence[Any]]) -> Tuple[str, bool, str]:
    """(right / wrong / none / cpu, named with a work cause, a note)."""
    s = a["stragglers"]
    work = [x for x in s if x["cause_class"] in WORK]
    if not s:
        return "none", False, "-"
    x = s[0]
    note = (f"{x['rank']} {x['mean_lead_us'] / 1e3:.1f}+-{x['stderr_us'] / 1e3:.1f} "
            f"{x['cause_class']}:{x['cause_name']}")
    if slow and x["rank"] == slow[0] and x["cause_class"] in WORK:
        return "right", bool(work), note
    if not slow and not work:
        return "cpu", False, note
    return "wrong", bool(work), note


def run(base: str, data: str, ranks: int, iters: int, slow: Optional[tuple],
        keep: Optional[str] = None, keep_wrong: Optional[str] = None,
        case: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """One job's `summary --ranks --json`; its traces are removed, or kept
    under keep (every run) or keep_wrong (a run that named a rank it should
    not have) (a["kept"])."""
    out = tempfile.mkdtemp(prefix="run-", dir=keep or base)
    job(out, data, ranks, iters, slow)
    with open(os.path.join(out, "case.json"), "w") as f:
        json.dump({**(case or {}), "slow": slow}, f)
    a = summarize(out)
    verdict = judge(a, slow)[0]
    if keep:
        a["kept"] = out
    elif keep_wrong and verdict == "wrong":
        os.makedirs(keep_wrong, exist_ok=True)
        a["kept"] = shutil.move(out, os.path.join(keep_wrong, os.path.basename(out)))
    else:
        shutil.rmtree(out, ignore_errors=True)
    return a


HEAD = (f"{'load':<10} {'case':<16} {'runs':>4} {'right':>5} {'wrong':>5} {'none':>5} "
        f"{'cpu':>4} {'work-named':>10}  named (rank, mean lead ms +- se, cause) per run")


def row(load: str, case: str, got: List[Tuple[str, bool, str]], secs: float) -> str:
    n = {k: sum(1 for g in got if g[0] == k) for k in ("right", "wrong", "none", "cpu")}
    work = sum(1 for g in got if g[1])
    return (f"{load:<10} {case:<16} {len(got):>4} {n['right']:>5} {n['wrong']:>5} "
            f"{n['none']:>5} {n['cpu']:>4} {work:>10}  {'; '.join(g[2] for g in got)}"
            + (f"  ({secs:.0f} s)" if secs else ""))


def analyze(where: str) -> None:
    """The table of the runs kept under where, by the rule of this build."""
    cases: Dict[Tuple[int, str], List[Tuple[str, bool, str]]] = {}
    for d in sorted(glob.glob(os.path.join(where, "**", "case.json"), recursive=True)):
        with open(d) as f:
            c = json.load(f)
        got = judge(summarize(os.path.dirname(d)), c["slow"])
        cases.setdefault((c["burners"], c["case"]), []).append(got)
    print(HEAD)
    for (burners, case), got in sorted(cases.items(), key=lambda x: (x[0][0], _order(x[0][1]))):
        print(row(f"{burners} burners", case, got, 0), flush=True)


def _order(case: str) -> Tuple[float, str]:
    return (0.0, "") if case == "balanced" else (float(case.split("%")[0]), case)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--iters", type=int, default=60)
    p.add_argument("--shares", default="0,5,10,25", help="percent of the step; 0: balanced")
    p.add_argument("--where", default="forward,get_batch")
    p.add_argument("--loads", default="2", help="CPU burners beside the job, one load each")
    p.add_argument("--burners", type=int, default=None, help="(one load: --loads N)")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--keep", metavar="DIR", default=None,
                   help="keep every run's traces under DIR (for --analyze)")
    p.add_argument("--keep-wrong", metavar="DIR", default=None,
                   help="move the traces of each run that named a rank it should not have "
                        "(balanced: any) under DIR, to see why")
    p.add_argument("--script", default=None,
                   help="a third-party training script, run unchanged (in its folder)")
    p.add_argument("--script-args", default="", help="its arguments, one string")
    p.add_argument("--module", default="", help="with --script: the model class slowed")
    p.add_argument("--analyze", metavar="DIR", default=None,
                   help="run no job: the table of the runs kept under DIR by --keep")
    a = p.parse_args()
    if a.analyze:
        analyze(a.analyze)
        return
    if a.script:
        if not a.module:
            p.error("--script needs --module (the model class its forward slows)")
        bad = set(a.where.split(",")) - {"spin", "forward"}
        if bad:
            p.error(f"--where {','.join(sorted(bad))}: with --script, spin or forward")
        global SCRIPT
        SCRIPT = (os.path.abspath(a.script), a.script_args.split(), a.module)
    loads = [a.burners] if a.burners is not None else [int(x) for x in a.loads.split(",")]
    base = tempfile.mkdtemp(prefix="bench-stragglers-")
    data = os.path.join(base, "data")
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), "?")
    slow_rank = a.ranks // 2
    what = (f"{a.script} {a.script_args}" if a.script else f"{a.iters} iterations a run")
    print(f"CPU: {cpu}, {os.cpu_count()} cores; {a.ranks} ranks, {what}; "
          f"slowed rank {slow_rank}", flush=True)
    try:
        for burners in loads:
            stop = multiprocessing.Event()
            procs = [multiprocessing.Process(target=burn, args=(stop,), daemon=True)
                     for _ in range(burners)]
            for b in procs:
                b.start()
            keep = os.path.join(a.keep, f"b{burners}") if a.keep else None
            if keep:
                os.makedirs(keep, exist_ok=True)
            try:
                first = run(base, data, a.ranks, a.iters, None)
                step_ms = first["median_step_us"] / 1e3
                print(f"{burners} burners: balanced median step {step_ms:.1f} ms", flush=True)
                print(HEAD, flush=True)
                for share in [float(x) for x in a.shares.split(",")]:
                    for where in (a.where.split(",") if share else ["-"]):
                        case = "balanced" if not share else f"{share:g}% {where}"
                        got = []
                        t0 = time.time()
                        for _ in range(a.runs):
                            slow = (slow_rank, where, share / 100 * step_ms) if share else None
                            res = run(base, data, a.ranks, a.iters, slow, keep, a.keep_wrong,
                                      {"burners": burners, "case": case})
                            got.append(judge(res, slow))
                        print(row(f"{burners} burners", case, got, time.time() - t0),
                              flush=True)
            finally:
                stop.set()
                for b in procs:
                    b.join(timeout=5)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
