"""Instructions per traced event, counted by callgrind (repeatable on a busy
machine, unlike wall time): a run with N decorated calls and N log_event calls
minus a run with none, divided by N.  All threads are counted, so the writer's
formatting and deflate are included.

    python3 benchmarks/core/bench_instructions.py [--events N]

Compare two builds by running it with each one's PYTHONPATH (the child runs in a
scratch folder, so the current one cannot shadow it)."""

import argparse
import os
import re
import subprocess
import sys
import tempfile

CHILD = r"""
import os, sys, tempfile
os.environ["DFTRACER_ENABLE"] = "1"
from dftracer.python import dftracer, dft_fn as Profile
log = dftracer.initialize_log(os.path.join(tempfile.mkdtemp(), "t.pfw"), None, -1)
p = Profile("bench")
@p.log
def f(x):
    return x
def main(n):
    for i in range(n):
        f(i)
    for i in range(n):
        log.log_event("ev", "cat", 1, 2, int_args={"k": i})
main(int(sys.argv[1]))
log.finalize()
"""


def instructions(n: int) -> int:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        env = dict(os.environ, DFTRACER_CLOCK="monotonic")  # valgrind's TSC is not the kernel's
        proc = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                               sys.executable, "-c", CHILD, str(n)],
                              capture_output=True, text=True, env=env, cwd=d)
        m = re.search(r"Collected : (\d+)", proc.stderr)
        if proc.returncode != 0 or not m:
            sys.exit(f"callgrind failed:\n{proc.stderr[-2000:]}")
        return int(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    a = ap.parse_args()
    base, full = instructions(0), instructions(a.events)
    print(f"{(full - base) / a.events:,.0f} instructions per decorated call + log_event pair "
          f"(all threads; {a.events:,} of each)")


if __name__ == "__main__":
    main()
