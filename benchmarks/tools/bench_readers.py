"""Events per CPU second of the readers (`dftracer summary`, `--ranks`,
`--io`) against `zcat | wc -l` of the same trace, measured side by side in
one run (issue 53; docs/performance.md, "Reading").

The trace is written by the tracer itself: one process making `log_event`
calls (POSIX reads with 4 integer args), so the lines are exactly the
writer's. Each command runs in a fresh process, in turns, --rounds times
after one warm-up turn (Python's modules byte-compiled, as an install has
them: PYTHONDONTWRITEBYTECODE is unset for the commands);
its CPU time (user + system, Python's start included) comes from the
kernel's accounting of the child, so other work on the machine moves it
less than wall time. The CLI is the `dftracer` of the Python that runs this
script (the installed package; PYTHONPATH=<tree> for a source tree), and
of each --python given beside it (another build, for a before/after in one
run: NAME=PYTHON, or NAME=PYTHON@TREE for a tree built in place, which then
goes first on that build's PYTHONPATH).

    python3 benchmarks/tools/bench_readers.py                      # 2 M events, 5 rounds
    python3 benchmarks/tools/bench_readers.py --events 500000 --rounds 3
    python3 benchmarks/tools/bench_readers.py --python before=/tmp/before/venv/bin/python
    PYTHONPATH=$PWD python benchmarks/tools/bench_readers.py --python before=$PWD/.venv/bin/python@/tmp/before
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List, Tuple

GEN = r"""
import sys
from dftracer.python import dftracer
log = dftracer.initialize_log(sys.argv[1], None, -1)
t = 1000
for i in range(int(sys.argv[2])):
    log.log_event("read", "POSIX", t, 7, {"fd": 3 + (i & 63), "count": 4096, "ret": 4096,
                                          "offset": i * 4096})
    t += 10
log.finalize()
"""

PASSES = [("summary", []), ("summary --ranks", ["--ranks"]), ("summary --io", ["--io"])]


def cpu_of(cmd: List[str], cwd: str, env: Dict[str, str]) -> float:
    """User + system CPU seconds of cmd (and what it starts) to its end."""
    with open(os.devnull, "w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.PIPE)
        _, status, ru = os.wait4(proc.pid, 0)
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{err}")
    return ru.ru_utime + ru.ru_stime


def generate(python: str, where: str, events: int, env: Dict[str, str]) -> str:
    gen_env = dict(env, DFTRACER_ENABLE="1")
    subprocess.run([python, "-c", GEN, os.path.join(where, "trace"), str(events)], cwd=where,
                   env=gen_env, check=True)
    files = [os.path.join(where, f) for f in os.listdir(where) if f.endswith(".pfw.gz")]
    if len(files) != 1:
        sys.exit(f"expected one trace file in {where}, found {files}")
    return files[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=2_000_000, help="events in the trace")
    ap.add_argument("--rounds", type=int, default=5, help="turns of every command (median)")
    ap.add_argument("--python", action="append", default=[], metavar="NAME=PYTHON",
                    help="another build's Python to measure beside this one")
    ap.add_argument("--dir", default=None, help="where to write the trace (default: a temp dir)")
    opts = ap.parse_args()
    if opts.events < 1 or opts.rounds < 1:
        ap.error("--events and --rounds must be at least 1")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    # Python's start as an install has it: modules byte-compiled (pip compiles
    # them), not compiled from source on every start; a warm-up turn below
    # writes the caches where they are missing
    no_pyc = env.pop("PYTHONDONTWRITEBYTECODE", None) is not None
    builds: List[Tuple[str, str, Dict[str, str]]] = [("this", sys.executable, env)]
    for spec in opts.python:
        name, sep, rest = spec.partition("=")
        py, at, tree = rest.partition("@")
        if not sep or not os.path.exists(py) or (at and not os.path.isdir(tree)):
            ap.error(f"--python {spec!r}: give NAME=PYTHON or NAME=PYTHON@TREE (existing paths)")
        build_env = dict(env)
        if at:
            build_env["PYTHONPATH"] = os.path.abspath(tree)
        builds.append((name, py, build_env))
    if not shutil.which("zcat"):
        sys.exit("zcat is not installed: it is the yardstick")
    where = opts.dir or tempfile.mkdtemp(prefix="bench-readers-")
    os.makedirs(where, exist_ok=True)
    try:
        path = generate(sys.executable, where, opts.events, env)
        lines = int(subprocess.run(f"zcat '{path}' | wc -l", shell=True, capture_output=True,
                                   text=True, check=True).stdout)
        cpu = (subprocess.run(["grep", "-m1", "model name", "/proc/cpuinfo"], capture_output=True,
                              text=True).stdout.split(":")[-1].strip() or "unknown CPU")
        print(f"{opts.events:,} events ({lines:,} lines, {os.path.getsize(path) / 1e6:.1f} MB "
              f"of gzip); {cpu}, {os.cpu_count()} CPUs; {opts.rounds} rounds, medians of CPU s")
        if no_pyc:
            print("PYTHONDONTWRITEBYTECODE is unset for the commands measured (modules "
                  "byte-compiled, as installed)")
        times: Dict[str, List[float]] = {}
        # cwd: the trace's folder, so no source tree is imported by accident;
        # round 0 is the warm-up (byte code written, file in the page cache)
        for turn in range(opts.rounds + 1):
            t = cpu_of(["sh", "-c", f"zcat '{path}' | wc -l"], where, env)
            if turn:
                times.setdefault("zcat | wc -l", []).append(t)
            for name, py, build_env in builds:
                for label, flags in PASSES:
                    cmd = [py, "-m", "dftracer", "summary", path, "-j", "1", *flags]
                    t = cpu_of(cmd, where, build_env)
                    if turn:
                        times.setdefault(f"{label} ({name})", []).append(t)
        base = statistics.median(times["zcat | wc -l"])
        print(f"{'command':32} {'CPU s':>7} {'M events/s':>11} {'x zcat':>7}")
        for label, ts in times.items():
            m = statistics.median(ts)
            print(f"{label:32} {m:7.3f} {opts.events / m / 1e6:11.2f} {base / m:7.2f}")
    finally:
        if not opts.dir:
            shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()
