"""Sustained against burst: does the writer keep up with the hot path?

    PYTHONPATH=$PWD python3 benchmarks/core/bench_writer.py [--calls N] [--repeat R]
    PYTHONPATH=$PWD python3 benchmarks/core/bench_writer.py --python /path/to/venv/bin/python

Prints, measured side by side in one run (each phase in a fresh interpreter,
best of --repeat):
- `@Profile.log` on an empty function: the added cost per call in bursts
  (the writer drains, untimed, between bursts) and sustained (--calls calls in
  a row, the writer working meanwhile), and a minimal pure-Python timing
  wrapper (two clock reads and a sum) in the same process;
- `log_event` from one thread, --calls events in a row with compression on:
  ns/event and events/s (the loop, then the loop plus the final drain), and
  the same loop calling a Python function that only stores its four
  arguments (issue 29: log_event must not cost more);
- compressed bytes per event on a torch-like mix of op names (random names,
  timestamps a few microseconds apart, short durations), with and without two
  int args;
- the same lines recompressed by gzip -9 and xz -9e, to show what the best
  general-purpose compressors make of them;
- the writer alone (format + compress on one writer thread, no I/O, thread
  CPU time) from `_bench_writer` of the test extension (_dftracer_testcore:
  `make bench-writer` builds it, or DFTRACER_BUILD_TESTCORE=1 python setup.py
  build_ext --inplace), on the op mix with and without args, with the line
  encoder (what the writer uses while it keeps up) and with the fastest
  encoder (what it uses while it falls behind: ISA-L's igzip where the build
  has it), and the deflate backend's name.

With --python, the first three run under another interpreter whose
`dftracer.python` is pydftracer (the reference venv of docs/performance.md),
and --viztracer PYTHON adds VizTracer's per-call cost on the same empty
function, run by an interpreter that has VizTracer.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

from op_mix import PHASE_HEADER  # this script's folder is sys.path[0]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PHASE = PHASE_HEADER + textwrap.dedent(
    r"""
    import glob, json, os, sys, time
    phase, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    res = {}
    BOUND_LINES = 50_000  # xz -9e takes about a minute on these

    def empty():
        pass

    def loop(f, n):
        pc = time.perf_counter_ns
        s = pc()
        for _ in range(n):
            f()
        return (pc() - s) / n

    def py_wrap(f):
        clock = time.perf_counter_ns
        acc = [0]

        def wrapper(*a, **k):
            t0 = clock()
            r = f(*a, **k)
            acc[0] += clock() - t0
            return r
        return wrapper

    if phase == "viztracer":
        from viztracer import VizTracer
        plain = min(loop(empty, n) for _ in range(2))
        tr = VizTracer(output_file=out + ".json", verbose=0)
        tr.start()
        traced = min(loop(empty, n) for _ in range(2))
        tr.stop()
        res = {"sustained": traced - plain, "plain": plain}
        print(json.dumps(res))
        sys.exit(0)

    from dftracer.python import dftracer
    log = dftracer.initialize_log(out, None, -1)
    flush = getattr(log, "flush", lambda: None)  # pydftracer has none
    if phase == "profile":
        from dftracer.python import dft_fn as Profile
        logged = Profile("bench").log(empty)
        wrapped = py_wrap(empty)
        # Bursts that fit the thread's buffer; the writer drains between them.
        burst = {"plain": 1e9, "logged": 1e9}
        for _ in range(60):
            for name, f in (("plain", empty), ("logged", logged)):
                burst[name] = min(burst[name], loop(f, 4000))
                flush()
        # n calls in a row: wall time, this thread's CPU, the process's CPU
        # (the writer threads included).
        def timed(f):
            t, c = time.thread_time_ns(), time.process_time_ns()
            wall = loop(f, n)
            return wall, (time.thread_time_ns() - t) / n, (time.process_time_ns() - c) / n
        plain, plain_cpu, _ = min(timed(empty) for _ in range(2))
        py, py_cpu, _ = min(timed(wrapped) for _ in range(2))
        flush()
        sus, sus_cpu, sus_proc = timed(logged)
        flush()
        res = {"plain": plain, "burst": burst["logged"] - burst["plain"],
               "sustained": sus - plain, "py_wrapper": py - plain,
               "sustained_cpu": sus_cpu - plain_cpu, "sustained_proc_cpu": sus_proc - plain_cpu,
               "py_wrapper_cpu": py_cpu - plain_cpu}
    elif phase == "log_event":
        ev = log.log_event
        names = OP_NAMES
        def events(ev, names, ts, n):  # in a function: local, not global, lookups
            k = len(names)
            for i in range(n):
                ev(names[i % k], "PP", ts + i, i & 63)

        def nothing(ev, names, ts, n):  # the same loop without the call
            k = len(names)
            for i in range(n):
                (names[i % k], "PP", ts + i, i & 63)

        box = [None] * 4

        def store4(name, cat, ts, dur):  # a Python function that only stores its arguments
            box[0] = name
            box[1] = cat
            box[2] = ts
            box[3] = dur

        pc = time.perf_counter_ns
        ts = log.get_time()
        s = pc()
        nothing(ev, names, ts, n)
        floor = (pc() - s) / n
        s = pc()
        events(store4, names, ts, n)
        store = (pc() - s) / n
        t, c, s = time.thread_time_ns(), time.process_time_ns(), pc()
        events(ev, names, ts, n)
        loop_ns = (pc() - s) / n
        thread_cpu = (time.thread_time_ns() - t) / n
        log.finalize()
        res = {"loop_ns": loop_ns, "with_drain_ns": (pc() - s) / n, "thread_cpu": thread_cpu,
               "floor_ns": floor, "store_ns": store,
               "proc_cpu": (time.process_time_ns() - c) / n}
    elif phase in ("mix", "mix_noargs"):
        import random
        random.seed(1)
        names = OP_NAMES
        durs = DURATIONS_US

        def mix(ev, ts, n, args):
            for i in range(n):
                ts += random.randint(0, 30)
                if args:
                    ev(random.choice(names), "PP", ts, random.choice(durs),
                       {"device": 0, "input_size": random.choice(INPUT_SIZES)})
                else:
                    ev(random.choice(names), "PP", ts, random.choice(durs))

        mix(log.log_event, log.get_time(), n, phase == "mix")
        log.finalize()
        files = [p for p in glob.glob(os.path.join(os.path.dirname(out), "*"))
                 if os.path.basename(p).startswith(phase) and p.endswith(".gz")]
        res = {"bytes_per_event": sum(os.path.getsize(p) for p in files) / n}
        if phase == "mix_noargs":
            # What the best general-purpose compressors make of the same lines:
            # the first BOUND_LINES event lines of the trace, recompressed.
            import gzip, lzma, zlib
            lines = []
            for p in files:
                for line in gzip.decompress(open(p, "rb").read()).splitlines(keepends=True):
                    if b'"cat":"PP"' in line and len(lines) < BOUND_LINES:
                        lines.append(line)
            text = b"".join(lines)
            res["bound_lines"] = len(lines)
            res["zlib9"] = len(zlib.compress(text, 9)) / len(lines)
            res["xz9e"] = len(lzma.compress(text, preset=9 | lzma.PRESET_EXTREME)) / len(lines)
    elif phase == "writer":
        import _dftracer_testcore as core  # the test extension (see the docstring)
        name, version, level = core._compression_backend()
        res = {"backend": f"{name} {version} level {level}"}
        for key, with_args in (("args", True), ("noargs", False)):
            for enc in ("auto", "fastest"):
                res[f"{key}_{enc}"] = min(
                    (core._bench_writer(n, OP_NAMES, DURATIONS_US, INPUT_SIZES, args=with_args,
                                        encoder=enc) for _ in range(3)),
                    key=lambda r: r["format_s"] + r["compress_s"])
    print(json.dumps(res))
    """
)


def run_phase(python: str, phase: str, n: int, tmp: str, env_extra: dict) -> dict:
    out = os.path.join(tmp, f"{phase}.pfw")
    env = dict(os.environ, DFTRACER_ENABLE="1", DFTRACER_INC_METADATA="1", **env_extra)
    if python == sys.executable:
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    else:  # the reference venv: its own dftracer, not this checkout
        env.pop("PYTHONPATH", None)
    proc = subprocess.run([python, "-c", PHASE, phase, str(n), out], env=env, cwd=tmp,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"phase {phase} failed:\n{proc.stderr[-2000:]}")
    for p in os.listdir(tmp):
        if p.startswith(phase):
            os.unlink(os.path.join(tmp, p))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def best(python: str, phase: str, n: int, tmp: str, repeat: int, keys: list, env=None) -> dict:
    """The best (lowest) of each key over repeat fresh runs."""
    runs = [run_phase(python, phase, n, tmp, env or {}) for _ in range(repeat)]
    return {k: min(r[k] for r in runs) for k in keys}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=3_000_000, help="calls/events in a row")
    ap.add_argument("--mix-events", type=int, default=1_000_000)
    ap.add_argument("--writer-events", type=int, default=3_000_000)
    ap.add_argument("--repeat", type=int, default=3, help="fresh runs per phase (best kept)")
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter for the tracer phases (a reference venv)")
    ap.add_argument("--viztracer", metavar="PYTHON",
                    help="also time VizTracer, with this interpreter (one that has it)")
    a = ap.parse_args()
    ours = a.python == sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        prof = best(a.python, "profile", a.calls, tmp, a.repeat,
                    ["plain", "sustained", "burst", "py_wrapper", "sustained_cpu",
                     "sustained_proc_cpu", "py_wrapper_cpu"])
        lev = best(a.python, "log_event", a.calls, tmp, a.repeat,
                   ["loop_ns", "with_drain_ns", "thread_cpu", "proc_cpu", "floor_ns", "store_ns"])
        mix = best(a.python, "mix", a.mix_events, tmp, 1, ["bytes_per_event"]) if ours else None
        mix0 = best(a.python, "mix_noargs", a.mix_events, tmp, 1,
                    ["bytes_per_event", "bound_lines", "zlib9", "xz9e"])
        viz = (best(a.viztracer, "viztracer", a.calls // 3, tmp, a.repeat, ["sustained"])
               if a.viztracer else None)
        wr = run_phase(sys.executable, "writer", a.writer_events, tmp, {}) if ours else None

    print(f"interpreter: {a.python}" + ("" if ours else "  (reference: its own dftracer.python)"))
    print(f"@Profile.log on an empty function ({a.calls:,} calls in a row; bursts of 4,000)")
    print(f"  plain call                         {prof['plain']:8.1f} ns")
    print(f"  added, burst                       {prof['burst']:8.1f} ns")
    print(f"  added, sustained                   {prof['sustained']:8.1f} ns   (target <= 100)")
    print(f"  sustained / burst                  {prof['sustained'] / prof['burst']:8.2f} x    (target <= 1.5)")
    print(f"  minimal Python timing wrapper      {prof['py_wrapper']:8.1f} ns")
    print(f"  sustained / Python wrapper         {prof['sustained'] / prof['py_wrapper']:8.2f} x    (target <= 0.5)")
    print(f"  CPU added, sustained: this thread  {prof['sustained_cpu']:8.1f} ns, all threads "
          f"{prof['sustained_proc_cpu']:.1f} ns (Python wrapper {prof['py_wrapper_cpu']:.1f} ns)")
    print(f"log_event from one thread, {a.calls:,} in a row, compressed")
    print(f"  loop                               {lev['loop_ns']:8.1f} ns/event  "
          f"{1e3 / lev['loop_ns']:6.2f} M events/s   (target <= 150 ns)")
    print(f"  loop + final drain                 {lev['with_drain_ns']:8.1f} ns/event  "
          f"{1e3 / lev['with_drain_ns']:6.2f} M events/s")
    print(f"  the loop without the call          {lev['floor_ns']:8.1f} ns/event")
    print(f"  the loop calling a Python function that stores its four arguments "
          f"{lev['store_ns']:.1f} ns/event: log_event / it {lev['loop_ns'] / lev['store_ns']:.2f} x "
          f"(target <= 1)")
    print(f"  CPU: this thread                   {lev['thread_cpu']:8.1f} ns/event; all threads "
          f"{lev['proc_cpu']:.1f} ns/event")
    print(f"compressed bytes/event, torch-like op mix ({a.mix_events:,} events)")
    if mix:
        print(f"  with two int args                  {mix['bytes_per_event']:8.2f}")
    print(f"  without args                       {mix0['bytes_per_event']:8.2f}       "
          f"(benchmarks/core/bench_bytes.py compares with the reference)")
    print(f"  the same lines (first {mix0['bound_lines']:,}) recompressed: gzip -9 {mix0['zlib9']:.2f}, "
          f"xz -9e {mix0['xz9e']:.2f}")
    if viz:
        print(f"VizTracer on the same empty function {viz['sustained']:8.1f} ns added per call")
    if wr:
        print(f"writer alone, one writer thread ({wr['backend']}; thread CPU time)")
        for key, what in (("noargs", "op mix, no args (the log_event line)"),
                          ("args", "op mix with two int args")):
            for enc, how in (("auto", "the line encoder (while the writer keeps up)"),
                             ("fastest", "the fastest encoder (while it falls behind)")):
                r = wr[f"{key}_{enc}"]
                ev = r["events"]
                fmt, cmp_ = r["format_s"] / ev * 1e9, r["compress_s"] / ev * 1e9
                print(f"  {what}, {how}: {ev:,} events")
                print(f"    format                           {fmt:8.1f} ns/event  {r['json_bytes'] / ev:6.1f} JSON bytes/event")
                print(f"    compress                         {cmp_:8.1f} ns/event  {r['gz_bytes'] / ev:6.2f} bytes/event"
                      f"  ({r['json_bytes'] / r['compress_s'] / 1e9:.2f} GB/s of JSON)")
                print(f"    format + compress                {fmt + cmp_:8.1f} ns/event  "
                      f"{1e3 / (fmt + cmp_):6.2f} M events/s   (target >= 10)")


if __name__ == "__main__":
    main()
