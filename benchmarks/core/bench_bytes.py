"""Compressed bytes per event on several event sets, ours beside a reference.

    PYTHONPATH=$PWD python3 benchmarks/core/bench_bytes.py [--events N] [--python REF_PYTHON]

Each set is N events from one thread, traced in a fresh process, with
DFTRACER_INC_METADATA on (our default) and off (dftracer 2.2.0's):
- one name: `log_event("aten::addmm", ...)`, timestamps 1 us apart, dur 1;
- one name, varying dur: the same with dur = i & 63;
- cycled names: 14 torch op names in turn, dur = i & 63;
- random mix: a random op name, timestamps 0 to 30 us apart, a random short
  duration (the mix of bench_writer.py);
- six names: `log_event` of six application-level names in turn (category
  "app"), timestamps 1 us apart, dur 1;
- decorator: a function decorated with `dft_fn("train").log`, called N times
  (the tracer's own clock: real timestamps and durations).
With --python, the same sets run under that interpreter (a venv whose
`dftracer.python` is pydftracer 2.0.6 over dftracer 2.2.0), side by side, and
the last column is ours / the reference's with metadata on and off (issue 29:
<= 0.85 on every set).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap

from op_mix import PHASE_HEADER  # this script's folder is sys.path[0]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SETS = ["one name", "one name, varying dur", "cycled names", "random mix", "six names",
        "decorator"]

PHASE = PHASE_HEADER + textwrap.dedent(
    r"""
    import glob, os, random, sys
    from dftracer.python import dftracer, dft_fn
    which, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    names = OP_NAMES
    durs = DURATIONS_US
    log = dftracer.initialize_log(out, None, -1)
    ev, ts = log.log_event, log.get_time()
    random.seed(1)
    if which == "one name":
        for i in range(n):
            ev("aten::addmm", "PP", ts + i, 1)
    elif which == "one name, varying dur":
        for i in range(n):
            ev("aten::addmm", "PP", ts + i, i & 63)
    elif which == "cycled names":
        for i in range(n):
            ev(names[i % 14], "PP", ts + i, i & 63)
    elif which == "random mix":
        for i in range(n):
            ts += random.randint(0, 30)
            ev(random.choice(names), "PP", ts, random.choice(durs))
    elif which == "six names":
        six = ["read", "write", "open", "close", "compute", "checkpoint"]
        for i in range(n):
            ev(six[i % 6], "app", ts + i, 1)
    else:
        @dft_fn("train").log
        def step(x):
            return x
        for i in range(n):
            step(i)
    log.finalize()
    files = glob.glob(os.path.join(os.path.dirname(out), "*.gz"))
    print(sum(os.path.getsize(p) for p in files) / n)
    """
)


def bytes_per_event(python: str, which: str, n: int, metadata: bool) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, DFTRACER_ENABLE="1", DFTRACER_INC_METADATA="1" if metadata else "0")
        if python == sys.executable:
            env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        else:  # the reference venv: its own dftracer
            env.pop("PYTHONPATH", None)
        proc = subprocess.run([python, "-c", PHASE, which, str(n), os.path.join(tmp, "t.pfw")],
                              env=env, cwd=tmp, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{which} under {python} failed:\n{proc.stderr[-2000:]}")
        return float(proc.stdout.split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--python", help="a reference interpreter (pydftracer 2.0.6)")
    a = ap.parse_args()
    pythons = [("dftracer", sys.executable)] + ([("reference", a.python)] if a.python else [])
    print(f"compressed bytes/event, {a.events:,} events per set (metadata on / off)")
    print(f"  {'event set':24s}" + "".join(f"{name:>18s}" for name, _ in pythons)
          + (f"{'ours / reference':>22s}" if a.python else ""))
    worst = 0.0
    for which in SETS:
        cells, sizes = [], []
        for _, py in pythons:
            on, off = (bytes_per_event(py, which, a.events, m) for m in (True, False))
            sizes.append((on, off))
            cells.append(f"{on:8.2f} / {off:5.2f}")
        if a.python:
            r_on, r_off = sizes[0][0] / sizes[1][0], sizes[0][1] / sizes[1][1]
            worst = max(worst, r_on, r_off)
            cells.append(f"{r_on:8.2f} / {r_off:5.2f}")
        print(f"  {which:24s}" + "".join(f"{c:>18s}" for c in cells[:len(pythons)])
              + (f"{cells[-1]:>22s}" if a.python else ""))
    if a.python:
        print(f"  largest ratio {worst:.2f} (target <= 0.85)")


if __name__ == "__main__":
    main()
